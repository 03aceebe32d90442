package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	fakeclock "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/aws/ec2test"
)

var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

type env struct {
	srv   *ec2test.Server
	p     *Provider
	clock *fakeclock.FakeClock
}

// newEnv starts a fake EC2 and a provider talking to it through the real
// SDK over a real socket.
func newEnv(t *testing.T, mod func(*Options)) *env {
	t.Helper()
	return newEnvOn(t, ec2test.Options{Region: "us-east-1"}, mod)
}

// newEnvOn is newEnv with the fake's own options.
func newEnvOn(t *testing.T, fake ec2test.Options, mod func(*Options)) *env {
	t.Helper()
	srv := ec2test.NewServer(fake)
	t.Cleanup(srv.Close)
	clk := fakeclock.NewFakeClock(t0)
	o := Options{
		Region:      "us-east-1",
		Cluster:     "test-cluster",
		Endpoint:    srv.URL,
		Credentials: &StaticCredentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "not-a-real-secret"},
		RateLimit:   -1,
		MaxAttempts: 5,
		BackoffBase: time.Millisecond,
		MaxBackoff:  5 * time.Millisecond,
		Clock:       clk,
		HTTPClient:  &http.Client{Timeout: 10 * time.Second},
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mod != nil {
		mod(&o)
	}
	p, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, p: p, clock: clk}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func runCalls(srv *ec2test.Server) []ec2test.Call {
	var out []ec2test.Call
	for _, c := range srv.Calls() {
		if c.Action == "RunInstances" {
			out = append(out, c)
		}
	}
	return out
}

// summary shows calls briefly: action, status, error code, token.
func summary(calls []ec2test.Call) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "[%s %d %s dropped=%v token=%s] ", c.Action, c.Status, c.Code, c.Dropped, c.Params.Get("ClientToken"))
	}
	return b.String()
}

func TestLaunchSpotCarriesOptionsTagsAndToken(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetManual(true)
	ctx := ctxT(t)
	inst, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-1", Market: provider.MarketSpot})
	if err != nil {
		t.Fatal(err)
	}
	calls := runCalls(e.srv)
	if len(calls) != 1 {
		t.Fatalf("RunInstances calls = %d", len(calls))
	}
	q := calls[0].Params
	want := map[string]string{
		"ClientToken":                      "tok-1",
		"MinCount":                         "1",
		"MaxCount":                         "1",
		"ImageId":                          "ami-0abc",
		"InstanceType":                     "g5.xlarge",
		"Placement.AvailabilityZone":       "us-east-1a",
		"SubnetId":                         "subnet-1",
		"SecurityGroupId.1":                "sg-1",
		"SecurityGroupId.2":                "sg-2",
		"InstanceMarketOptions.MarketType": "spot",
		"InstanceMarketOptions.SpotOptions.SpotInstanceType":             "one-time",
		"InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior": "terminate",
	}
	for k, v := range want {
		if q.Get(k) != v {
			t.Errorf("request %s = %q, want %q", k, q.Get(k), v)
		}
	}
	fi, ok := e.srv.Instance(inst.ID)
	if !ok {
		t.Fatalf("fake has no %s", inst.ID)
	}
	owned := map[string]string{
		TagManagedBy: "tidegpu", TagCluster: "test-cluster", TagPool: "chat", TagLaunchToken: "tok-1",
		TagName: "tidegpu-chat", TagServingPort: "11434", TagServingIP: "private",
	}
	for k, v := range owned {
		if fi.Tags[k] != v || fi.VolumeTags[k] != v {
			t.Errorf("tag %s: instance %q, volume %q; want %q", k, fi.Tags[k], fi.VolumeTags[k], v)
		}
	}
	if fi.Market != ec2test.MarketSpot || fi.SpotInstanceType != "one-time" || fi.InterruptionBehavior != "terminate" || fi.ClientToken != "tok-1" {
		t.Errorf("fake recorded %+v", fi)
	}
	if inst.State != provider.StatePending || inst.Pool != "chat" || inst.Market != provider.MarketSpot || inst.Zone != "us-east-1a" {
		t.Errorf("launched %+v", inst)
	}
	if inst.Address != fi.PrivateIP+":11434" {
		t.Errorf("address %q, want private IP %s:11434", inst.Address, fi.PrivateIP)
	}
}

func TestLaunchOnDemandAddressAfterRunning(t *testing.T) {
	e := newEnv(t, nil)
	ctx := ctxT(t)
	spec := testSpec()
	spec.Serving.UsePrivateIP, spec.Serving.Port = false, 0
	inst, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: spec, Token: "tok-od", Market: provider.MarketOnDemand, Zone: "us-east-1b"})
	if err != nil {
		t.Fatal(err)
	}
	q := runCalls(e.srv)[0].Params
	if q.Has("InstanceMarketOptions.MarketType") || q.Get("Placement.AvailabilityZone") != "us-east-1b" {
		t.Errorf("on-demand request: %v", q)
	}
	if inst.Address != "" || inst.Market != provider.MarketOnDemand {
		t.Errorf("public address known before running: %+v", inst)
	}
	// The fake runs the instance on the next describe; the public IP then
	// makes the address.
	got, err := e.p.List(ctx, "chat")
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := e.srv.Instance(inst.ID)
	if len(got) != 1 || got[0].State != provider.StateRunning || got[0].Address != fi.PublicIP+":8080" || fi.PublicIP == "" {
		t.Fatalf("listed %+v (fake %+v)", got, fi)
	}
}

func TestLaunchRetriedAfterTimeoutMakesOneInstance(t *testing.T) {
	e := newEnv(t, nil)
	ctx := ctxT(t)
	e.srv.DropNextRunInstances(1)
	inst, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-drop"})
	if err != nil {
		t.Fatal(err)
	}
	calls := runCalls(e.srv)
	if len(calls) != 2 || !calls[0].Dropped || calls[1].Status != http.StatusOK {
		t.Fatalf("calls %s", summary(calls))
	}
	if calls[0].Params.Get("ClientToken") != "tok-drop" || calls[1].Params.Get("ClientToken") != "tok-drop" {
		t.Errorf("retry changed the token: %q then %q", calls[0].Params.Get("ClientToken"), calls[1].Params.Get("ClientToken"))
	}
	all := e.srv.Instances()
	if len(all) != 1 || all[0].ID != inst.ID {
		t.Fatalf("fake holds %d instances (%+v), launch returned %s", len(all), all, inst.ID)
	}

	// The same token again (a caller's own retry) is the same instance.
	again, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-drop"})
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != inst.ID || len(e.srv.Instances()) != 1 {
		t.Fatalf("second launch with the token made %s; fake holds %d", again.ID, len(e.srv.Instances()))
	}
	// A different token is a different instance.
	other, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-other"})
	if err != nil || other.ID == inst.ID {
		t.Fatalf("other token: %v %v", other.ID, err)
	}
}

func TestLaunchICENamesZoneAndIsNotRetried(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Zones = []string{"us-east-1a", "us-east-1b"} })
	ctx := ctxT(t)
	e.srv.SetICE("us-east-1a", "g5.xlarge", ec2test.MarketSpot, "")
	_, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-ice"})
	var ice *provider.InsufficientCapacityError
	if !errors.As(err, &ice) {
		t.Fatalf("err = %v, want InsufficientCapacityError", err)
	}
	if ice.Zone != "us-east-1a" || ice.InstanceType != "g5.xlarge" || ice.Market != provider.MarketSpot || !strings.Contains(err.Error(), "us-east-1a") {
		t.Errorf("ICE %+v / %v", ice, err)
	}
	calls := runCalls(e.srv)
	if len(calls) != 1 || calls[0].Status != http.StatusInternalServerError || calls[0].Code != "InsufficientInstanceCapacity" {
		t.Fatalf("ICE (HTTP 500) was retried or mis-sent: %s", summary(calls))
	}

	// The offering is unavailable for a while; others are not.
	offs, err := e.p.Offerings(ctx, testSpecNoZone())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offs {
		wantAvail := !(o.Zone == "us-east-1a" && o.Market == provider.MarketSpot)
		if o.Available != wantAvail {
			t.Errorf("offering %+v available=%v, want %v", o, o.Available, wantAvail)
		}
	}
	e.clock.Step(DefaultUnavailableTTL)
	offs, _ = e.p.Offerings(ctx, testSpecNoZone())
	for _, o := range offs {
		if !o.Available {
			t.Errorf("offering %+v still unavailable after the TTL", o)
		}
	}

	// On-demand in the same zone still launches.
	if _, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-od", Market: provider.MarketOnDemand}); err != nil {
		t.Fatalf("on-demand launch: %v", err)
	}
	// "Unsupported" (the type is not offered in the zone) is a capacity
	// error too, sent with HTTP 400.
	e.srv.SetICE("us-east-1c", "", "", "Unsupported")
	_, err = e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-unsup", Zone: "us-east-1c"})
	if !errors.As(err, &ice) || ice.Zone != "us-east-1c" {
		t.Fatalf("Unsupported: %v", err)
	}
}

func TestThrottledCallsAreRetried(t *testing.T) {
	e := newEnv(t, nil)
	ctx := ctxT(t)
	e.srv.ThrottleNext(2)
	if _, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-thr"}); err != nil {
		t.Fatalf("launch after two throttles: %v", err)
	}
	calls := runCalls(e.srv)
	if len(calls) != 3 || calls[0].Status != http.StatusServiceUnavailable || calls[0].Code != "RequestLimitExceeded" || calls[2].Status != http.StatusOK {
		t.Fatalf("calls %s", summary(calls))
	}
	if len(e.srv.Instances()) != 1 {
		t.Fatalf("instances %d", len(e.srv.Instances()))
	}

	// Throttled beyond MaxAttempts (5): a typed error.
	e.srv.ResetCalls()
	e.srv.ThrottleNext(100)
	_, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-thr2"})
	if !provider.IsThrottled(err) {
		t.Fatalf("err = %v, want ThrottledError", err)
	}
	if n := len(runCalls(e.srv)); n != 5 {
		t.Errorf("attempts = %d, want 5", n)
	}
	e.srv.ThrottleNext(0)
	if _, err := e.p.List(ctx, ""); err != nil {
		t.Fatalf("list after throttling: %v", err)
	}
}

func TestHalfThrottledLaunchesAllSucceed(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxAttempts = 12 })
	ctx := ctxT(t)
	e.srv.ThrottleFraction(0.5)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: fmt.Sprintf("tok-%02d", i)})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("launch: %v", err)
		}
	}
	if got := len(e.srv.Instances()); got != n {
		t.Fatalf("instances = %d, want %d", got, n)
	}
	throttled := 0
	for _, c := range runCalls(e.srv) {
		if c.Code == "RequestLimitExceeded" {
			throttled++
		}
	}
	if total := len(runCalls(e.srv)); throttled == 0 || total != n+throttled {
		t.Fatalf("calls %d, throttled %d", total, throttled)
	}
}

func ownedInstance(cluster, pool string) ec2test.Instance {
	return ec2test.Instance{
		ImageID:      "ami-0abc",
		InstanceType: "g5.xlarge",
		Market:       ec2test.MarketSpot,
		Tags: map[string]string{
			TagManagedBy: ManagedByValue, TagCluster: cluster, TagPool: pool,
			TagServingPort: "8080", TagServingIP: ServingIPPrivate,
		},
		LaunchTime: t0.Add(-time.Hour),
	}
}

func TestListConcurrentPoolsShareOneDescribe(t *testing.T) {
	e := newEnv(t, nil)
	ctx := ctxT(t)
	for _, pool := range []string{"a", "a", "b", "c"} {
		e.srv.Put(ownedInstance("test-cluster", pool))
	}
	e.srv.Put(ownedInstance("other-cluster", "a"))
	foreign := ownedInstance("test-cluster", "a")
	delete(foreign.Tags, TagManagedBy)
	e.srv.Put(foreign)
	e.srv.SetLatency(50 * time.Millisecond)

	pools := []string{"a", "b", "c"}
	got := make([][]provider.Instance, len(pools))
	errs := make([]error, len(pools))
	var wg sync.WaitGroup
	for i, pool := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = e.p.List(ctx, pool)
		}()
	}
	wg.Wait()
	for i, want := range []int{2, 1, 1} {
		if errs[i] != nil || len(got[i]) != want {
			t.Fatalf("pool %s: %d instances, err %v; want %d", pools[i], len(got[i]), errs[i], want)
		}
		for _, in := range got[i] {
			if in.Pool != pools[i] || in.State != provider.StateRunning || in.Address != in.PrivateIP+":8080" || in.Market != provider.MarketSpot {
				t.Errorf("pool %s lists %+v", pools[i], in)
			}
		}
	}
	if n := e.srv.CallCount("DescribeInstances"); n != 1 {
		t.Fatalf("DescribeInstances calls = %d, want 1", n)
	}
	q := e.srv.Calls()[0].Params
	if q.Get("Filter.1.Name") != "tag:"+TagManagedBy || q.Get("Filter.2.Value.1") != "test-cluster" || q.Get("Filter.3.Name") != "instance-state-name" {
		t.Errorf("filters %v", q)
	}

	// Within the TTL the snapshot answers; after it, one new call.
	if _, err := e.p.List(ctx, "a"); err != nil || e.srv.CallCount("DescribeInstances") != 1 {
		t.Fatalf("cached list: err %v, calls %d", err, e.srv.CallCount("DescribeInstances"))
	}
	e.clock.Step(DefaultListCacheTTL)
	if _, err := e.p.List(ctx, "b"); err != nil || e.srv.CallCount("DescribeInstances") != 2 {
		t.Fatalf("after TTL: err %v, calls %d", err, e.srv.CallCount("DescribeInstances"))
	}
	all, err := e.p.ListAll(ctx)
	if err != nil || len(all) != 4 {
		t.Fatalf("ListAll: %d, %v", len(all), err)
	}
}

func TestListPaginatesExactly(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ListPageSize = 100 })
	ctx := ctxT(t)
	for i := range 250 {
		e.srv.Put(ownedInstance("test-cluster", fmt.Sprintf("pool-%d", i%5)))
		if i%10 == 0 {
			e.srv.Put(ownedInstance("other-cluster", "pool-0"))
		}
	}
	all, err := e.p.ListAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, in := range all {
		if seen[in.ID] {
			t.Fatalf("duplicate %s", in.ID)
		}
		seen[in.ID] = true
	}
	if len(all) != 250 {
		t.Fatalf("listed %d, want 250", len(all))
	}
	// Exactly three pages were asked for. The SDK may repeat a request
	// whose answer it could not read to the end (a transport retry, seen
	// on loopback now and then); a repeat asks for the same page.
	calls := e.srv.Calls()
	pages := map[string]bool{}
	for _, c := range calls {
		if c.Params.Get("MaxResults") != "100" {
			t.Errorf("page params %v", c.Params)
		}
		pages[c.Params.Get("NextToken")] = true
	}
	if len(pages) != 3 || !pages[""] || len(calls) > 6 {
		t.Fatalf("DescribeInstances asked for %d distinct pages in %d calls, want 3 pages starting without a token", len(pages), len(calls))
	}
	pool3, err := e.p.List(ctx, "pool-3")
	if err != nil || len(pool3) != 50 {
		t.Fatalf("pool-3: %d, %v", len(pool3), err)
	}
}

func TestListShowsLaunchesAndTerminations(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetManual(true)
	ctx := ctxT(t)
	if _, err := e.p.List(ctx, "chat"); err != nil {
		t.Fatal(err)
	}
	inst, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-l"})
	if err != nil {
		t.Fatal(err)
	}
	// The launch invalidated the cached (empty) snapshot.
	got, err := e.p.List(ctx, "chat")
	if err != nil || len(got) != 1 || got[0].ID != inst.ID || got[0].State != provider.StatePending {
		t.Fatalf("after launch: %+v, %v", got, err)
	}
	if err := e.p.Terminate(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	got, err = e.p.List(ctx, "chat")
	if err != nil || len(got) != 1 || got[0].State != provider.StateTerminating {
		t.Fatalf("after terminate: %+v, %v", got, err)
	}
	e.srv.Advance()
	e.clock.Step(DefaultListCacheTTL)
	if got, err = e.p.List(ctx, "chat"); err != nil || len(got) != 0 {
		t.Fatalf("after termination: %+v, %v", got, err)
	}
}

func TestTerminateIdempotent(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetManual(true)
	ctx := ctxT(t)
	inst, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-t"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := e.p.Terminate(ctx, inst.ID); err != nil {
			t.Fatalf("terminate: %v", err)
		}
	}
	if fi, _ := e.srv.Instance(inst.ID); fi.State != ec2test.StateShuttingDown {
		t.Fatalf("state %s", fi.State)
	}
	e.srv.Advance()
	e.clock.Step(DefaultListCacheTTL)
	if err := e.p.Terminate(ctx, inst.ID); err != nil {
		t.Fatalf("terminate a terminated instance: %v", err)
	}
	if err := e.p.Terminate(ctx, "i-0123456789abcdef0"); err != nil {
		t.Fatalf("terminate an unknown instance: %v", err)
	}

	// Someone else's instance is left alone.
	other := e.srv.Put(ownedInstance("other-cluster", "chat"))
	if err := e.p.Terminate(ctx, other); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("terminate foreign: %v", err)
	}
	if fi, _ := e.srv.Instance(other); fi.State != ec2test.StateRunning {
		t.Fatalf("foreign instance is %s", fi.State)
	}
	for _, c := range e.srv.Calls() {
		if c.Action == "TerminateInstances" && c.Params.Get("InstanceId.1") != inst.ID {
			t.Errorf("terminated %s", c.Params.Get("InstanceId.1"))
		}
	}
}

func TestOfferingsLiveAndFallbackPrices(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Zones = []string{"us-east-1a", "us-east-1b"} })
	ctx := ctxT(t)
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1a", Price: "0.450000", Timestamp: t0.Add(-2 * time.Hour)})
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1a", Price: "0.401200", Timestamp: t0.Add(-30 * time.Minute)})
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1a", Price: "0.900000", ProductDescription: "Windows", Timestamp: t0.Add(-time.Minute)})
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g6.xlarge", Zone: "us-east-1b", Price: "0.300000", Timestamp: t0.Add(-time.Minute)})

	spec := testSpecNoZone()
	offs, err := e.p.Offerings(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.Offering{
		{InstanceType: "g5.xlarge", Zone: "us-east-1a", Market: provider.MarketSpot, PricePerHour: 0.4012, Currency: "USD", PriceSource: provider.PriceLive, Available: true},
		{InstanceType: "g5.xlarge", Zone: "us-east-1a", Market: provider.MarketOnDemand, PricePerHour: 1.006, Currency: "USD", PriceSource: provider.PriceCatalog, Available: true},
		{InstanceType: "g5.xlarge", Zone: "us-east-1b", Market: provider.MarketSpot, PricePerHour: 1.006, Currency: "USD", PriceSource: provider.PriceFallback, Available: true},
		{InstanceType: "g5.xlarge", Zone: "us-east-1b", Market: provider.MarketOnDemand, PricePerHour: 1.006, Currency: "USD", PriceSource: provider.PriceCatalog, Available: true},
	}
	if fmt.Sprintf("%+v", offs) != fmt.Sprintf("%+v", want) {
		t.Fatalf("offerings\n got  %+v\n want %+v", offs, want)
	}
	c := e.srv.Calls()[0].Params
	if c.Get("ProductDescription.1") != "Linux/UNIX" || c.Get("InstanceType.1") != "g5.xlarge" || !strings.HasPrefix(c.Get("StartTime"), "2026-06-01T12:00:00") {
		t.Errorf("price query %v", c)
	}

	// Cached for PriceCacheTTL.
	if _, err := e.p.Offerings(ctx, spec); err != nil || e.srv.CallCount("DescribeSpotPriceHistory") != 1 {
		t.Fatalf("second call: %v, %d calls", err, e.srv.CallCount("DescribeSpotPriceHistory"))
	}

	// Without zones configured, the zones with prices are offered; when
	// the price API fails, spot falls back and says so.
	e2 := newEnv(t, func(o *Options) { o.MaxAttempts = 1 })
	e2.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1d", Price: "0.5", Timestamp: t0.Add(-time.Hour)})
	offs, err = e2.p.Offerings(ctx, spec)
	if err != nil || len(offs) != 2 || offs[0].Zone != "us-east-1d" || offs[0].PriceSource != provider.PriceLive {
		t.Fatalf("zones from prices: %+v, %v", offs, err)
	}
	e2.clock.Step(DefaultPriceCacheTTL)
	e2.srv.ThrottleNext(1)
	offs, err = e2.p.Offerings(ctx, testSpec())
	if err != nil || len(offs) != 2 || offs[0].PriceSource != provider.PriceFallback || offs[0].PricePerHour != 1.006 {
		t.Fatalf("price API down: %+v, %v", offs, err)
	}
}

func TestRateLimitPacesCalls(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.RateLimit, o.Burst = 1, 1
		o.ListCacheTTL = -1
	})
	ctx := ctxT(t)
	if _, err := e.p.List(ctx, ""); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.p.List(ctx, "")
		done <- err
	}()
	// The second call waits on the provider's clock for a token.
	for i := 0; !e.clock.HasWaiters(); i++ {
		if i > 2000 {
			t.Fatal("second call never waited for the rate limiter")
		}
		time.Sleep(time.Millisecond)
	}
	if n := e.srv.CallCount("DescribeInstances"); n != 1 {
		t.Fatalf("calls before the token = %d", n)
	}
	e.clock.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.srv.CallCount("DescribeInstances"); n != 2 {
		t.Fatalf("calls after the token = %d", n)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	_, err := New(context.Background(), Options{Region: "us-east-1"})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("no cluster: %v", err)
	}
	p, err := New(context.Background(), Options{Region: "us-east-1", Cluster: "c", Credentials: &StaticCredentials{AccessKeyID: "a", SecretAccessKey: "s"}})
	if err != nil || p.Name() != "aws" || p.Region() != "us-east-1" || p.Cluster() != "c" {
		t.Fatalf("New: %v", err)
	}
}

// User data goes to RunInstances base64-encoded, as EC2 takes it; over
// 16 KB raw it is refused before EC2 is asked, naming spec.bootstrap.
func TestLaunchSendsUserDataBase64(t *testing.T) {
	e := newEnv(t, nil)
	ctx := ctxT(t)
	ud := []byte("#cloud-config\nruncmd: [[echo, hi]]\n")
	if _, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-ud", UserData: ud}); err != nil {
		t.Fatal(err)
	}
	calls := runCalls(e.srv)
	if len(calls) != 1 {
		t.Fatalf("RunInstances calls = %d", len(calls))
	}
	got, err := base64.StdEncoding.DecodeString(calls[0].Params.Get("UserData"))
	if err != nil || string(got) != string(ud) {
		t.Fatalf("UserData = %q (%v), want base64 of %q", calls[0].Params.Get("UserData"), err, ud)
	}
	_, err = e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-big", UserData: make([]byte, MaxUserData+1)})
	if err == nil || !strings.Contains(err.Error(), "spec.bootstrap") {
		t.Fatalf("17 KB of user data: err = %v, want one naming spec.bootstrap", err)
	}
	if n := len(runCalls(e.srv)); n != 1 {
		t.Errorf("EC2 was asked for the oversized launch (%d RunInstances calls)", n)
	}
}
