package aws

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

func apiErr(code string) error {
	return &smithy.GenericAPIError{Code: code, Message: "m"}
}

func TestStateOf(t *testing.T) {
	cases := []struct {
		in    types.InstanceStateName
		want  provider.State
		alive bool
	}{
		{types.InstanceStateNamePending, provider.StatePending, true},
		{types.InstanceStateNameRunning, provider.StateRunning, true},
		{types.InstanceStateNameShuttingDown, provider.StateTerminating, true},
		{types.InstanceStateNameStopping, provider.StateStopping, true},
		{types.InstanceStateNameStopped, provider.StateStopped, true},
		{types.InstanceStateNameTerminated, "", false},
		{"rebooting-someday", "", false},
		{"", "", false},
	}
	for _, c := range cases {
		got, alive := stateOf(c.in)
		if got != c.want || alive != c.alive {
			t.Errorf("stateOf(%q) = %q, %v; want %q, %v", c.in, got, alive, c.want, c.alive)
		}
	}
}

func TestClassify(t *testing.T) {
	wrapped := func(code string) error { return fmt.Errorf("operation error EC2: RunInstances: %w", apiErr(code)) }
	maxAttempts := func(code string) error { return &retry.MaxAttemptsError{Attempt: 3, Err: apiErr(code)} }
	cases := []struct {
		name      string
		err       error
		capacity  bool
		throttled bool
	}{
		{"nil", nil, false, false},
		{"ICE", wrapped("InsufficientInstanceCapacity"), true, false},
		{"insufficient capacity", wrapped("InsufficientCapacity"), true, false},
		{"unfulfillable", wrapped("UnfulfillableCapacity"), true, false},
		{"spot price too low", wrapped("SpotMaxPriceTooLow"), true, false},
		{"spot count", wrapped("MaxSpotInstanceCountExceeded"), true, false},
		{"unsupported in zone", wrapped("Unsupported"), true, false},
		{"request limit", wrapped("RequestLimitExceeded"), false, true},
		{"throttling", wrapped("Throttling"), false, true},
		{"throttled after max attempts", maxAttempts("RequestLimitExceeded"), false, true},
		{"not found", wrapped("InvalidInstanceID.NotFound"), false, false},
		{"auth", wrapped("AuthFailure"), false, false},
		{"plain", errors.New("connection refused"), false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classify(c.err, "us-east-1a", "g5.xlarge", provider.MarketSpot)
			if c.err == nil {
				if got != nil {
					t.Fatalf("classify(nil) = %v", got)
				}
				return
			}
			if provider.IsInsufficientCapacity(got) != c.capacity || provider.IsThrottled(got) != c.throttled {
				t.Fatalf("classify(%v): capacity=%v throttled=%v, want %v %v", c.err, provider.IsInsufficientCapacity(got), provider.IsThrottled(got), c.capacity, c.throttled)
			}
			if !errors.Is(got, c.err) {
				t.Errorf("classify lost the cause: %v", got)
			}
			var ice *provider.InsufficientCapacityError
			if errors.As(got, &ice) && (ice.Zone != "us-east-1a" || ice.InstanceType != "g5.xlarge" || ice.Market != provider.MarketSpot) {
				t.Errorf("ICE names %+v", ice)
			}
		})
	}
}

func TestNoRetryForCapacity(t *testing.T) {
	cases := []struct {
		err  error
		want aws.Ternary
	}{
		{apiErr("InsufficientInstanceCapacity"), aws.FalseTernary},
		{apiErr("Unsupported"), aws.FalseTernary},
		{apiErr("RequestLimitExceeded"), aws.UnknownTernary},
		{errors.New("eof"), aws.UnknownTernary},
	}
	for _, c := range cases {
		if got := noRetryForCapacity(c.err); got != c.want {
			t.Errorf("noRetryForCapacity(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	// The retryer as configured: capacity errors are final even though
	// EC2 sends them with HTTP 500; throttling is retried.
	r := newRetryer(5, time.Millisecond, time.Second)
	if r.IsErrorRetryable(apiErr("InsufficientInstanceCapacity")) {
		t.Error("retryer retries ICE")
	}
	if !r.IsErrorRetryable(apiErr("RequestLimitExceeded")) {
		t.Error("retryer does not retry RequestLimitExceeded")
	}
	if r.MaxAttempts() != 5 {
		t.Errorf("MaxAttempts = %d", r.MaxAttempts())
	}
}

func TestBackoffCeiling(t *testing.T) {
	cases := []struct {
		attempt   int
		base, max time.Duration
		want      time.Duration
	}{
		{0, 100 * time.Millisecond, 20 * time.Second, 100 * time.Millisecond},
		{1, 100 * time.Millisecond, 20 * time.Second, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 20 * time.Second, 200 * time.Millisecond},
		{5, 100 * time.Millisecond, 20 * time.Second, 1600 * time.Millisecond},
		{9, 100 * time.Millisecond, 20 * time.Second, 20 * time.Second},
		{1000, 100 * time.Millisecond, 20 * time.Second, 20 * time.Second},
		{3, time.Second, 500 * time.Millisecond, 500 * time.Millisecond},
	}
	for _, c := range cases {
		if got := backoffCeiling(c.attempt, c.base, c.max); got != c.want {
			t.Errorf("backoffCeiling(%d, %v, %v) = %v, want %v", c.attempt, c.base, c.max, got, c.want)
		}
	}
	// Full jitter: the draw scales the ceiling.
	for _, r := range []float64{0, 0.5, 0.999} {
		b := jitterBackoff{base: 100 * time.Millisecond, max: time.Second, rand: func() float64 { return r }}
		got, _ := b.BackoffDelay(3, nil)
		if want := time.Duration(r * float64(400*time.Millisecond)); got != want {
			t.Errorf("BackoffDelay(3) with draw %v = %v, want %v", r, got, want)
		}
	}
}

func TestAddress(t *testing.T) {
	cases := []struct {
		priv, pub string
		port      int32
		private   bool
		want      string
	}{
		{"10.0.0.5", "198.51.100.7", 8080, true, "10.0.0.5:8080"},
		{"10.0.0.5", "198.51.100.7", 11434, false, "198.51.100.7:11434"},
		{"10.0.0.5", "", 8080, false, ""},
		{"", "198.51.100.7", 8080, true, ""},
		{"10.0.0.5", "", 0, true, "10.0.0.5:8080"},
		{"fd00::5", "", 8000, true, "[fd00::5]:8000"},
	}
	for _, c := range cases {
		if got := address(c.priv, c.pub, c.port, c.private); got != c.want {
			t.Errorf("address(%q, %q, %d, %v) = %q, want %q", c.priv, c.pub, c.port, c.private, got, c.want)
		}
	}
}

func TestClientToken(t *testing.T) {
	long := strings.Repeat("x", 65)
	cases := []struct {
		in       string
		same     bool
		wantLen  int
		stableOK bool
	}{
		{"0123456789abcdef0123456789abcdef", true, 32, true},
		{strings.Repeat("a", 64), true, 64, true},
		{long, false, 64, true},
		{"has space", false, 64, true},
		{"ünïcode", false, 64, true},
		{"", false, 32, false},
	}
	for _, c := range cases {
		got := clientToken(c.in)
		if (got == c.in) != c.same || len(got) != c.wantLen || !printableASCII(got) {
			t.Errorf("clientToken(%q) = %q", c.in, got)
		}
		if again := clientToken(c.in); (again == got) != c.stableOK {
			t.Errorf("clientToken(%q) stable = %v, want %v", c.in, again == got, c.stableOK)
		}
	}
}

func testSpec() *tidev1.TidePoolSpec {
	return &tidev1.TidePoolSpec{
		Provider:           tidev1.ProviderAWS,
		Region:             "us-east-1",
		AvailabilityZone:   "us-east-1a",
		InstanceType:       "g5.xlarge",
		ImageID:            "ami-0abc",
		SubnetID:           "subnet-1",
		SecurityGroupIDs:   []string{"sg-1", "sg-2"},
		InstanceChargeType: tidev1.ChargeSpot,
		Serving:            tidev1.ServingSpec{Port: 11434, UsePrivateIP: true},
	}
}

func testSpecNoZone() *tidev1.TidePoolSpec {
	s := testSpec()
	s.AvailabilityZone = ""
	return s
}

func TestResolveLaunch(t *testing.T) {
	onDemand := testSpec()
	onDemand.InstanceChargeType = tidev1.ChargeOnDemand
	noImage := testSpec()
	noImage.ImageID = ""
	noType := testSpec()
	noType.InstanceType = ""
	noPort := testSpec()
	noPort.Serving.Port = 0
	zonal := testSpec()
	zonal.SubnetID = "subnet-default"
	zonal.Placement = &tidev1.PlacementSpec{SubnetIDs: map[string]string{"us-east-1b": "subnet-b"}}
	cases := []struct {
		name    string
		req     provider.LaunchRequest
		wantErr bool
		check   func(launchParams) string
	}{
		{"spec defaults", provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "t1"}, false, func(lp launchParams) string {
			if lp.Zone != "us-east-1a" || lp.InstanceType != "g5.xlarge" || lp.Market != provider.MarketSpot || lp.Token != "t1" || lp.Port != 11434 || !lp.UsePrivate {
				return fmt.Sprintf("%+v", lp)
			}
			return ""
		}},
		{"request overrides", provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Zone: "us-east-1b", InstanceType: "g6.xlarge", Market: provider.MarketOnDemand}, false, func(lp launchParams) string {
			if lp.Zone != "us-east-1b" || lp.InstanceType != "g6.xlarge" || lp.Market != provider.MarketOnDemand {
				return fmt.Sprintf("%+v", lp)
			}
			return ""
		}},
		{"zonal subnet", provider.LaunchRequest{Pool: "chat", Spec: zonal, Zone: "us-east-1b"}, false, func(lp launchParams) string {
			if lp.SubnetID != "subnet-b" {
				return "subnet " + lp.SubnetID
			}
			return ""
		}},
		{"zone without a subnet entry uses spec.subnetId", provider.LaunchRequest{Pool: "chat", Spec: zonal, Zone: "us-east-1c"}, false, func(lp launchParams) string {
			if lp.SubnetID != zonal.SubnetID {
				return "subnet " + lp.SubnetID
			}
			return ""
		}},
		{"charge type on-demand", provider.LaunchRequest{Pool: "chat", Spec: onDemand}, false, func(lp launchParams) string {
			if lp.Market != provider.MarketOnDemand {
				return string(lp.Market)
			}
			return ""
		}},
		{"default port", provider.LaunchRequest{Pool: "chat", Spec: noPort}, false, func(lp launchParams) string {
			if lp.Port != DefaultServingPort {
				return fmt.Sprint(lp.Port)
			}
			return ""
		}},
		{"no spec", provider.LaunchRequest{Pool: "chat"}, true, nil},
		{"no pool", provider.LaunchRequest{Spec: testSpec()}, true, nil},
		{"pool too long", provider.LaunchRequest{Pool: strings.Repeat("p", 257), Spec: testSpec()}, true, nil},
		{"no image", provider.LaunchRequest{Pool: "chat", Spec: noImage}, true, nil},
		{"no type", provider.LaunchRequest{Pool: "chat", Spec: noType}, true, nil},
		{"bad market", provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Market: "reserved"}, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lp, err := resolveLaunch(c.req)
			if c.wantErr {
				if !errors.Is(err, ErrInvalidRequest) {
					t.Fatalf("err = %v, want ErrInvalidRequest", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := c.check(lp); msg != "" {
				t.Errorf("unexpected params: %s", msg)
			}
		})
	}
}

func tagMap(tags []types.Tag) map[string]string {
	m := map[string]string{}
	for _, t := range tags {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}

func TestRunInput(t *testing.T) {
	lp, err := resolveLaunch(provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	in := runInput(lp, "prod")
	if aws.ToInt32(in.MinCount) != 1 || aws.ToInt32(in.MaxCount) != 1 {
		t.Errorf("counts %d/%d", aws.ToInt32(in.MinCount), aws.ToInt32(in.MaxCount))
	}
	if aws.ToString(in.ImageId) != "ami-0abc" || in.InstanceType != "g5.xlarge" || aws.ToString(in.ClientToken) != "tok" {
		t.Errorf("image/type/token: %v %v %v", aws.ToString(in.ImageId), in.InstanceType, aws.ToString(in.ClientToken))
	}
	if in.Placement == nil || aws.ToString(in.Placement.AvailabilityZone) != "us-east-1a" || aws.ToString(in.SubnetId) != "subnet-1" || len(in.SecurityGroupIds) != 2 {
		t.Errorf("placement/network: %+v %v %v", in.Placement, aws.ToString(in.SubnetId), in.SecurityGroupIds)
	}
	mo := in.InstanceMarketOptions
	if mo == nil || mo.MarketType != types.MarketTypeSpot || mo.SpotOptions == nil ||
		mo.SpotOptions.SpotInstanceType != types.SpotInstanceTypeOneTime ||
		mo.SpotOptions.InstanceInterruptionBehavior != types.InstanceInterruptionBehaviorTerminate {
		t.Errorf("market options %+v", mo)
	}
	if len(in.TagSpecifications) != 2 || in.TagSpecifications[0].ResourceType != types.ResourceTypeInstance || in.TagSpecifications[1].ResourceType != types.ResourceTypeVolume {
		t.Fatalf("tag specs %+v", in.TagSpecifications)
	}
	want := map[string]string{
		TagManagedBy: "tidegpu", TagCluster: "prod", TagPool: "chat", TagLaunchToken: "tok",
		TagServingPort: "11434", TagServingIP: "private", TagName: "tidegpu-chat",
	}
	for _, spec := range in.TagSpecifications {
		got := tagMap(spec.Tags)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s tag %s = %q, want %q", spec.ResourceType, k, got[k], v)
			}
		}
	}

	lp.Market, lp.Zone, lp.SubnetID, lp.SecurityGroups = provider.MarketOnDemand, "", "", nil
	in = runInput(lp, "prod")
	if in.InstanceMarketOptions != nil || in.Placement != nil || in.SubnetId != nil || in.SecurityGroupIds != nil {
		t.Errorf("on-demand without zone/network sets %+v %+v %v %v", in.InstanceMarketOptions, in.Placement, in.SubnetId, in.SecurityGroupIds)
	}
}

func TestOwnerFromTags(t *testing.T) {
	tag := func(k, v string) types.Tag { return types.Tag{Key: aws.String(k), Value: aws.String(v)} }
	cases := []struct {
		name    string
		tags    []types.Tag
		want    owner
		ours    bool
		cluster string
	}{
		{"ours", ownershipTags(owner{Cluster: "c1", Pool: "p", Token: "t", Port: 9000, UsePrivate: true}),
			owner{Managed: true, Cluster: "c1", Pool: "p", Token: "t", Port: 9000, UsePrivate: true}, true, "c1"},
		{"other cluster", ownershipTags(owner{Cluster: "c2", Pool: "p", Token: "t", Port: 9000}),
			owner{Managed: true, Cluster: "c2", Pool: "p", Token: "t", Port: 9000}, false, "c1"},
		{"unmanaged", []types.Tag{tag(TagCluster, "c1"), tag(TagPool, "p")},
			owner{Cluster: "c1", Pool: "p", Port: DefaultServingPort}, false, "c1"},
		{"wrong managed-by", []types.Tag{tag(TagManagedBy, "karpenter"), tag(TagCluster, "c1")},
			owner{Cluster: "c1", Port: DefaultServingPort}, false, "c1"},
		{"bad port", []types.Tag{tag(TagManagedBy, "tidegpu"), tag(TagCluster, "c1"), tag(TagServingPort, "99999")},
			owner{Managed: true, Cluster: "c1", Port: DefaultServingPort}, true, "c1"},
		{"zero port", []types.Tag{tag(TagServingPort, "0")}, owner{Port: DefaultServingPort}, false, "c1"},
		{"nil key and value", []types.Tag{{}}, owner{Port: DefaultServingPort}, false, "c1"},
		{"no tags", nil, owner{Port: DefaultServingPort}, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ownerFromTags(c.tags)
			if got != c.want {
				t.Errorf("ownerFromTags = %+v, want %+v", got, c.want)
			}
			if got.ours(c.cluster) != c.ours {
				t.Errorf("ours(%q) = %v", c.cluster, got.ours(c.cluster))
			}
		})
	}
}

func TestInstanceFrom(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	launched := now.Add(-time.Minute)
	raw := types.Instance{
		InstanceId:        aws.String("i-1"),
		State:             &types.InstanceState{Name: types.InstanceStateNameRunning},
		InstanceLifecycle: types.InstanceLifecycleTypeSpot,
		InstanceType:      "g5.xlarge",
		Placement:         &types.Placement{AvailabilityZone: aws.String("us-east-1b")},
		PrivateIpAddress:  aws.String("10.0.0.9"),
		PublicIpAddress:   aws.String("198.51.100.9"),
		LaunchTime:        &launched,
	}
	got, live := instanceFrom(raw, owner{Pool: "chat", Port: 8000, UsePrivate: true}, now)
	want := provider.Instance{ID: "i-1", Pool: "chat", Zone: "us-east-1b", InstanceType: "g5.xlarge", Market: provider.MarketSpot,
		State: provider.StateRunning, PrivateIP: "10.0.0.9", PublicIP: "198.51.100.9", Address: "10.0.0.9:8000", LaunchedAt: launched}
	if !live || got.ID != want.ID || got.Pool != want.Pool || got.Zone != want.Zone || got.Market != want.Market ||
		got.State != want.State || got.Address != want.Address || !got.LaunchedAt.Equal(want.LaunchedAt) {
		t.Errorf("instanceFrom = %+v, %v; want %+v", got, live, want)
	}
	raw.InstanceLifecycle, raw.LaunchTime, raw.State = "", nil, &types.InstanceState{Name: types.InstanceStateNameStopped}
	got, live = instanceFrom(raw, owner{Pool: "chat", UsePrivate: true}, now)
	if !live || got.State != provider.StateStopped || got.Market != provider.MarketOnDemand || !got.LaunchedAt.Equal(now) {
		t.Errorf("stopped on-demand: %+v live=%v", got, live)
	}
	if got.Address != "" || got.PrivateIP != "10.0.0.9" {
		t.Errorf("a stopped instance serves nothing, so has no address: %+v", got)
	}
	raw.State = &types.InstanceState{Name: types.InstanceStateNameTerminated}
	if _, live = instanceFrom(raw, owner{}, now); live {
		t.Error("terminated instance is live")
	}
	raw.State = nil
	if _, live = instanceFrom(raw, owner{}, now); live {
		t.Error("instance without state is live")
	}
}

func TestMergeRecent(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	grace := 2 * time.Minute
	inst := func(id string, at time.Time) provider.Instance {
		return provider.Instance{ID: id, Pool: "p", State: provider.StatePending, LaunchedAt: at}
	}
	cases := []struct {
		name     string
		items    []provider.Instance
		recent   map[string]recentLaunch
		now      time.Time
		wantIDs  []string
		wantKeep []string
	}{
		{"empty", nil, nil, t0, []string{}, []string{}},
		{"not yet visible is added", []provider.Instance{inst("i-a", t0)},
			map[string]recentLaunch{"i-b": {inst("i-b", t0.Add(time.Second)), t0.Add(time.Second)}},
			t0.Add(10 * time.Second), []string{"i-a", "i-b"}, []string{"i-b"}},
		{"visible is forgotten", []provider.Instance{inst("i-a", t0), inst("i-b", t0.Add(time.Second))},
			map[string]recentLaunch{"i-b": {inst("i-b", t0.Add(time.Second)), t0.Add(time.Second)}},
			t0.Add(10 * time.Second), []string{"i-a", "i-b"}, []string{}},
		{"expired is dropped", nil,
			map[string]recentLaunch{"i-b": {inst("i-b", t0), t0}},
			t0.Add(grace), []string{}, []string{}},
		{"sorted by launch then id", []provider.Instance{inst("i-z", t0), inst("i-y", t0)},
			map[string]recentLaunch{"i-a": {inst("i-a", t0.Add(-time.Second)), t0}},
			t0, []string{"i-a", "i-y", "i-z"}, []string{"i-a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, keep := mergeRecent(c.items, c.recent, c.now, grace)
			ids := []string{}
			for _, in := range got {
				ids = append(ids, in.ID)
			}
			if fmt.Sprint(ids) != fmt.Sprint(c.wantIDs) {
				t.Errorf("ids = %v, want %v", ids, c.wantIDs)
			}
			if len(keep) != len(c.wantKeep) {
				t.Errorf("keep = %v, want %v", keep, c.wantKeep)
			}
			for _, id := range c.wantKeep {
				if _, ok := keep[id]; !ok {
					t.Errorf("keep lacks %s", id)
				}
			}
		})
	}
}

func TestParsePrice(t *testing.T) {
	cases := []struct {
		in   string
		want float64
		ok   bool
	}{
		{"0.401200", 0.4012, true},
		{" 1.5 ", 1.5, true},
		{"0", 0, true},
		{"", 0, false},
		{"-0.1", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"1e400", 0, false},
		{"$0.40", 0, false},
	}
	for _, c := range cases {
		got, ok := parsePrice(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parsePrice(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestLatestSpotPrices(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	sp := func(itype, zone, product, price string, at time.Time) types.SpotPrice {
		return types.SpotPrice{InstanceType: types.InstanceType(itype), AvailabilityZone: aws.String(zone),
			ProductDescription: types.RIProductDescription(product), SpotPrice: aws.String(price), Timestamp: aws.Time(at)}
	}
	history := []types.SpotPrice{
		sp("g5.xlarge", "us-east-1a", "Linux/UNIX", "0.50", t0.Add(-2*time.Hour)),
		sp("g5.xlarge", "us-east-1a", "Linux/UNIX", "0.40", t0.Add(-time.Hour)),
		sp("g5.xlarge", "us-east-1a", "Linux/UNIX", "0.45", t0.Add(-90*time.Minute)),
		sp("g5.xlarge", "us-east-1b", "Linux/UNIX", "garbage", t0),
		sp("g5.xlarge", "us-east-1c", "Windows", "0.90", t0),
		sp("g6.xlarge", "us-east-1d", "Linux/UNIX", "0.30", t0),
		sp("g5.xlarge", "", "Linux/UNIX", "0.30", t0),
		sp("g5.xlarge", "us-east-1e", "Linux/UNIX", "0.33", t0),
	}
	got := latestSpotPrices(history, "g5.xlarge")
	want := map[string]float64{"us-east-1a": 0.40, "us-east-1e": 0.33}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("latestSpotPrices = %v, want %v", got, want)
	}
}

func TestOfferingZones(t *testing.T) {
	spot := map[string]map[string]float64{
		"g5.xlarge": {"us-east-1c": 1, "us-east-1a": 1},
		"g6.xlarge": {"us-east-1a": 1, "us-east-1d": 1},
	}
	cases := []struct {
		spec       []string
		configured []string
		spot       map[string]map[string]float64
		want       []string
	}{
		{[]string{"us-east-1b"}, []string{"us-east-1a"}, spot, []string{"us-east-1b"}},
		{[]string{"us-east-1b", "us-east-1e"}, nil, spot, []string{"us-east-1b", "us-east-1e"}},
		{nil, []string{"us-east-1f"}, spot, []string{"us-east-1f"}},
		{nil, nil, spot, []string{"us-east-1a", "us-east-1c", "us-east-1d"}},
		{nil, nil, nil, []string{""}},
	}
	for _, c := range cases {
		if got := offeringZones(c.spec, c.configured, c.spot); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("offeringZones(%q, %v) = %v, want %v", c.spec, c.configured, got, c.want)
		}
	}
}

func TestBuildOfferings(t *testing.T) {
	none := func(offeringKey) bool { return false }
	iceA := func(k offeringKey) bool { return k.Zone == "a" && k.Market == provider.MarketSpot }
	cases := []struct {
		name    string
		zones   []string
		spot    map[string]float64
		od      float64
		odKnown bool
		unavail func(offeringKey) bool
		want    []provider.Offering
	}{
		{"live and fallback", []string{"a", "b"}, map[string]float64{"a": 0.4}, 1.006, true, none, []provider.Offering{
			{InstanceType: "g5.xlarge", Zone: "a", Market: provider.MarketSpot, PricePerHour: 0.4, Currency: "USD", PriceSource: provider.PriceLive, Available: true},
			{InstanceType: "g5.xlarge", Zone: "a", Market: provider.MarketOnDemand, PricePerHour: 1.006, Currency: "USD", PriceSource: provider.PriceCatalog, Available: true},
			{InstanceType: "g5.xlarge", Zone: "b", Market: provider.MarketSpot, PricePerHour: 1.006, Currency: "USD", PriceSource: provider.PriceFallback, Available: true},
			{InstanceType: "g5.xlarge", Zone: "b", Market: provider.MarketOnDemand, PricePerHour: 1.006, Currency: "USD", PriceSource: provider.PriceCatalog, Available: true},
		}},
		{"no prices known", []string{"a"}, nil, 0, false, none, []provider.Offering{
			{InstanceType: "g5.xlarge", Zone: "a", Market: provider.MarketSpot, Currency: "USD", Available: true},
			{InstanceType: "g5.xlarge", Zone: "a", Market: provider.MarketOnDemand, Currency: "USD", Available: true},
		}},
		{"capacity refused", []string{"a"}, map[string]float64{"a": 0.4}, 1.006, true, iceA, []provider.Offering{
			{InstanceType: "g5.xlarge", Zone: "a", Market: provider.MarketSpot, PricePerHour: 0.4, Currency: "USD", PriceSource: provider.PriceLive, Available: false},
			{InstanceType: "g5.xlarge", Zone: "a", Market: provider.MarketOnDemand, PricePerHour: 1.006, Currency: "USD", PriceSource: provider.PriceCatalog, Available: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := buildOfferings("g5.xlarge", c.zones, c.spot, c.od, c.odKnown, c.unavail)
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestOnDemandPrice(t *testing.T) {
	cases := []struct {
		region, itype string
		want          float64
		ok            bool
	}{
		{"us-east-1", "g5.xlarge", 1.006, true},
		{"us-west-2", "g4dn.xlarge", 0.526, true},
		{"eu-west-1", "g5.xlarge", 0, false},
		{"us-east-1", "m5.large", 0, false},
	}
	for _, c := range cases {
		got, ok := onDemandPrice(c.region, c.itype)
		if got != c.want || ok != c.ok {
			t.Errorf("onDemandPrice(%s, %s) = %v, %v", c.region, c.itype, got, ok)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	base := func() Options { return Options{Region: "us-east-1", Cluster: "c"} }
	cases := []struct {
		name string
		mod  func(*Options)
		ok   bool
	}{
		{"defaults", func(*Options) {}, true},
		{"no region", func(o *Options) { o.Region = "" }, false},
		{"no cluster", func(o *Options) { o.Cluster = "" }, false},
		{"cluster too long", func(o *Options) { o.Cluster = strings.Repeat("c", 257) }, false},
		{"page too small", func(o *Options) { o.ListPageSize = 4 }, false},
		{"page too big", func(o *Options) { o.ListPageSize = 1001 }, false},
		{"half credentials", func(o *Options) { o.Credentials = &StaticCredentials{AccessKeyID: "AKID"} }, false},
		{"full credentials", func(o *Options) { o.Credentials = &StaticCredentials{AccessKeyID: "AKID", SecretAccessKey: "s"} }, true},
	}
	for _, c := range cases {
		o := base()
		c.mod(&o)
		o.setDefaults()
		err := o.validate()
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalidOptions)) {
			t.Errorf("%s: validate = %v", c.name, err)
		}
	}
}

func TestCredentialsNeverPrinted(t *testing.T) {
	const secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	const session = "FQoGZXIvYXdzEXAMPLESESSION"
	c := &StaticCredentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: secret, SessionToken: session}
	o := Options{Region: "us-east-1", Cluster: "c", Credentials: c}
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("opts", "creds", *c, "credsPtr", c)
	for _, s := range []string{
		fmt.Sprintf("%v", o), fmt.Sprintf("%+v", o), fmt.Sprintf("%#v", o),
		fmt.Sprintf("%v", c), fmt.Sprintf("%+v", *c), fmt.Sprintf("%#v", *c), fmt.Sprint(*c), logged.String(),
	} {
		if strings.Contains(s, secret) || strings.Contains(s, session) {
			t.Errorf("secret printed: %s", s)
		}
	}
}
