package tencent

import (
	"net"
	"strings"
	"testing"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

func TestMapState(t *testing.T) {
	cases := []struct {
		in    string
		state provider.State
		live  bool
	}{
		{"PENDING", provider.StatePending, true},
		{"STARTING", provider.StatePending, true},
		{"REBOOTING", provider.StatePending, true},
		{"RUNNING", provider.StateRunning, true},
		{"SERVICE_LIVE_MIGRATE", provider.StateRunning, true},
		{"STOPPING", provider.StateStopping, true},
		{"STOPPED", provider.StateStopped, true},
		{"TERMINATING", provider.StateTerminating, true},
		{"RESCUE_MODE", provider.StateTerminating, true},
		{"SHUTDOWN", "", false},
		{"LAUNCH_FAILED", "", false},
		{"SOMETHING_NEW", provider.StatePending, true},
		{"", provider.StatePending, true},
	}
	for _, c := range cases {
		state, live := mapState(c.in)
		if state != c.state || live != c.live {
			t.Errorf("mapState(%q) = %q, %v; want %q, %v", c.in, state, live, c.state, c.live)
		}
	}
}

func TestToInstance(t *testing.T) {
	seen := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
	base := func(state string, public []string, tags ...tag) cvmInstance {
		return cvmInstance{
			InstanceId: "ins-00000001", InstanceType: "GN7.2XLARGE32", InstanceState: state,
			InstanceChargeType: "SPOTPAID", Placement: placement{Zone: "ap-singapore-1"},
			PrivateIpAddresses: []string{"10.0.0.5"}, PublicIpAddresses: public,
			CreatedTime: "2026-07-31T10:00:00Z",
			Tags:        append([]tag{{TagPool, "chat"}}, tags...),
		}
	}
	cases := []struct {
		name     string
		in       cvmInstance
		state    provider.State
		live     bool
		address  string
		launched time.Time
	}{
		{"running public", base("RUNNING", []string{"203.0.113.7"}), provider.StateRunning, true, "203.0.113.7:8080", time.Date(2026, 7, 31, 10, 0, 0, 0, time.UTC)},
		{"running, public IP not yet assigned", base("RUNNING", nil), provider.StateRunning, true, "", time.Date(2026, 7, 31, 10, 0, 0, 0, time.UTC)},
		{"running private with port", base("RUNNING", nil, tag{TagAddress, AddressPrivate}, tag{TagPort, "11434"}), provider.StateRunning, true, "10.0.0.5:11434", time.Date(2026, 7, 31, 10, 0, 0, 0, time.UTC)},
		{"bad port tag falls back", base("RUNNING", []string{"203.0.113.7"}, tag{TagPort, "http"}), provider.StateRunning, true, "203.0.113.7:8080", time.Date(2026, 7, 31, 10, 0, 0, 0, time.UTC)},
		{"pending has no address", base("PENDING", []string{"203.0.113.7"}), provider.StatePending, true, "", time.Date(2026, 7, 31, 10, 0, 0, 0, time.UTC)},
		{"terminating has no address", base("TERMINATING", []string{"203.0.113.7"}), provider.StateTerminating, true, "", time.Date(2026, 7, 31, 10, 0, 0, 0, time.UTC)},
		{"shutdown not live", base("SHUTDOWN", nil), "", false, "", time.Date(2026, 7, 31, 10, 0, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, live := toInstance(&c.in, seen)
			if got.State != c.state || live != c.live || got.Address != c.address {
				t.Fatalf("got state %q live %v address %q; want %q %v %q", got.State, live, got.Address, c.state, c.live, c.address)
			}
			if !got.LaunchedAt.Equal(c.launched) {
				t.Errorf("LaunchedAt %s, want %s", got.LaunchedAt, c.launched)
			}
			if got.Pool != "chat" || got.Zone != "ap-singapore-1" || got.Market != provider.MarketSpot || got.PrivateIP != "10.0.0.5" {
				t.Errorf("identity fields wrong: %+v", got)
			}
		})
	}
	t.Run("no CreatedTime uses first seen; on-demand", func(t *testing.T) {
		c := base("RUNNING", nil)
		c.CreatedTime = ""
		c.InstanceChargeType = "POSTPAID_BY_HOUR"
		got, _ := toInstance(&c, seen)
		if !got.LaunchedAt.Equal(seen) || got.Market != provider.MarketOnDemand {
			t.Errorf("got %s %s", got.LaunchedAt, got.Market)
		}
	})
}

func TestClassify(t *testing.T) {
	cases := []struct {
		code string
		want errKind
	}{
		{"RequestLimitExceeded", kindThrottled},
		{"RequestLimitExceeded.UinLimitExceeded", kindThrottled},
		{"RequestLimitExceededX", kindOther},
		{"ResourceInsufficient.SpecifiedInstanceType", kindCapacity},
		{"ResourceInsufficient.ZoneSoldOutForSpecifiedInstance", kindCapacity},
		{"ResourcesSoldOut.SpecifiedInstanceType", kindCapacity},
		{"ResourcesSoldOut.AvailableZone", kindCapacity},
		{"ResourceUnavailable.InstanceType", kindCapacity},
		{"InvalidParameterValue.InsufficientOffering", kindCapacity},
		{"LimitExceeded.SpotQuota", kindCapacity},
		{"InvalidZone.MismatchRegion", kindOther},
		{"LimitExceeded.UserSpotQuota", kindOther},
		{"LimitExceeded.InstanceQuota", kindOther},
		{"InvalidParameterValue.InsufficientPrice", kindOther},
		{"AuthFailure.SignatureFailure", kindOther},
		{"ClientError.NetworkError", kindTransient},
		{"ClientError.HttpStatusCodeError", kindTransient},
		{"InternalError", kindTransient},
		{"InternalError.TradeUnknownError", kindTransient},
		{"InternalServerError", kindTransient},
		{"", kindOther},
	}
	for _, c := range cases {
		if got := classify(c.code); got != c.want {
			t.Errorf("classify(%q) = %d, want %d", c.code, got, c.want)
		}
	}
}

func TestGoneOnTerminate(t *testing.T) {
	cases := map[string]bool{
		"InvalidInstanceId.NotFound":                     true,
		"UnsupportedOperation.InstanceStateTerminated":   true,
		"UnsupportedOperation.InstanceStateTerminating":  true,
		"UnsupportedOperation.InstanceStateLaunchFailed": true,
		"InvalidInstanceId.Malformed":                    false,
		"RequestLimitExceeded":                           false,
		"UnsupportedOperation.InstancesProtected":        false,
		"": false,
	}
	for code, want := range cases {
		if got := goneOnTerminate(code); got != want {
			t.Errorf("goneOnTerminate(%q) = %v, want %v", code, got, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		attempt   int
		base, max time.Duration
		jitter    float64
		want      time.Duration
	}{
		{0, 100 * ms, time.Second, 0, 50 * ms},
		{0, 100 * ms, time.Second, 0.5, 75 * ms},
		{1, 100 * ms, time.Second, 0, 100 * ms},
		{3, 100 * ms, time.Second, 0, 400 * ms},
		{4, 100 * ms, time.Second, 0, 500 * ms}, // capped at 1s, half fixed
		{60, 100 * ms, time.Second, 0, 500 * ms},
		{60, 100 * ms, time.Second, 2, time.Second - 1}, // jitter clamped below 1
		{2, 0, time.Second, 0.5, 0},
		{0, 100 * ms, time.Second, -1, 50 * ms},
	}
	for _, c := range cases {
		got := backoff(c.attempt, c.base, c.max, c.jitter)
		if got < c.want-time.Microsecond || got > c.want+time.Microsecond {
			t.Errorf("backoff(%d, %s, %s, %v) = %s, want %s", c.attempt, c.base, c.max, c.jitter, got, c.want)
		}
	}
}

func TestClientToken(t *testing.T) {
	long := strings.Repeat("x", 65)
	cases := []struct {
		in   string
		want func(string) bool
	}{
		{"", func(s string) bool { return s == "" }},
		{"abc-123", func(s string) bool { return s == "abc-123" }},
		{strings.Repeat("y", 64), func(s string) bool { return s == strings.Repeat("y", 64) }},
		{long, func(s string) bool { return len(s) == 64 && s != long[:64] }},
		{"has space", func(s string) bool { return len(s) == 64 }},
		{"ünïcode", func(s string) bool { return len(s) == 64 }},
	}
	for _, c := range cases {
		got := clientToken(c.in)
		if !c.want(got) {
			t.Errorf("clientToken(%q) = %q", c.in, got)
		}
		if got != clientToken(c.in) {
			t.Errorf("clientToken(%q) is not deterministic", c.in)
		}
	}
	if clientToken(long) == clientToken(long+"z") {
		t.Error("different long tokens map to the same ClientToken")
	}
}

func TestInstanceName(t *testing.T) {
	if got := instanceName("chat"); got != "tidegpu-chat" {
		t.Errorf("got %q", got)
	}
	if got := instanceName(strings.Repeat("p", 100)); len(got) != maxInstanceName {
		t.Errorf("long name has %d bytes", len(got))
	}
}

func TestResolveTarget(t *testing.T) {
	spec := &tidev1.TidePoolSpec{AvailabilityZone: "ap-singapore-1", InstanceType: "GN7.2XLARGE32", InstanceChargeType: tidev1.ChargeOnDemand}
	cases := []struct {
		name string
		req  provider.LaunchRequest
		want launchTarget
	}{
		{"spec", provider.LaunchRequest{Spec: spec}, launchTarget{"ap-singapore-1", "GN7.2XLARGE32", provider.MarketOnDemand}},
		{"request overrides", provider.LaunchRequest{Spec: spec, Zone: "ap-singapore-2", InstanceType: "GN7.5XLARGE80", Market: provider.MarketSpot},
			launchTarget{"ap-singapore-2", "GN7.5XLARGE80", provider.MarketSpot}},
		{"spot by default", provider.LaunchRequest{Spec: &tidev1.TidePoolSpec{}}, launchTarget{Market: provider.MarketSpot}},
		{"first placement zone without spec zone", provider.LaunchRequest{Spec: &tidev1.TidePoolSpec{InstanceType: "GN7.2XLARGE32",
			Placement: &tidev1.PlacementSpec{AvailabilityZones: []string{"ap-singapore-3", "ap-singapore-1"}}}},
			launchTarget{"ap-singapore-3", "GN7.2XLARGE32", provider.MarketSpot}},
		{"nil spec", provider.LaunchRequest{}, launchTarget{Market: provider.MarketSpot}},
	}
	for _, c := range cases {
		if got := resolveTarget(c.req); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestBuildRunInstances(t *testing.T) {
	cfg := launchConfig{Region: "ap-singapore", Cluster: "prod", SpotMaxPrice: "1.05", PublicBandwidthMb: 10}
	spec := func(mut func(*tidev1.TidePoolSpec)) *tidev1.TidePoolSpec {
		s := &tidev1.TidePoolSpec{
			Region: "ap-singapore", AvailabilityZone: "ap-singapore-1", InstanceType: "GN7.2XLARGE32",
			ImageID: "img-abc", VpcID: "vpc-1", SubnetID: "subnet-1", SecurityGroupIDs: []string{"sg-1"},
			InstanceChargeType: tidev1.ChargeSpot,
		}
		if mut != nil {
			mut(s)
		}
		return s
	}
	t.Run("spot with public IP", func(t *testing.T) {
		p, err := buildRunInstances(provider.LaunchRequest{Pool: "chat", Spec: spec(nil), Token: "tok-1"}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if p.InstanceChargeType != "SPOTPAID" || p.InstanceMarketOptions == nil ||
			p.InstanceMarketOptions.MarketType != "spot" || p.InstanceMarketOptions.SpotOptions.SpotInstanceType != "one-time" ||
			p.InstanceMarketOptions.SpotOptions.MaxPrice != "1.05" {
			t.Errorf("market: %+v %+v", p.InstanceChargeType, p.InstanceMarketOptions)
		}
		if p.ClientToken != "tok-1" || p.InstanceCount != 1 || p.Placement.Zone != "ap-singapore-1" || p.ImageId != "img-abc" {
			t.Errorf("basics: %+v", p)
		}
		if p.VirtualPrivateCloud == nil || p.VirtualPrivateCloud.SubnetId != "subnet-1" || len(p.SecurityGroupIds) != 1 {
			t.Errorf("network: %+v", p)
		}
		if p.InternetAccessible == nil || !p.InternetAccessible.PublicIpAssigned || p.InternetAccessible.InternetMaxBandwidthOut != 10 {
			t.Errorf("internet: %+v", p.InternetAccessible)
		}
		tags := map[string]string{}
		for _, tg := range p.TagSpecification[0].Tags {
			tags[tg.Key] = tg.Value
		}
		want := map[string]string{TagManagedBy: "tidegpu", TagCluster: "prod", TagPool: "chat", TagPort: "8080", TagAddress: "public"}
		for k, v := range want {
			if tags[k] != v {
				t.Errorf("tag %s = %q, want %q", k, tags[k], v)
			}
		}
		if p.TagSpecification[0].ResourceType != "instance" {
			t.Errorf("resource type %q", p.TagSpecification[0].ResourceType)
		}
	})
	t.Run("on-demand private", func(t *testing.T) {
		s := spec(func(s *tidev1.TidePoolSpec) {
			s.InstanceChargeType = tidev1.ChargeOnDemand
			s.Serving = tidev1.ServingSpec{UsePrivateIP: true, Port: 11434}
		})
		p, err := buildRunInstances(provider.LaunchRequest{Pool: "chat", Spec: s}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if p.InstanceChargeType != "POSTPAID_BY_HOUR" || p.InstanceMarketOptions != nil || p.InternetAccessible != nil {
			t.Errorf("got %+v", p)
		}
		if tg := p.TagSpecification[0].Tags; tg[3].Value != "11434" || tg[4].Value != "private" {
			t.Errorf("tags %+v", tg)
		}
	})
	t.Run("zonal subnet", func(t *testing.T) {
		s := spec(func(s *tidev1.TidePoolSpec) {
			s.Placement = &tidev1.PlacementSpec{SubnetIDs: map[string]string{"ap-singapore-2": "subnet-2"}}
		})
		p, err := buildRunInstances(provider.LaunchRequest{Pool: "chat", Spec: s, Zone: "ap-singapore-2"}, cfg)
		if err != nil || p.VirtualPrivateCloud == nil || p.VirtualPrivateCloud.SubnetId != "subnet-2" || p.Placement.Zone != "ap-singapore-2" {
			t.Errorf("got %+v %+v, %v", p.Placement, p.VirtualPrivateCloud, err)
		}
		p, err = buildRunInstances(provider.LaunchRequest{Pool: "chat", Spec: s, Zone: "ap-singapore-1"}, cfg)
		if err != nil || p.VirtualPrivateCloud.SubnetId != "subnet-1" {
			t.Errorf("zone without an entry: %+v, %v", p.VirtualPrivateCloud, err)
		}
	})
	t.Run("request market wins", func(t *testing.T) {
		p, err := buildRunInstances(provider.LaunchRequest{Pool: "chat", Spec: spec(nil), Market: provider.MarketOnDemand}, cfg)
		if err != nil || p.InstanceChargeType != "POSTPAID_BY_HOUR" {
			t.Errorf("got %v %v", p.InstanceChargeType, err)
		}
	})
	bad := []struct {
		name string
		req  provider.LaunchRequest
		want string
	}{
		{"no spec", provider.LaunchRequest{Pool: "chat"}, "no spec"},
		{"no pool", provider.LaunchRequest{Spec: spec(nil)}, "without a pool"},
		{"other region", provider.LaunchRequest{Pool: "chat", Spec: spec(func(s *tidev1.TidePoolSpec) { s.Region = "ap-tokyo" })}, "spec.region"},
		{"no zone", provider.LaunchRequest{Pool: "chat", Spec: spec(func(s *tidev1.TidePoolSpec) { s.AvailabilityZone = "" })}, "availabilityZone"},
		{"no type", provider.LaunchRequest{Pool: "chat", Spec: spec(func(s *tidev1.TidePoolSpec) { s.InstanceType = "" })}, "instanceType"},
		{"no image", provider.LaunchRequest{Pool: "chat", Spec: spec(func(s *tidev1.TidePoolSpec) { s.ImageID = "" })}, "imageId"},
		{"vpc without subnet", provider.LaunchRequest{Pool: "chat", Spec: spec(func(s *tidev1.TidePoolSpec) { s.SubnetID = "" })}, "subnetId"},
	}
	for _, c := range bad {
		if _, err := buildRunInstances(c.req, cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}

func TestPickPrice(t *testing.T) {
	live := func(v float64) priceEntry { return priceEntry{price: v, hasPrice: true} }
	none := priceEntry{}
	cases := []struct {
		name      string
		m         provider.Market
		live, od  priceEntry
		cat       float64
		inCatalog bool
		price     float64
		source    string
	}{
		{"spot live", provider.MarketSpot, live(0.3), live(1.5), 1.2, true, 0.3, provider.PriceLive},
		{"spot from live on-demand", provider.MarketSpot, none, live(1.5), 1.2, true, 1.5, provider.PriceFallback},
		{"spot from catalog", provider.MarketSpot, none, none, 1.2, true, 1.2, provider.PriceFallback},
		{"spot unknown", provider.MarketSpot, none, none, 0, false, 0, ""},
		{"on-demand live", provider.MarketOnDemand, live(1.5), live(1.5), 1.2, true, 1.5, provider.PriceLive},
		{"on-demand catalog", provider.MarketOnDemand, none, none, 1.2, true, 1.2, provider.PriceCatalog},
		{"on-demand unknown", provider.MarketOnDemand, none, none, 0, false, 0, ""},
	}
	for _, c := range cases {
		p, s := pickPrice(c.m, c.live, c.od, c.cat, c.inCatalog)
		if p != c.price || s != c.source {
			t.Errorf("%s: got %v %q, want %v %q", c.name, p, s, c.price, c.source)
		}
	}
}

func TestEndpoint(t *testing.T) {
	cases := []struct {
		in, scheme, host string
		err              bool
	}{
		{"", "HTTPS", "", false},
		{"cvm.ap-singapore.tencentcloudapi.com", "HTTPS", "cvm.ap-singapore.tencentcloudapi.com", false},
		{"http://127.0.0.1:8080", "HTTP", "127.0.0.1:8080", false},
		{"https://cvm.example:443/", "HTTPS", "cvm.example:443", false},
		{"ftp://x", "", "", true},
		{"http://", "", "", true},
	}
	for _, c := range cases {
		scheme, host, err := endpoint(c.in)
		if (err != nil) != c.err || scheme != c.scheme || host != c.host {
			t.Errorf("endpoint(%q) = %q %q %v", c.in, scheme, host, err)
		}
	}
}

func TestOptionsStringRedactsSecret(t *testing.T) {
	o := Options{Region: "ap-singapore", SecretID: "AKIDsecretid", SecretKey: "verysecretkey"}
	for _, s := range []string{o.String(), o.GoString()} {
		if strings.Contains(s, "verysecretkey") || strings.Contains(s, "AKIDsecretid") {
			t.Errorf("secret in %q", s)
		}
	}
}

func TestCatalogPrices(t *testing.T) {
	for typ, p := range catalog {
		if p <= 0 {
			t.Errorf("%s: price %v", typ, p)
		}
	}
	if _, ok := catalogPrice("GN7.2XLARGE32"); !ok {
		t.Error("GN7.2XLARGE32 missing")
	}
	if _, ok := catalogPrice("S5.MEDIUM2"); ok {
		t.Error("non-GPU type in catalog")
	}
}

func TestParseDescribeInstances(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		total int
		n     int
		err   bool
	}{
		{"ok", `{"Response":{"TotalCount":2,"InstanceSet":[{"InstanceId":"ins-1","InstanceState":"RUNNING","PublicIpAddresses":null},{"InstanceId":"ins-2"}],"RequestId":"r"}}`, 2, 2, false},
		{"empty", `{"Response":{"TotalCount":0,"InstanceSet":[],"RequestId":"r"}}`, 0, 0, false},
		{"error object", `{"Response":{"Error":{"Code":"InvalidFilter","Message":"m"},"RequestId":"r"}}`, 0, 0, true},
		{"no Response", `{"TotalCount":1}`, 0, 0, true},
		{"null Response", `{"Response":null}`, 0, 0, true},
		{"no TotalCount", `{"Response":{"InstanceSet":[]}}`, 0, 0, true},
		{"negative total", `{"Response":{"TotalCount":-1,"InstanceSet":[]}}`, 0, 0, true},
		{"instance without id", `{"Response":{"TotalCount":1,"InstanceSet":[{"InstanceState":"RUNNING"}]}}`, 0, 0, true},
		{"wrong type", `{"Response":{"TotalCount":"2","InstanceSet":[]}}`, 0, 0, true},
		{"not json", `<html>`, 0, 0, true},
	}
	for _, c := range cases {
		pg, err := parseDescribeInstances([]byte(c.body))
		if (err != nil) != c.err || pg.TotalCount != c.total || len(pg.Instances) != c.n {
			t.Errorf("%s: got %+v, %v", c.name, pg, err)
		}
	}
	_, err := parseDescribeInstances([]byte(`{"Response":{"Error":{"Code":"InvalidFilter","Message":"m"},"RequestId":"r"}}`))
	if apiCode(err) != "InvalidFilter" {
		t.Errorf("error code not kept: %v", err)
	}
}

func TestParseRunInstances(t *testing.T) {
	ids, err := parseRunInstances([]byte(`{"Response":{"InstanceIdSet":["ins-1"],"RequestId":"r"}}`))
	if err != nil || len(ids) != 1 || ids[0] != "ins-1" {
		t.Errorf("got %v %v", ids, err)
	}
	if _, err := parseRunInstances([]byte(`{"Response":{"InstanceIdSet":[""]}}`)); err == nil {
		t.Error("empty id accepted")
	}
	if _, err := parseRunInstances([]byte(`{"Response":{"Error":{"Code":"ResourceInsufficient.SpecifiedInstanceType"}}}`)); apiCode(err) != "ResourceInsufficient.SpecifiedInstanceType" {
		t.Errorf("got %v", err)
	}
}

func TestParseInquiryPrice(t *testing.T) {
	cases := []struct {
		name string
		body string
		want float64
		err  bool
	}{
		{"discounted", `{"Response":{"Price":{"InstancePrice":{"UnitPrice":1.5,"UnitPriceDiscount":0.3,"ChargeUnit":"HOUR"}}}}`, 0.3, false},
		{"list only", `{"Response":{"Price":{"InstancePrice":{"UnitPrice":1.5,"ChargeUnit":"HOUR"}}}}`, 1.5, false},
		{"zero discount uses list", `{"Response":{"Price":{"InstancePrice":{"UnitPrice":1.5,"UnitPriceDiscount":0}}}}`, 1.5, false},
		{"no price", `{"Response":{"Price":{}}}`, 0, true},
		{"no unit price", `{"Response":{"Price":{"InstancePrice":{"ChargeUnit":"HOUR"}}}}`, 0, true},
		{"monthly", `{"Response":{"Price":{"InstancePrice":{"UnitPrice":1.5,"ChargeUnit":"MONTH"}}}}`, 0, true},
		{"negative", `{"Response":{"Price":{"InstancePrice":{"UnitPrice":-1}}}}`, 0, true},
	}
	for _, c := range cases {
		got, err := parseInquiryPrice([]byte(c.body))
		if (err != nil) != c.err || got != c.want {
			t.Errorf("%s: got %v %v", c.name, got, err)
		}
	}
}

// FuzzParseDescribeInstances feeds arbitrary answers to the DescribeInstances
// parser and the instance mapping: no panic, and whatever is accepted keeps
// the invariants the provider relies on.
func FuzzParseDescribeInstances(f *testing.F) {
	f.Add([]byte(`{"Response":{"TotalCount":1,"InstanceSet":[{"InstanceId":"ins-1","InstanceState":"RUNNING","PublicIpAddresses":["1.2.3.4"],"PrivateIpAddresses":["10.0.0.1"],"CreatedTime":"2026-01-01T00:00:00Z","Tags":[{"Key":"tidegpu.eja.dev/pool","Value":"p"},{"Key":"tidegpu.eja.dev/port","Value":"99999"}]}],"RequestId":"r"}}`))
	f.Add([]byte(`{"Response":{"TotalCount":0,"InstanceSet":null}}`))
	f.Add([]byte(`{"Response":{"Error":{"Code":"X","Message":"y"}}}`))
	f.Add([]byte(`{"Response":{"TotalCount":3,"InstanceSet":[{"InstanceId":"a","Tags":[{"Key":"tidegpu.eja.dev/address","Value":"private"}],"InstanceState":"RUNNING","PrivateIpAddresses":["::1"]}]}}`))
	f.Add([]byte(`null`))
	seen := time.Unix(0, 0)
	f.Fuzz(func(t *testing.T, body []byte) {
		pg, err := parseDescribeInstances(body)
		if err != nil {
			return
		}
		if pg.TotalCount < 0 {
			t.Fatalf("negative total accepted: %d", pg.TotalCount)
		}
		for i := range pg.Instances {
			c := &pg.Instances[i]
			if c.InstanceId == "" {
				t.Fatal("instance without id accepted")
			}
			in, live := toInstance(c, seen)
			if in.ID != c.InstanceId {
				t.Fatalf("id changed: %q -> %q", c.InstanceId, in.ID)
			}
			if in.Address != "" {
				if in.State != provider.StateRunning || !live {
					t.Fatalf("address %q on a %q instance", in.Address, in.State)
				}
				host, port, err := net.SplitHostPort(in.Address)
				if err != nil || host == "" || port == "" || port == "0" {
					t.Fatalf("bad address %q: %v", in.Address, err)
				}
			}
			if !live && in.State != "" {
				t.Fatalf("non-live instance with state %q", in.State)
			}
		}
	})
}

// FuzzParseInquiryPrice: no panic; an accepted price is never negative.
func FuzzParseInquiryPrice(f *testing.F) {
	f.Add([]byte(`{"Response":{"Price":{"InstancePrice":{"UnitPrice":1.5,"UnitPriceDiscount":0.3,"ChargeUnit":"HOUR"}}}}`))
	f.Add([]byte(`{"Response":{"Price":null}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := parseInquiryPrice(body)
		if err == nil && p < 0 {
			t.Fatalf("negative price %v accepted", p)
		}
	})
}
