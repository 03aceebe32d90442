package engine

import (
	"errors"
	"reflect"
	"testing"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// cloudSpec is an unplaced cloud pool of n spot instances.
func cloudSpec(n int32) tidev1.TidePoolSpec {
	return tidev1.TidePoolSpec{Provider: tidev1.ProviderAWS, InstanceType: itype, Minimum: n, Maximum: n,
		InstanceChargeType: tidev1.ChargeSpot}
}

func wantCalls(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("provider calls %q, want %q", got, want)
	}
}

// A spot launch refused for capacity is placed elsewhere in the next
// round, at once: the capacity memory took the refusal, so no backoff.
func TestLoopRefusedSpotGoesElsewhereWithoutBackoff(t *testing.T) {
	l := newLoop(t, *placedSpec(1, "LowestPrice", nil), offers(true)...)
	l.cloud.nextLaunch = []fault{{err: &provider.InsufficientCapacityError{Zone: "a", Market: provider.MarketSpot}}}
	if next := l.round(); next > time.Millisecond {
		t.Errorf("after a refusal the pool looks again in %v, want at once", next)
	}
	wantCalls(t, l.cloud.takeCalls(), "launch spot a")
	l.round() // no time passes
	wantCalls(t, l.cloud.takeCalls(), "launch spot b")
	if got := l.drv.Status().Instances; len(got) != 1 || got[0].Zone != "b" {
		t.Errorf("instances %+v, want one in b", got)
	}
}

// A throttled launch backs off, then retries with the same token.
func TestLoopThrottledLaunchBacksOffAndRetriesWithItsToken(t *testing.T) {
	l := newLoop(t, cloudSpec(1))
	l.cloud.nextLaunch = []fault{{err: &provider.ThrottledError{Err: errors.New("RequestLimitExceeded")}}}
	if next := l.round(); next != minBackoff {
		t.Errorf("after a throttled launch the pool looks again in %v, want the backoff %v", next, minBackoff)
	}
	wantCalls(t, l.cloud.takeCalls(), "launch spot ")
	l.clk.Step(minBackoff / 2)
	l.round()
	wantCalls(t, l.cloud.takeCalls()) // still backing off
	l.clk.Step(minBackoff / 2)
	l.round()
	wantCalls(t, l.cloud.takeCalls(), "launch spot ")
	if tk := l.cloud.tokens; len(tk) != 2 || tk[0] != tk[1] {
		t.Errorf("launch tokens %q, want the retry to reuse the first", tk)
	}
}

// A launch whose answer was lost made an instance all the same: the retry
// with the same token returns it instead of making a second one.
func TestLoopLostLaunchResponseReturnsTheFirstInstance(t *testing.T) {
	l := newLoop(t, cloudSpec(1))
	l.cloud.nextLaunch = []fault{{err: errors.New("read: connection reset by peer"), lost: true}}
	l.round()
	l.clk.Step(minBackoff)
	l.round()
	wantCalls(t, l.cloud.takeCalls(), "launch spot ", "launch spot ")
	if len(l.cloud.insts) != 1 {
		t.Errorf("%d instances in the cloud, want 1", len(l.cloud.insts))
	}
	if got := l.drv.Status().Instances; len(got) != 1 || got[0].ID != "i-1" {
		t.Errorf("instances %+v, want i-1, the first launch's", got)
	}
}

// A failed termination is retried by the next round.
func TestLoopFailedTerminateIsRetried(t *testing.T) {
	l := newLoop(t, cloudSpec(1))
	// Never ready within the start timeout: replaced.
	l.cloud.add(provider.Instance{ID: "old", Pool: "p", Market: provider.MarketSpot, State: provider.StateRunning,
		Address: "10.0.1.1:8000", LaunchedAt: t0.Add(-DefaultCloudStartTimeout)})
	l.cloud.nextTerminate = []fault{{err: errors.New("InternalError")}}
	if next := l.round(); next != minBackoff {
		t.Errorf("after a failed round the pool looks again in %v, want %v", next, minBackoff)
	}
	wantCalls(t, l.cloud.takeCalls(), "terminate old", "launch spot ")
	l.clk.Step(minBackoff)
	l.round()
	wantCalls(t, l.cloud.takeCalls(), "terminate old")
	if _, ok := l.cloud.insts["old"]; ok {
		t.Error("old is still there")
	}
	if n := len(l.events("TerminateFailed")); n != 1 {
		t.Errorf("%d TerminateFailed events, want 1", n)
	}
}

// A scale-down drain of a busy instance ends at its deadline.
func TestLoopDrainEndsAtItsDeadline(t *testing.T) {
	spec := cloudSpec(2)
	ten := int32(10)
	spec.DrainSeconds = &ten
	l := newLoop(t, spec)
	l.gw.inFlight = 3
	l.round()
	l.readyAll()
	l.round()
	wantCalls(t, l.cloud.takeCalls(), "launch spot ", "launch spot ")
	spec.Minimum = 1
	l.setSpec(spec)
	l.round()
	if got := l.gw.now(); len(got) != 1 {
		t.Fatalf("targets %v during the drain, want one", got)
	}
	l.clk.Step(9 * time.Second)
	l.round()
	wantCalls(t, l.cloud.takeCalls()) // busy: it drains on
	l.clk.Step(time.Second)
	l.round()
	if got := l.cloud.takeCalls(); len(got) != 1 || got[0] != "terminate i-2" {
		t.Errorf("calls %q at the deadline, want the youngest terminated", got)
	}
}

// An instance under a reclaim notice keeps serving until its replacement
// is ready, and is terminated at its reclaim time.
func TestLoopNoticedInstanceServesUntilItsReplacementIsReady(t *testing.T) {
	l := newLoop(t, cloudSpec(1))
	l.round()
	l.readyAll()
	l.round()
	wantCalls(t, l.cloud.takeCalls(), "launch spot ")
	l.drv.Event(l.cloud.notice("i-1", t0.Add(2*time.Minute)))
	l.round()
	wantCalls(t, l.cloud.takeCalls(), "launch spot ")
	if got := l.gw.now(); !reflect.DeepEqual(got, []string{"i-1"}) {
		t.Errorf("targets %v while the replacement starts, want the noticed i-1", got)
	}
	l.clk.Step(time.Minute)
	l.round()
	if got := l.gw.now(); !reflect.DeepEqual(got, []string{"i-1"}) {
		t.Errorf("targets %v a minute on, want i-1 still", got)
	}
	l.readyAll()
	l.round()
	if got := l.gw.now(); !reflect.DeepEqual(got, []string{"i-2"}) {
		t.Errorf("targets %v once the replacement is ready, want i-2 only", got)
	}
	wantCalls(t, l.cloud.takeCalls()) // i-1 drains until its reclaim time
	l.clk.Step(time.Minute)
	l.round()
	wantCalls(t, l.cloud.takeCalls(), "terminate i-1")
}
