package tencent_test

import (
	"errors"
	"fmt"
	"testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/tencent"
	"github.com/tidegpu/tidegpu/internal/provider/tencent/cvmtest"
)

// addStandby adds an owned pay-as-you-go instance of pool "chat" in state.
func addStandby(f *cvmtest.Server, cluster, state string) string {
	return f.AddInstance(cvmtest.Instance{
		Zone: zone, InstanceType: gpu, ChargeType: "POSTPAID_BY_HOUR", WantPublicIP: true, State: state,
		Tags: map[string]string{
			tencent.TagManagedBy: tencent.ManagedByValue, tencent.TagCluster: cluster, tencent.TagPool: "chat",
		},
	})
}

func onlyOne(t *testing.T, got []provider.Instance) provider.Instance {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("listed %+v, want one instance", got)
	}
	return got[0]
}

func errorCodes(f *cvmtest.Server, action string) string {
	var codes []string
	for _, c := range callsOf(f, action) {
		codes = append(codes, c.ErrorCode)
	}
	return fmt.Sprintf("%q", codes)
}

func TestStopStartRoundTrip(t *testing.T) {
	f := newFake(t)
	l := newLister(t, f, nil)
	spec := poolSpec(func(s *tidev1.TidePoolSpec) { s.InstanceChargeType = tidev1.ChargeOnDemand; s.Serving.Port = 8000 })
	in, err := l.p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: spec, Token: "warm"})
	if err != nil {
		t.Fatal(err)
	}
	l.list("chat") // PENDING
	running := onlyOne(t, l.list("chat"))
	fi, _ := f.Instance(in.ID)
	if running.State != provider.StateRunning || fi.PublicIP == "" || running.Address != fi.PublicIP+":8000" {
		t.Fatalf("before stop: %+v (fake %+v)", running, fi)
	}

	if err := l.p.Stop(ctx(t), in.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	stops := callsOf(f, "StopInstances")
	if len(stops) != 1 {
		t.Fatalf("StopInstances calls %d", len(stops))
	}
	if p := params(t, stops[0]); p["StoppedMode"] != "STOP_CHARGING" || p["StopType"] != "SOFT_FIRST" || fmt.Sprint(p["InstanceIds"]) != "["+in.ID+"]" {
		t.Errorf("StopInstances params %v", p)
	}
	// The stop dropped the cached listing: List shows it at once.
	got, err := l.p.List(ctx(t), "chat")
	if err != nil || onlyOne(t, got).State != provider.StateStopping || got[0].Address != "" {
		t.Fatalf("after stop: %+v %v", got, err)
	}
	stopped := onlyOne(t, l.list("chat"))
	if stopped.State != provider.StateStopped || stopped.Address != "" || stopped.PublicIP != "" || stopped.ID != in.ID || stopped.Market != provider.MarketOnDemand {
		t.Fatalf("stopped: %+v", stopped)
	}

	started, err := l.p.Start(ctx(t), in.ID)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if started.ID != in.ID || started.Pool != "chat" || started.State != provider.StatePending || started.Address != "" {
		t.Fatalf("start returned %+v", started)
	}
	if got := onlyOne(t, l.list("chat")); got.State != provider.StatePending { // STARTING
		t.Fatalf("starting: %+v", got)
	}
	again := onlyOne(t, l.list("chat"))
	fi, _ = f.Instance(in.ID)
	if again.State != provider.StateRunning || fi.PublicIP == "" || again.Address != fi.PublicIP+":8000" {
		t.Fatalf("running again: %+v (fake %+v)", again, fi)
	}
	if again.Address == running.Address {
		t.Errorf("address %s survived the stop; STOP_CHARGING releases the public IP", again.Address)
	}
	if n := len(callsOf(f, "StartInstances")); n != 1 || fi.Starts != 1 {
		t.Errorf("StartInstances calls %d, fake starts %d", n, fi.Starts)
	}
}

func TestStopStartIdempotent(t *testing.T) {
	f := newFake(t)
	l := newLister(t, f, nil)
	id := addStandby(f, "test", "")
	for range 2 {
		if err := l.p.Stop(ctx(t), id); err != nil { // RUNNING, then STOPPING
			t.Fatalf("stop: %v", err)
		}
	}
	l.list("chat")
	l.list("chat")
	if fi, _ := f.Instance(id); fi.State != "STOPPED" || fi.StoppedMode != "STOP_CHARGING" {
		t.Fatalf("fake %+v", fi)
	}
	if err := l.p.Stop(ctx(t), id); err != nil {
		t.Fatalf("stop stopped: %v", err)
	}
	if n := len(callsOf(f, "StopInstances")); n != 1 {
		t.Errorf("StopInstances calls %d, want 1 (stopping/stopped needs none)", n)
	}
	for range 2 {
		got, err := l.p.Start(ctx(t), id) // STOPPED, then STARTING
		if err != nil || got.State != provider.StatePending {
			t.Fatalf("start: %+v %v", got, err)
		}
	}
	l.list("chat")
	if got, err := l.p.Start(ctx(t), id); err != nil || got.State != provider.StateRunning {
		t.Fatalf("start running: %+v %v", got, err)
	}
	if n := len(callsOf(f, "StartInstances")); n != 1 {
		t.Errorf("StartInstances calls %d, want 1", n)
	}
}

func TestStopStartStatesTheAPIRefuses(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	pending := addStandby(f, "test", "PENDING")
	err := p.Stop(ctx(t), pending)
	if !errors.Is(err, tencent.ErrIncorrectState) || errorCodes(f, "StopInstances") != `["UnsupportedOperation.InstanceStatePending"]` {
		t.Fatalf("stop pending: %v; answers %s", err, errorCodes(f, "StopInstances"))
	}
	stopping := addStandby(f, "test", "STOPPING")
	if _, err := p.Start(ctx(t), stopping); !errors.Is(err, tencent.ErrIncorrectState) {
		t.Fatalf("start stopping: %v", err)
	}
	if got := errorCodes(f, "StartInstances"); got != `["UnsupportedOperation.InstanceStateStopping"]` {
		t.Errorf("answers %s", got)
	}
	if err := p.Stop(ctx(t), "ins-deadbeef"); !errors.Is(err, tencent.ErrNotFound) {
		t.Fatalf("stop unknown: %v", err)
	}
	foreign := addStandby(f, "other", "")
	if _, err := p.Start(ctx(t), foreign); !errors.Is(err, tencent.ErrNotOwned) {
		t.Fatalf("start foreign: %v", err)
	}
	if err := p.Stop(ctx(t), foreign); !errors.Is(err, tencent.ErrNotOwned) {
		t.Fatalf("stop foreign: %v", err)
	}
	if fi, _ := f.Instance(foreign); fi.State != "RUNNING" {
		t.Fatalf("foreign instance is %s", fi.State)
	}
}

func TestStopRefusesSpotAndPrepaid(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	spot, err := p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "spot"})
	if err != nil {
		t.Fatal(err)
	}
	prepaid := f.AddInstance(cvmtest.Instance{Zone: zone, InstanceType: gpu, ChargeType: "PREPAID", Tags: map[string]string{
		tencent.TagManagedBy: tencent.ManagedByValue, tencent.TagCluster: "test", tencent.TagPool: "chat",
	}})
	for id, charge := range map[string]string{spot.ID: "SPOTPAID", prepaid: "PREPAID"} {
		err := p.Stop(ctx(t), id)
		var ns *tencent.NotStoppableError
		if !errors.As(err, &ns) || ns.ID != id || ns.Kind != charge || ns.Err != nil || !errors.Is(err, provider.ErrNotSupported) {
			t.Errorf("stop %s: %v", charge, err)
		}
	}
	if n := len(callsOf(f, "StopInstances")); n != 0 {
		t.Fatalf("StopInstances sent %d times for instances that cannot stop without charges", n)
	}
}

func TestStopStartThrottledCallsAreRetried(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, func(o *tencent.Options) { o.MaxAttempts = 4 })
	id := addStandby(f, "test", "")
	f.SetStoppedAfter(0)
	// Every second call is throttled: describe (ok), StopInstances
	// (throttled, then ok), describe (throttled, then ok; STOPPED),
	// StartInstances (throttled, then ok).
	f.ThrottleFraction(0.5)
	if err := p.Stop(ctx(t), id); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := p.Start(ctx(t), id); err != nil {
		t.Fatalf("start: %v", err)
	}
	for _, action := range []string{"StopInstances", "StartInstances"} {
		if got := errorCodes(f, action); got != `["RequestLimitExceeded" ""]` {
			t.Errorf("%s answers %s", action, got)
		}
	}
	if fi, _ := f.Instance(id); fi.State != "STARTING" {
		t.Fatalf("fake state %s", fi.State)
	}
	f.ThrottleFraction(0)
	f.ThrottleNext(100)
	if err := p.Stop(ctx(t), id); !provider.IsThrottled(err) {
		t.Fatalf("stop throttled throughout: %v", err)
	}
	if _, err := p.Start(ctx(t), id); !provider.IsThrottled(err) {
		t.Fatalf("start throttled throughout: %v", err)
	}
}

func TestStoppedInstanceSeenAfterRestart(t *testing.T) {
	f := newFake(t)
	id := addStandby(f, "test", "")
	first := newProvider(t, f, nil)
	if err := first.Stop(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	if _, err := first.List(ctx(t), "chat"); err != nil { // STOPPING, then STOPPED
		t.Fatal(err)
	}
	// A new controller: nothing remembered, everything from DescribeInstances.
	l := newLister(t, f, nil)
	got := onlyOne(t, l.list("chat"))
	if got.ID != id || got.State != provider.StateStopped || got.Market != provider.MarketOnDemand || got.Address != "" {
		t.Fatalf("after restart: %+v", got)
	}
	all, err := l.p.ListAll(ctx(t))
	if err != nil || len(all) != 1 || !all[0].Live || all[0].CVMState != "STOPPED" {
		t.Fatalf("ListAll %+v %v: a standby must stay live, or GC would take it", all, err)
	}
}

func TestTerminateStoppedInstance(t *testing.T) {
	f := newFake(t)
	f.SetGoneAfter(1)
	l := newLister(t, f, nil)
	id := addStandby(f, "test", "STOPPED")
	if got := onlyOne(t, l.list("chat")); got.State != provider.StateStopped {
		t.Fatalf("before: %+v", got)
	}
	if err := l.p.Terminate(ctx(t), id); err != nil {
		t.Fatalf("terminate stopped: %v", err)
	}
	if got := onlyOne(t, l.list("chat")); got.State != provider.StateTerminating {
		t.Fatalf("terminating: %+v", got)
	}
	if got := l.list("chat"); len(got) != 0 {
		t.Fatalf("gone: %+v", got)
	}
	if errorCodes(f, "TerminateInstances") != `[""]` {
		t.Errorf("answers %s", errorCodes(f, "TerminateInstances"))
	}
}
