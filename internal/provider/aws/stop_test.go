package aws

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	fakeclock "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/aws/ec2test"
)

// providerFor is a second provider on env's fake EC2, as a restarted
// controller would make: no cache, no launch records.
func providerFor(t *testing.T, e *env) *Provider {
	t.Helper()
	p, err := New(context.Background(), Options{
		Region:      "us-east-1",
		Cluster:     "test-cluster",
		Endpoint:    e.srv.URL,
		Credentials: &StaticCredentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "not-a-real-secret"},
		RateLimit:   -1,
		MaxAttempts: 5,
		BackoffBase: time.Millisecond,
		MaxBackoff:  5 * time.Millisecond,
		Clock:       fakeclock.NewFakeClock(t0),
		HTTPClient:  &http.Client{Timeout: 10 * time.Second},
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func onDemandSpec() *ec2test.Instance {
	in := ownedInstance("test-cluster", "chat")
	in.Market = ec2test.MarketOnDemand
	in.Tags[TagServingIP] = ServingIPPublic
	return &in
}

// listOne lists pool "chat" and returns its only instance.
func listOne(t *testing.T, ctx context.Context, p *Provider) provider.Instance {
	t.Helper()
	got, err := p.List(ctx, "chat")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("listed %+v, want one instance", got)
	}
	return got[0]
}

func actionCalls(srv *ec2test.Server, action string) []ec2test.Call {
	var out []ec2test.Call
	for _, c := range srv.Calls() {
		if c.Action == action {
			out = append(out, c)
		}
	}
	return out
}

func TestStopStartRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetManual(true)
	ctx := ctxT(t)
	spec := testSpec()
	spec.Serving.UsePrivateIP, spec.Serving.Port = false, 8000
	inst, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: spec, Token: "tok-warm", Market: provider.MarketOnDemand})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Advance()
	e.clock.Step(DefaultListCacheTTL)
	running := listOne(t, ctx, e.p)
	fi, _ := e.srv.Instance(inst.ID)
	if running.State != provider.StateRunning || running.Address != fi.PublicIP+":8000" || fi.PublicIP == "" {
		t.Fatalf("before stop: %+v (fake %+v)", running, fi)
	}
	firstAddr := running.Address

	if err := e.p.Stop(ctx, inst.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if fi, _ := e.srv.Instance(inst.ID); fi.State != ec2test.StateStopping {
		t.Fatalf("fake state after stop: %s", fi.State)
	}
	// Stop dropped the cached snapshot: List shows the change at once.
	if got := listOne(t, ctx, e.p); got.State != provider.StateStopping || got.Address != "" {
		t.Fatalf("after stop: %+v", got)
	}
	e.srv.Advance()
	e.clock.Step(DefaultListCacheTTL)
	if got := listOne(t, ctx, e.p); got.State != provider.StateStopped || got.Address != "" || got.PublicIP != "" || got.ID != inst.ID {
		t.Fatalf("stopped: %+v", got)
	}

	started, err := e.p.Start(ctx, inst.ID)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if started.ID != inst.ID || started.Pool != "chat" || started.State != provider.StatePending || started.Address != "" {
		t.Fatalf("start returned %+v; want Pending without the old public address", started)
	}
	if got := listOne(t, ctx, e.p); got.State != provider.StatePending {
		t.Fatalf("after start: %+v", got)
	}
	e.srv.Advance()
	e.clock.Step(DefaultListCacheTTL)
	again := listOne(t, ctx, e.p)
	fi, _ = e.srv.Instance(inst.ID)
	if again.State != provider.StateRunning || again.Address != fi.PublicIP+":8000" || fi.PublicIP == "" {
		t.Fatalf("running again: %+v (fake %+v)", again, fi)
	}
	if again.Address == firstAddr {
		t.Errorf("address %s did not change across stop/start; EC2 hands out a new public IP", again.Address)
	}
	stops, starts := actionCalls(e.srv, "StopInstances"), actionCalls(e.srv, "StartInstances")
	if len(stops) != 1 || len(starts) != 1 || stops[0].Params.Get("InstanceId.1") != inst.ID || starts[0].Params.Get("InstanceId.1") != inst.ID {
		t.Fatalf("calls %s", summary(e.srv.Calls()))
	}
}

func TestStartReturnsPrivateAddressAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetManual(true)
	ctx := ctxT(t)
	in := onDemandSpec()
	in.Tags[TagServingIP] = ServingIPPrivate
	in.State = ec2test.StateStopped
	id := e.srv.Put(*in)
	got, err := e.p.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := e.srv.Instance(id)
	if got.State != provider.StatePending || got.Address != fi.PrivateIP+":8080" {
		t.Fatalf("started %+v, want Pending at %s:8080", got, fi.PrivateIP)
	}
}

func TestStopStartIdempotent(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetManual(true)
	ctx := ctxT(t)
	id := e.srv.Put(*onDemandSpec())

	for range 2 {
		if err := e.p.Stop(ctx, id); err != nil {
			t.Fatalf("stop (stopping): %v", err)
		}
	}
	e.srv.Advance()
	if err := e.p.Stop(ctx, id); err != nil {
		t.Fatalf("stop (stopped): %v", err)
	}
	if n := len(actionCalls(e.srv, "StopInstances")); n != 1 {
		t.Errorf("StopInstances calls = %d, want 1 (already stopping/stopped needs none)", n)
	}
	if fi, _ := e.srv.Instance(id); fi.State != ec2test.StateStopped {
		t.Fatalf("state %s", fi.State)
	}

	for range 2 {
		got, err := e.p.Start(ctx, id)
		if err != nil || got.State != provider.StatePending {
			t.Fatalf("start: %+v, %v", got, err)
		}
	}
	e.srv.Advance()
	got, err := e.p.Start(ctx, id)
	if err != nil || got.State != provider.StateRunning {
		t.Fatalf("start (running): %+v, %v", got, err)
	}
	if n := len(actionCalls(e.srv, "StartInstances")); n != 1 {
		t.Errorf("StartInstances calls = %d, want 1 (already pending/running needs none)", n)
	}
	if fi, _ := e.srv.Instance(id); fi.Starts != 1 {
		t.Errorf("fake started the instance %d times", fi.Starts)
	}
}

func TestStopStartStatesEC2Refuses(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetManual(true)
	ctx := ctxT(t)

	// Pending has never reached running: EC2 answers IncorrectInstanceState.
	pending := onDemandSpec()
	pending.State = ec2test.StatePending
	pid := e.srv.Put(*pending)
	err := e.p.Stop(ctx, pid)
	if !errors.Is(err, ErrIncorrectState) || errorCode(err) != codeIncorrectInstanceState {
		t.Fatalf("stop pending: %v", err)
	}

	// Stopping cannot start until stopped.
	stopping := onDemandSpec()
	stopping.State = ec2test.StateStopping
	sid := e.srv.Put(*stopping)
	if _, err := e.p.Start(ctx, sid); !errors.Is(err, ErrIncorrectState) {
		t.Fatalf("start stopping: %v", err)
	}
	e.srv.Advance()
	if _, err := e.p.Start(ctx, sid); err != nil {
		t.Fatalf("start once stopped: %v", err)
	}

	// Unknown, foreign, empty.
	if err := e.p.Stop(ctx, "i-0123456789abcdef0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stop unknown: %v", err)
	}
	if _, err := e.p.Start(ctx, "i-0123456789abcdef0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("start unknown: %v", err)
	}
	foreign := onDemandSpec()
	foreign.Tags[TagCluster] = "other-cluster"
	fid := e.srv.Put(*foreign)
	if err := e.p.Stop(ctx, fid); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("stop foreign: %v", err)
	}
	if fi, _ := e.srv.Instance(fid); fi.State != ec2test.StateRunning {
		t.Fatalf("foreign instance is %s", fi.State)
	}
	if err := e.p.Stop(ctx, ""); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("stop empty id: %v", err)
	}
	for _, c := range actionCalls(e.srv, "StopInstances") {
		if c.Params.Get("InstanceId.1") == fid {
			t.Errorf("StopInstances sent for a foreign instance")
		}
	}
}

func TestStopRefusesSpot(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetManual(true)
	ctx := ctxT(t)
	inst, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "tok-spot", Market: provider.MarketSpot})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Advance()
	err = e.p.Stop(ctx, inst.ID)
	var ns *NotStoppableError
	if !errors.As(err, &ns) || ns.ID != inst.ID || ns.Kind != string(provider.MarketSpot) || ns.Err != nil {
		t.Fatalf("stop spot: %v", err)
	}
	if !errors.Is(err, provider.ErrNotSupported) {
		t.Errorf("%v does not say ErrNotSupported", err)
	}
	if n := len(actionCalls(e.srv, "StopInstances")); n != 0 {
		t.Fatalf("StopInstances sent for a spot instance (%d calls)", n)
	}
	if fi, _ := e.srv.Instance(inst.ID); fi.State != ec2test.StateRunning {
		t.Fatalf("spot instance is %s", fi.State)
	}
}

func TestStopStartThrottledCallsAreRetried(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetManual(true)
	ctx := ctxT(t)
	id := e.srv.Put(*onDemandSpec())

	// Every second call is throttled: describe (ok), StopInstances
	// (throttled, then ok), describe (throttled, then ok), StartInstances
	// (throttled, then ok).
	e.srv.ThrottleFraction(0.5)
	if err := e.p.Stop(ctx, id); err != nil {
		t.Fatalf("stop: %v", err)
	}
	e.srv.Advance()
	if _, err := e.p.Start(ctx, id); err != nil {
		t.Fatalf("start: %v", err)
	}
	for _, action := range []string{"StopInstances", "StartInstances"} {
		calls := actionCalls(e.srv, action)
		if len(calls) != 2 || calls[0].Status != http.StatusServiceUnavailable || calls[0].Code != "RequestLimitExceeded" || calls[1].Status != http.StatusOK {
			t.Fatalf("%s calls %s", action, summary(calls))
		}
	}
	if fi, _ := e.srv.Instance(id); fi.State != ec2test.StatePending || fi.Starts != 1 {
		t.Fatalf("fake %+v", fi)
	}

	// Throttled beyond MaxAttempts: a typed error.
	e.srv.ThrottleFraction(0)
	e.srv.Advance()
	e.srv.ThrottleNext(100)
	if err := e.p.Stop(ctx, id); !provider.IsThrottled(err) {
		t.Fatalf("stop throttled throughout: %v", err)
	}
	if _, err := e.p.Start(ctx, id); !provider.IsThrottled(err) {
		t.Fatalf("start throttled throughout: %v", err)
	}
}

func TestStoppedInstanceSeenAfterRestart(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetManual(true)
	ctx := ctxT(t)
	stopped := onDemandSpec()
	stopped.State = ec2test.StateStopped
	sid := e.srv.Put(*stopped)
	stopping := onDemandSpec()
	stopping.Tags[TagPool] = "other"
	stopping.State = ec2test.StateStopping
	gid := e.srv.Put(*stopping)
	gone := onDemandSpec()
	gone.State = ec2test.StateTerminated
	e.srv.Put(*gone)

	p := providerFor(t, e)
	got := listOne(t, ctx, p)
	if got.ID != sid || got.State != provider.StateStopped || got.Market != provider.MarketOnDemand || got.Address != "" {
		t.Fatalf("after restart: %+v", got)
	}
	all, err := p.ListAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[1].ID != gid || all[1].State != provider.StateStopping {
		t.Fatalf("all: %+v", all)
	}
	// The shared describe asks EC2 for the standby states.
	for _, c := range actionCalls(e.srv, "DescribeInstances") {
		for _, f := range []string{"Filter.1", "Filter.2", "Filter.3"} {
			if c.Params.Get(f+".Name") != "instance-state-name" {
				continue
			}
			var vals []string
			for i := 1; c.Params.Has(f + ".Value." + string(rune('0'+i))); i++ {
				vals = append(vals, c.Params.Get(f+".Value."+string(rune('0'+i))))
			}
			if !slices.Contains(vals, "stopped") || !slices.Contains(vals, "stopping") || slices.Contains(vals, "terminated") {
				t.Errorf("state filter %v", vals)
			}
		}
	}
}

func TestTerminateStoppedInstance(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetManual(true)
	ctx := ctxT(t)
	in := onDemandSpec()
	in.State = ec2test.StateStopped
	id := e.srv.Put(*in)
	if got := listOne(t, ctx, e.p); got.State != provider.StateStopped {
		t.Fatalf("before: %+v", got)
	}
	if err := e.p.Terminate(ctx, id); err != nil {
		t.Fatalf("terminate stopped: %v", err)
	}
	if fi, _ := e.srv.Instance(id); fi.State != ec2test.StateShuttingDown {
		t.Fatalf("fake state %s", fi.State)
	}
	if got := listOne(t, ctx, e.p); got.State != provider.StateTerminating {
		t.Fatalf("after terminate: %+v", got)
	}
	e.srv.Advance()
	e.clock.Step(DefaultListCacheTTL)
	if got, err := e.p.List(ctx, "chat"); err != nil || len(got) != 0 {
		t.Fatalf("after termination: %+v, %v", got, err)
	}
}
