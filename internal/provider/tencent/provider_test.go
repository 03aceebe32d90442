package tencent_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/tencent"
	"github.com/tidegpu/tidegpu/internal/provider/tencent/cvmtest"
)

// These tests drive the real SDK common client over a real socket against
// the cvmtest fake, which checks the TC3 signature of every call.

const (
	region = "ap-singapore"
	zone   = "ap-singapore-1"
	gpu    = "GN7.2XLARGE32"
)

func newFake(t *testing.T) *cvmtest.Server {
	t.Helper()
	f := cvmtest.NewServer(region)
	t.Cleanup(f.Close)
	return f
}

// newProvider returns a provider talking to f, with fast backoff and a
// generous rate limit; mutate adjusts the options.
func newProvider(t *testing.T, f *cvmtest.Server, mutate func(*tencent.Options)) *tencent.Provider {
	t.Helper()
	o := tencent.Options{
		Region:      region,
		SecretID:    cvmtest.TestSecretID,
		SecretKey:   cvmtest.TestSecretKey,
		Endpoint:    f.URL,
		Cluster:     "test",
		RateLimit:   1000,
		Burst:       1000,
		BackoffBase: time.Millisecond,
		BackoffMax:  10 * time.Millisecond,
		MaxAttempts: 12,
	}
	if mutate != nil {
		mutate(&o)
	}
	p, err := tencent.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func poolSpec(mut func(*tidev1.TidePoolSpec)) *tidev1.TidePoolSpec {
	s := &tidev1.TidePoolSpec{
		Provider: tidev1.ProviderTencent, Region: region, AvailabilityZone: zone, InstanceType: gpu,
		ImageID: "img-llm01", VpcID: "vpc-aaaa1111", SubnetID: "subnet-bbbb2222",
		SecurityGroupIDs: []string{"sg-cccc3333"}, InstanceChargeType: tidev1.ChargeSpot,
		Minimum: 1, Maximum: 4,
	}
	if mut != nil {
		mut(s)
	}
	return s
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// params decodes a recorded call's body.
func params(t *testing.T, c cvmtest.Call) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(c.Params, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func callsOf(f *cvmtest.Server, action string) []cvmtest.Call {
	var out []cvmtest.Call
	for _, c := range f.Calls() {
		if c.Action == action {
			out = append(out, c)
		}
	}
	return out
}

var authRE = regexp.MustCompile(`^TC3-HMAC-SHA256 Credential=` + regexp.QuoteMeta(cvmtest.TestSecretID) +
	`/\d{4}-\d{2}-\d{2}/cvm/tc3_request, SignedHeaders=content-type;host, Signature=[0-9a-f]{64}$`)

func TestLaunchSpotCarriesMarketTagsAndToken(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(o *tencent.Options) { o.SpotMaxPrice = "0.80" })
	in, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "launch-token-1"})
	if err != nil {
		t.Fatal(err)
	}
	if in.State != provider.StatePending || in.Market != provider.MarketSpot || in.Zone != zone || in.InstanceType != gpu || in.Pool != "chat" {
		t.Errorf("launched %+v", in)
	}
	got, ok := f.Instance(in.ID)
	if !ok {
		t.Fatalf("the fake has no instance %s", in.ID)
	}
	if got.ChargeType != "SPOTPAID" || got.MarketType != "spot" || got.SpotInstanceType != "one-time" || got.MaxPrice != "0.80" {
		t.Errorf("market options: %+v", got)
	}
	if got.ClientToken != "launch-token-1" {
		t.Errorf("ClientToken %q", got.ClientToken)
	}
	want := map[string]string{
		"tidegpu.eja.dev/managed-by": "tidegpu",
		"tidegpu.eja.dev/cluster":    "test",
		"tidegpu.eja.dev/pool":       "chat",
	}
	for k, v := range want {
		if got.Tags[k] != v {
			t.Errorf("tag %s = %q, want %q", k, got.Tags[k], v)
		}
	}
	if got.VpcID != "vpc-aaaa1111" || got.SubnetID != "subnet-bbbb2222" || !got.WantPublicIP || got.ImageID != "img-llm01" {
		t.Errorf("network/image: %+v", got)
	}
	runs := callsOf(f, "RunInstances")
	if len(runs) != 1 {
		t.Fatalf("%d RunInstances calls", len(runs))
	}
	if !authRE.MatchString(runs[0].Authorization) {
		t.Errorf("Authorization header %q is not a TC3 header", runs[0].Authorization)
	}
	if runs[0].Region != region {
		t.Errorf("X-TC-Region %q", runs[0].Region)
	}
	body := params(t, runs[0])
	if body["InstanceCount"] != float64(1) || body["InstanceChargeType"] != "SPOTPAID" {
		t.Errorf("body %v", body)
	}
}

func TestLaunchOnDemand(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	in, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t", Market: provider.MarketOnDemand})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := f.Instance(in.ID)
	if got.ChargeType != "POSTPAID_BY_HOUR" || got.MarketType != "" || in.Market != provider.MarketOnDemand {
		t.Errorf("got %+v / %+v", got, in)
	}
	if _, ok := params(t, callsOf(f, "RunInstances")[0])["InstanceMarketOptions"]; ok {
		t.Error("on-demand launch sent InstanceMarketOptions")
	}
}

func TestLaunchRetriedAfterLostAnswerMakesOneInstance(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	f.LoseNextRunResponses(1)
	in, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "only-once"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Instances()); n != 1 {
		t.Fatalf("%d instances, want 1", n)
	}
	if f.Instances()[0].ID != in.ID {
		t.Errorf("returned %s, the fake made %s", in.ID, f.Instances()[0].ID)
	}
	runs := callsOf(f, "RunInstances")
	if len(runs) != 2 || runs[0].ErrorCode != "lost" {
		t.Fatalf("calls %+v", runs)
	}
	for _, c := range runs {
		if tok := params(t, c)["ClientToken"]; tok != "only-once" {
			t.Errorf("ClientToken %v", tok)
		}
	}
	// The engine retrying the same launch gets the same instance.
	again, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "only-once"})
	if err != nil || again.ID != in.ID || len(f.Instances()) != 1 {
		t.Errorf("relaunch: %v %v, %d instances", again.ID, err, len(f.Instances()))
	}
}

func TestWrongKeyIsRefusedAndNotShown(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(o *tencent.Options) { o.SecretKey = "not-the-right-key-4242" })
	_, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t"})
	var ae *tencent.APIError
	if !errors.As(err, &ae) || ae.Code != "AuthFailure.SignatureFailure" {
		t.Fatalf("err %v", err)
	}
	if strings.Contains(err.Error(), "not-the-right-key-4242") {
		t.Errorf("secret key in error: %v", err)
	}
	if len(f.Instances()) != 0 || f.CallCount("RunInstances") != 1 {
		t.Errorf("instances %d, calls %d", len(f.Instances()), f.CallCount("RunInstances"))
	}
}

func TestNoCapacityIsTypedAndNotRetried(t *testing.T) {
	codes := []string{
		"ResourceInsufficient.SpecifiedInstanceType",
		"ResourceInsufficient.ZoneSoldOutForSpecifiedInstance",
		"ResourcesSoldOut.SpecifiedInstanceType",
		"InvalidParameterValue.InsufficientOffering",
	}
	for _, code := range codes {
		t.Run(code, func(t *testing.T) {
			f := newFake(t)
			p := newProvider(t, f, nil)
			f.SetNoCapacity(zone, gpu, "SPOTPAID", code)
			_, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t"})
			var ice *provider.InsufficientCapacityError
			if !errors.As(err, &ice) {
				t.Fatalf("err %v is not an InsufficientCapacityError", err)
			}
			if ice.Zone != zone || ice.InstanceType != gpu || ice.Market != provider.MarketSpot {
				t.Errorf("ice %+v", ice)
			}
			if !strings.Contains(err.Error(), zone) || !strings.Contains(err.Error(), code) {
				t.Errorf("message %q lacks zone or code", err)
			}
			if n := f.CallCount("RunInstances"); n != 1 {
				t.Errorf("capacity error retried: %d calls", n)
			}
			// On-demand in the same zone still launches.
			if _, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t2", Market: provider.MarketOnDemand}); err != nil {
				t.Errorf("on-demand: %v", err)
			}
		})
	}
}

func TestZoneOutsideRegionIsNotCapacity(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	_, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t", Zone: "ap-tokyo-1"})
	if err == nil || provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "InvalidZone.MismatchRegion") {
		t.Errorf("err %v", err)
	}
}

func TestThrottlingIsRetried(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	f.ThrottleNext(3)
	if _, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t"}); err != nil {
		t.Fatal(err)
	}
	if n := f.CallCount("RunInstances"); n != 4 {
		t.Errorf("%d RunInstances calls, want 4", n)
	}
	if n := len(f.Instances()); n != 1 {
		t.Errorf("%d instances", n)
	}
}

func TestThrottlingOutlastingRetriesIsThrottledError(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(o *tencent.Options) { o.MaxAttempts = 3 })
	f.ThrottleNext(100)
	_, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t"})
	if !provider.IsThrottled(err) {
		t.Fatalf("err %v is not a ThrottledError", err)
	}
	if n := f.CallCount("RunInstances"); n != 3 {
		t.Errorf("%d calls, want 3", n)
	}
	if _, err := p.List(ctx(t), "chat"); !provider.IsThrottled(err) {
		t.Errorf("List: %v", err)
	}
}

func TestHalfTheCallsThrottled(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	f.ThrottleFraction(0.5)
	var wg sync.WaitGroup
	errs := make([]error, 20)
	ids := make([]string, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: fmt.Sprintf("tok-%d", i)})
			errs[i], ids[i] = err, in.ID
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, err := range errs {
		if err != nil {
			t.Errorf("launch %d: %v", i, err)
		}
		seen[ids[i]] = true
	}
	if len(f.Instances()) != 20 || len(seen) != 20 {
		t.Errorf("%d instances, %d distinct ids", len(f.Instances()), len(seen))
	}
	throttled := 0
	for _, c := range callsOf(f, "RunInstances") {
		if c.ErrorCode == "RequestLimitExceeded" {
			throttled++
		}
	}
	if throttled < 10 {
		t.Errorf("only %d calls throttled", throttled)
	}
}

// lister steps a fake clock past the list cache between looks.
type lister struct {
	t     *testing.T
	p     *tencent.Provider
	clock *clocktesting.FakeClock
}

func (l lister) list(pool string) []provider.Instance {
	l.t.Helper()
	l.clock.Step(2 * time.Second)
	out, err := l.p.List(ctx(l.t), pool)
	if err != nil {
		l.t.Fatal(err)
	}
	return out
}

func newLister(t *testing.T, f *cvmtest.Server, mutate func(*tencent.Options)) lister {
	fc := clocktesting.NewFakeClock(time.Now())
	p := newProvider(t, f, func(o *tencent.Options) {
		o.Clock = fc
		if mutate != nil {
			mutate(o)
		}
	})
	return lister{t: t, p: p, clock: fc}
}

func TestAddressWaitsForThePublicIP(t *testing.T) {
	f := newFake(t)
	f.SetRunningAfter(0)
	f.SetPublicIPAfter(2)
	l := newLister(t, f, nil)
	in, err := l.p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		got := l.list("chat")
		if len(got) != 1 || got[0].State != provider.StateRunning || got[0].Address != "" || got[0].PublicIP != "" {
			t.Fatalf("describe %d: %+v", i+1, got)
		}
		if got[0].PrivateIP == "" {
			t.Errorf("no private IP")
		}
	}
	got := l.list("chat")
	fi, _ := f.Instance(in.ID)
	if len(got) != 1 || got[0].Address != fi.PublicIP+":8080" || fi.PublicIP == "" {
		t.Fatalf("after the IP: %+v (fake public IP %q)", got, fi.PublicIP)
	}
}

func TestAddressUsesThePrivateIPWhenAsked(t *testing.T) {
	f := newFake(t)
	f.SetPublicIPAfter(100)
	l := newLister(t, f, nil)
	spec := poolSpec(func(s *tidev1.TidePoolSpec) {
		s.Serving = tidev1.ServingSpec{UsePrivateIP: true, Port: 11434}
		s.InstanceChargeType = tidev1.ChargeOnDemand
	})
	in, err := l.p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: spec, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Instance(in.ID)
	if fi.WantPublicIP || fi.BandwidthOut != 0 {
		t.Errorf("private pool asked for a public IP: %+v", fi)
	}
	got := l.list("chat") // first describe: PENDING
	if len(got) != 1 || got[0].State != provider.StatePending || got[0].Address != "" {
		t.Fatalf("pending: %+v", got)
	}
	got = l.list("chat")
	if len(got) != 1 || got[0].State != provider.StateRunning || got[0].Address != fi.PrivateIP+":11434" {
		t.Fatalf("running: %+v (private %s)", got, fi.PrivateIP)
	}
}

func seed(f *cvmtest.Server, cluster, pool string, n int) {
	for range n {
		f.AddInstance(cvmtest.Instance{
			Zone: zone, InstanceType: gpu, ChargeType: "SPOTPAID", WantPublicIP: true,
			Tags: map[string]string{
				tencent.TagManagedBy: tencent.ManagedByValue, tencent.TagCluster: cluster, tencent.TagPool: pool,
			},
		})
	}
}

func TestConcurrentPoolsShareOneDescribe(t *testing.T) {
	f := newFake(t)
	pools := []string{"a", "b", "c", "d"}
	for i, pool := range pools {
		seed(f, "test", pool, i+1)
	}
	seed(f, "other-cluster", "a", 3)
	f.AddInstance(cvmtest.Instance{Zone: zone, InstanceType: gpu, Tags: map[string]string{"team": "x"}})
	f.SetLatency(30 * time.Millisecond)
	fc := clocktesting.NewFakeClock(time.Now())
	p := newProvider(t, f, func(o *tencent.Options) { o.Clock = fc })

	var wg sync.WaitGroup
	got := make([][]provider.Instance, 4*len(pools))
	errs := make([]error, len(got))
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = p.List(ctx(t), pools[i%len(pools)])
		}()
	}
	wg.Wait()
	for i := range got {
		pool := pools[i%len(pools)]
		if errs[i] != nil {
			t.Fatalf("pool %s: %v", pool, errs[i])
		}
		want := i%len(pools) + 1
		if len(got[i]) != want {
			t.Errorf("pool %s: %d instances, want %d", pool, len(got[i]), want)
		}
		for _, in := range got[i] {
			if in.Pool != pool {
				t.Errorf("pool %s got an instance of %s", pool, in.Pool)
			}
		}
	}
	if n := f.CallCount("DescribeInstances"); n != 1 {
		t.Errorf("%d DescribeInstances calls for %d concurrent Lists, want 1", n, len(got))
	}
	all, err := p.List(ctx(t), "")
	if err != nil || len(all) != 10 {
		t.Errorf("all pools: %d, %v", len(all), err)
	}
	if n := f.CallCount("DescribeInstances"); n != 1 {
		t.Errorf("cached List called the API: %d calls", n)
	}
	fc.Step(time.Second)
	if _, err := p.List(ctx(t), "a"); err != nil {
		t.Fatal(err)
	}
	if n := f.CallCount("DescribeInstances"); n != 2 {
		t.Errorf("after the TTL: %d calls, want 2", n)
	}
	body := params(t, callsOf(f, "DescribeInstances")[0])
	filters, _ := json.Marshal(body["Filters"])
	if !strings.Contains(string(filters), `"tag:tidegpu.eja.dev/managed-by"`) || !strings.Contains(string(filters), `"tag:tidegpu.eja.dev/cluster"`) {
		t.Errorf("filters %s", filters)
	}
}

func TestListPagesThrough250Instances(t *testing.T) {
	f := newFake(t)
	seed(f, "test", "big", 250)
	seed(f, "other-cluster", "big", 7)
	l := newLister(t, f, nil)
	got := l.list("big")
	ids := map[string]bool{}
	for _, in := range got {
		ids[in.ID] = true
		if in.State != provider.StateRunning || in.Address == "" {
			t.Fatalf("instance %+v", in)
		}
	}
	if len(got) != 250 || len(ids) != 250 {
		t.Fatalf("%d instances, %d distinct, want 250", len(got), len(ids))
	}
	calls := callsOf(f, "DescribeInstances")
	if len(calls) != 3 {
		t.Fatalf("%d DescribeInstances calls, want 3", len(calls))
	}
	for i, c := range calls {
		b := params(t, c)
		if b["Offset"] != float64(100*i) || b["Limit"] != float64(100) {
			t.Errorf("page %d: Offset %v Limit %v", i, b["Offset"], b["Limit"])
		}
	}
	all, err := l.p.ListAll(ctx(t))
	if err != nil || len(all) != 250 {
		t.Errorf("ListAll: %d %v", len(all), err)
	}
}

func TestListShowsLaunchesAndTerminationsAtOnce(t *testing.T) {
	f := newFake(t)
	f.SetGoneAfter(1)
	l := newLister(t, f, nil)
	if got := l.list("chat"); len(got) != 0 {
		t.Fatalf("start: %+v", got)
	}
	in, err := l.p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	// The cached listing predates the launch; List still shows it.
	got, err := l.p.List(ctx(t), "chat")
	if err != nil || len(got) != 1 || got[0].ID != in.ID || got[0].State != provider.StatePending {
		t.Fatalf("after launch: %+v %v", got, err)
	}
	if got := l.list("chat"); len(got) != 1 || got[0].ID != in.ID {
		t.Fatalf("described: %+v", got)
	}
	if err := l.p.Terminate(ctx(t), in.ID); err != nil {
		t.Fatal(err)
	}
	got, _ = l.p.List(ctx(t), "chat")
	if len(got) != 1 || got[0].State != provider.StateTerminating || got[0].Address != "" {
		t.Fatalf("after terminate (cached): %+v", got)
	}
	if got := l.list("chat"); len(got) != 1 || got[0].State != provider.StateTerminating {
		t.Fatalf("terminating: %+v", got)
	}
	if got := l.list("chat"); len(got) != 0 {
		t.Fatalf("gone: %+v", got)
	}
}

func TestNonLiveStatesAreHiddenButListedForGC(t *testing.T) {
	f := newFake(t)
	seed(f, "test", "chat", 3)
	ids := f.Instances()
	f.SetState(ids[0].ID, "SHUTDOWN")
	f.SetState(ids[1].ID, "LAUNCH_FAILED")
	l := newLister(t, f, nil)
	got := l.list("chat")
	if len(got) != 1 || got[0].ID != ids[2].ID {
		t.Fatalf("live: %+v", got)
	}
	all, err := l.p.ListAll(ctx(t))
	if err != nil || len(all) != 3 {
		t.Fatalf("all: %+v %v", all, err)
	}
	for _, o := range all {
		if (o.ID == ids[2].ID) != o.Live || o.CVMState == "" {
			t.Errorf("%+v", o)
		}
	}
}

func TestTerminateIsIdempotent(t *testing.T) {
	f := newFake(t)
	f.SetGoneAfter(1)
	l := newLister(t, f, nil)
	in, err := l.p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second meets UnsupportedOperation.InstanceStateTerminating
		if err := l.p.Terminate(ctx(t), in.ID); err != nil {
			t.Fatalf("terminate %d: %v", i+1, err)
		}
	}
	l.list("chat") // TERMINATING, then the fake forgets it
	if _, ok := f.Instance(in.ID); ok {
		t.Fatal("the fake still has the instance")
	}
	if err := l.p.Terminate(ctx(t), in.ID); err != nil { // InvalidInstanceId.NotFound
		t.Errorf("terminate after gone: %v", err)
	}
	if err := l.p.Terminate(ctx(t), "ins-deadbeef"); err != nil {
		t.Errorf("terminate unknown: %v", err)
	}
	codes := []string{}
	for _, c := range callsOf(f, "TerminateInstances") {
		codes = append(codes, c.ErrorCode)
	}
	want := []string{"", "UnsupportedOperation.InstanceStateTerminating", "InvalidInstanceId.NotFound", "InvalidInstanceId.NotFound"}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("answers %q, want %q", codes, want)
	}
	if err := l.p.Terminate(ctx(t), "bogus"); err == nil || !strings.Contains(err.Error(), "InvalidInstanceId.Malformed") {
		t.Errorf("malformed id: %v", err)
	}
}

func offeringsBy(os []provider.Offering) map[provider.Market]provider.Offering {
	m := map[provider.Market]provider.Offering{}
	for _, o := range os {
		m[o.Market] = o
	}
	return m
}

func TestOfferingsLivePrices(t *testing.T) {
	f := newFake(t)
	f.SetPrice(zone, gpu, "POSTPAID_BY_HOUR", 1.56)
	f.SetPrice(zone, gpu, "SPOTPAID", 0.31)
	l := newLister(t, f, nil)
	os, err := l.p.Offerings(ctx(t), poolSpec(nil))
	if err != nil {
		t.Fatal(err)
	}
	m := offeringsBy(os)
	if o := m[provider.MarketSpot]; o.PricePerHour != 0.31 || o.PriceSource != provider.PriceLive || !o.Available || o.Currency != "USD" || o.Zone != zone || o.InstanceType != gpu {
		t.Errorf("spot %+v", o)
	}
	if o := m[provider.MarketOnDemand]; o.PricePerHour != 1.56 || o.PriceSource != provider.PriceLive || !o.Available {
		t.Errorf("on-demand %+v", o)
	}
	spot := callsOf(f, "InquiryPriceRunInstances")
	if len(spot) != 2 {
		t.Fatalf("%d price calls", len(spot))
	}
	if _, err := l.p.Offerings(ctx(t), poolSpec(nil)); err != nil {
		t.Fatal(err)
	}
	if n := f.CallCount("InquiryPriceRunInstances"); n != 2 {
		t.Errorf("cached prices asked again: %d calls", n)
	}
	l.clock.Step(6 * time.Minute)
	if _, err := l.p.Offerings(ctx(t), poolSpec(nil)); err != nil {
		t.Fatal(err)
	}
	if n := f.CallCount("InquiryPriceRunInstances"); n != 4 {
		t.Errorf("expired prices not refreshed: %d calls", n)
	}
}

// Every instance type of the pool in every placement zone is offered, each
// priced by its own inquiry.
func TestOfferingsEveryTypeAndZone(t *testing.T) {
	f := newFake(t)
	const zone2, gpu2 = "ap-singapore-2", "GN10X.2XLARGE40"
	f.SetPrice(zone, gpu, "SPOTPAID", 0.31)
	f.SetPrice(zone2, gpu2, "SPOTPAID", 0.52)
	f.SetNoCapacity(zone2, gpu, "SPOTPAID", "")
	p := newProvider(t, f, nil)
	spec := poolSpec(func(s *tidev1.TidePoolSpec) {
		s.Placement = &tidev1.PlacementSpec{AvailabilityZones: []string{zone, zone2}, InstanceTypes: []string{gpu2}}
	})
	os := must(p.Offerings(ctx(t), spec))
	got := map[string]provider.Offering{}
	for _, o := range os {
		got[o.InstanceType+"/"+o.Zone+"/"+string(o.Market)] = o
	}
	if len(os) != 8 || len(got) != 8 {
		t.Fatalf("%d offerings (%d distinct), want 2 types x 2 zones x 2 markets: %+v", len(os), len(got), os)
	}
	if o := got[gpu+"/"+zone+"/spot"]; o.PricePerHour != 0.31 || o.PriceSource != provider.PriceLive || !o.Available {
		t.Errorf("%s in %s: %+v", gpu, zone, o)
	}
	if o := got[gpu2+"/"+zone2+"/spot"]; o.PricePerHour != 0.52 || o.PriceSource != provider.PriceLive || !o.Available {
		t.Errorf("%s in %s: %+v", gpu2, zone2, o)
	}
	if o := got[gpu+"/"+zone2+"/spot"]; o.Available {
		t.Errorf("no capacity, yet available: %+v", o)
	}
	if n := f.CallCount("InquiryPriceRunInstances"); n != 8 {
		t.Errorf("%d price inquiries, want 8", n)
	}
}

func TestOfferingsFallbacks(t *testing.T) {
	t.Run("spot price unavailable: live on-demand stands in", func(t *testing.T) {
		f := newFake(t)
		f.SetPrice(zone, gpu, "POSTPAID_BY_HOUR", 1.56)
		f.SetPriceError(zone, gpu, "SPOTPAID", "FailedOperation.InquiryPriceFailed")
		p := newProvider(t, f, nil)
		m := offeringsBy(must(p.Offerings(ctx(t), poolSpec(nil))))
		if o := m[provider.MarketSpot]; o.PricePerHour != 1.56 || o.PriceSource != provider.PriceFallback || !o.Available {
			t.Errorf("spot %+v", o)
		}
	})
	t.Run("no live prices: catalog", func(t *testing.T) {
		f := newFake(t) // no prices set: FailedOperation.InquiryPriceFailed
		p := newProvider(t, f, nil)
		m := offeringsBy(must(p.Offerings(ctx(t), poolSpec(nil))))
		od, sp := m[provider.MarketOnDemand], m[provider.MarketSpot]
		if od.PriceSource != provider.PriceCatalog || od.PricePerHour <= 0 {
			t.Errorf("on-demand %+v", od)
		}
		if sp.PriceSource != provider.PriceFallback || sp.PricePerHour != od.PricePerHour {
			t.Errorf("spot %+v", sp)
		}
	})
	t.Run("unknown type without live prices", func(t *testing.T) {
		f := newFake(t)
		p := newProvider(t, f, nil)
		m := offeringsBy(must(p.Offerings(ctx(t), poolSpec(func(s *tidev1.TidePoolSpec) { s.InstanceType = "S5.MEDIUM2" }))))
		if o := m[provider.MarketOnDemand]; o.PricePerHour != 0 || o.PriceSource != "" {
			t.Errorf("on-demand %+v", o)
		}
	})
	t.Run("spec without image: catalog, no API call", func(t *testing.T) {
		f := newFake(t)
		p := newProvider(t, f, nil)
		m := offeringsBy(must(p.Offerings(ctx(t), poolSpec(func(s *tidev1.TidePoolSpec) { s.ImageID = "" }))))
		if m[provider.MarketOnDemand].PriceSource != provider.PriceCatalog || f.CallCount("") != 0 {
			t.Errorf("%+v, %d calls", m, f.CallCount(""))
		}
	})
}

func TestOfferingsAvailability(t *testing.T) {
	f := newFake(t)
	f.SetPrice(zone, gpu, "POSTPAID_BY_HOUR", 1.56)
	f.SetPrice(zone, gpu, "SPOTPAID", 0.31)
	l := newLister(t, f, func(o *tencent.Options) { o.PriceCacheTTL = time.Hour })
	// Prices cached while capacity is there.
	m := offeringsBy(must(l.p.Offerings(ctx(t), poolSpec(nil))))
	if !m[provider.MarketSpot].Available {
		t.Fatal("spot unavailable before any ICE")
	}
	// A launch meets no capacity: spot is unavailable for CapacityTTL.
	f.SetNoCapacity(zone, gpu, "SPOTPAID", "")
	if _, err := l.p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t"}); !provider.IsInsufficientCapacity(err) {
		t.Fatalf("launch: %v", err)
	}
	m = offeringsBy(must(l.p.Offerings(ctx(t), poolSpec(nil))))
	if m[provider.MarketSpot].Available || !m[provider.MarketOnDemand].Available {
		t.Errorf("after ICE: %+v", m)
	}
	if m[provider.MarketSpot].PriceSource != provider.PriceLive {
		t.Errorf("price lost: %+v", m[provider.MarketSpot])
	}
	f.ClearNoCapacity()
	l.clock.Step(4 * time.Minute)
	m = offeringsBy(must(l.p.Offerings(ctx(t), poolSpec(nil))))
	if !m[provider.MarketSpot].Available {
		t.Errorf("spot still unavailable after CapacityTTL: %+v", m[provider.MarketSpot])
	}
	// The price inquiry itself reports no capacity.
	f2 := newFake(t)
	f2.SetPrice(zone, gpu, "POSTPAID_BY_HOUR", 1.56)
	f2.SetNoCapacity(zone, gpu, "SPOTPAID", "")
	p2 := newProvider(t, f2, nil)
	m = offeringsBy(must(p2.Offerings(ctx(t), poolSpec(nil))))
	if m[provider.MarketSpot].Available || m[provider.MarketSpot].PriceSource != provider.PriceFallback || !m[provider.MarketOnDemand].Available {
		t.Errorf("inquiry ICE: %+v", m)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestNewValidates(t *testing.T) {
	const id, key = "AKIDunique41", "sk-unique-42"
	cases := []tencent.Options{
		{SecretID: id, SecretKey: key},
		{Region: region, SecretID: id},
		{Region: region, SecretKey: key},
		{Region: region, SecretID: id, SecretKey: key, Endpoint: "ftp://x"},
	}
	for _, o := range cases {
		if _, err := tencent.New(o); err == nil {
			t.Errorf("New(%v) accepted", o)
		} else if o.SecretKey != "" && strings.Contains(err.Error(), o.SecretKey) {
			t.Errorf("secret in %v", err)
		}
	}
	p, err := tencent.New(tencent.Options{Region: region, SecretID: id, SecretKey: key})
	if err != nil || p.Name() != "tencent" || p.Region() != region {
		t.Errorf("%v %v", p, err)
	}
}

func TestContextCancelStopsRetries(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(o *tencent.Options) { o.BackoffBase, o.BackoffMax = time.Hour, time.Hour })
	f.ThrottleNext(100)
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := p.Launch(c, provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "t"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v", err)
	}
	if n := f.CallCount("RunInstances"); n != 1 {
		t.Errorf("%d calls", n)
	}
}

// User data goes to RunInstances base64-encoded; over 16 KB encoded it is
// refused before CVM is asked, naming spec.bootstrap.
func TestLaunchSendsUserDataBase64(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	ud := []byte("#cloud-config\nruncmd: [[echo, hi]]\n")
	if _, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "ud-1", UserData: ud}); err != nil {
		t.Fatal(err)
	}
	runs := callsOf(f, "RunInstances")
	if len(runs) != 1 {
		t.Fatalf("RunInstances calls = %d", len(runs))
	}
	enc, _ := params(t, runs[0])["UserData"].(string)
	got, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || string(got) != string(ud) {
		t.Fatalf("UserData = %q (%v), want base64 of %q", enc, err, ud)
	}
	_, err = p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "ud-2", UserData: make([]byte, 12289)})
	if err == nil || !strings.Contains(err.Error(), "spec.bootstrap") {
		t.Fatalf("oversized user data: err = %v, want one naming spec.bootstrap", err)
	}
	if n := len(callsOf(f, "RunInstances")); n != 1 {
		t.Errorf("CVM was asked for the oversized launch (%d RunInstances calls)", n)
	}
}
