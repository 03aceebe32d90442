package engine

import (
	"reflect"
	"sort"
	"testing"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *time.Time { t := t0.Add(d); return &t }

// inst builds a view: launched `age` before t0, ready or not.
func inst(id string, age time.Duration, ready bool) View {
	return View{Instance: provider.Instance{ID: id, Pool: "p", State: provider.StateRunning,
		Address: "127.0.0.1:" + id, Market: provider.MarketSpot, LaunchedAt: t0.Add(-age)}, Ready: ready, InFlight: -1}
}

func with(v View, f func(*View)) View { f(&v); return v }

func spec(min, max int32, replicas *int32) *tidev1.TidePoolSpec {
	return &tidev1.TidePoolSpec{Provider: tidev1.ProviderLocal, Minimum: min, Maximum: max, Replicas: replicas,
		InstanceChargeType: tidev1.ChargeSpot}
}

func i32(v int32) *int32 { return &v }

func targetIDs(p Decision) []string {
	var out []string
	for _, t := range p.Targets {
		out = append(out, t.ID)
	}
	return out
}

func termIDs(p Decision) []string {
	var out []string
	for _, t := range p.Terminations {
		out = append(out, t.ID)
	}
	sort.Strings(out)
	return out
}

func drainIDs(p Decision) []string {
	var out []string
	for _, d := range p.Drains {
		out = append(out, d.ID)
	}
	return out
}

// TestDecide ports the unplaced cases: the pool launches on the spec's
// own offering and scales down by itself.
func TestDecide(t *testing.T) {
	cases := []struct {
		name         string
		in           Snapshot
		launches     int
		targets      []string
		terminations []string
		drains       []string
		ready        int32
		phases       map[string]string
		maxRequeue   time.Duration // 0: no requeue expected
	}{
		{
			name:     "empty pool launches the wanted number",
			in:       Snapshot{Spec: spec(2, 2, nil)},
			launches: 2,
		},
		{
			name: "a stopped standby neither serves, counts, nor times out",
			in: Snapshot{Spec: spec(2, 2, nil), Now: t0, Instances: []View{inst("a", time.Minute, true), inst("b", time.Minute, true),
				stopped(inst("s", 48*time.Hour, false)), func() View { v := stopped(inst("t", time.Hour, true)); v.State = provider.StateStopping; return v }()}},
			targets: []string{"a", "b"}, ready: 2,
			phases: map[string]string{"a": tidev1.PhaseReady, "b": tidev1.PhaseReady, "s": tidev1.PhaseStandby, "t": tidev1.PhaseStandby},
		},
		{
			name: "a standby started just now is not timed out by its old launch time",
			in: Snapshot{Spec: spec(2, 2, nil), Now: t0, Instances: []View{inst("a", time.Minute, true),
				func() View { v := inst("s", 48*time.Hour, false); v.StartedAt = t0.Add(-10 * time.Second); return v }()}},
			targets: []string{"a"}, ready: 1,
			phases:     map[string]string{"a": tidev1.PhaseReady, "s": tidev1.PhaseStarting},
			maxRequeue: DefaultLocalStartTimeout,
		},
		{
			name: "a started standby that never became ready is replaced after the start timeout",
			in: Snapshot{Spec: spec(2, 2, nil), Now: t0, Instances: []View{inst("a", time.Minute, true),
				func() View {
					v := inst("s", 48*time.Hour, false)
					v.StartedAt = t0.Add(-2 * DefaultLocalStartTimeout)
					return v
				}()}},
			targets: []string{"a"}, ready: 1, terminations: []string{"s"}, launches: 1,
			phases: map[string]string{"a": tidev1.PhaseReady, "s": tidev1.PhaseTerminating},
		},
		{
			name:    "steady pool does nothing",
			in:      Snapshot{Spec: spec(2, 2, nil), Instances: []View{inst("a", time.Minute, true), inst("b", time.Minute, true)}},
			targets: []string{"a", "b"}, ready: 2,
			phases: map[string]string{"a": tidev1.PhaseReady, "b": tidev1.PhaseReady},
		},
		{
			name:     "a vanished instance is replaced and only the live one is a target",
			in:       Snapshot{Spec: spec(2, 2, nil), Instances: []View{inst("a", time.Minute, true)}},
			launches: 1, targets: []string{"a"}, ready: 1,
		},
		{
			name:     "a starting instance counts as running but is not a target",
			in:       Snapshot{Spec: spec(2, 2, nil), Instances: []View{inst("a", time.Minute, true), inst("b", time.Second, false)}},
			launches: 0, targets: []string{"a"}, ready: 1,
			phases:     map[string]string{"a": tidev1.PhaseReady, "b": tidev1.PhaseStarting},
			maxRequeue: DefaultLocalStartTimeout,
		},
		{
			name: "a pending instance shows Pending",
			in: Snapshot{Spec: spec(1, 1, nil), Instances: []View{with(inst("a", 0, false), func(v *View) {
				v.State = provider.StatePending
				v.Address = ""
			})}},
			phases:     map[string]string{"a": tidev1.PhasePending},
			maxRequeue: DefaultLocalStartTimeout,
		},
		{
			name: "a reclaim notice launches the replacement at once; the noticed instance serves until it is ready",
			in: Snapshot{Spec: spec(2, 2, nil), Now: t0, Instances: []View{
				with(inst("a", time.Minute, true), func(v *View) { v.InterruptAt = at(10 * time.Second); v.InFlight = 3 }),
				inst("b", time.Minute, true)}},
			launches: 1, targets: []string{"b", "a"}, ready: 1,
			phases:     map[string]string{"a": tidev1.PhaseDraining, "b": tidev1.PhaseReady},
			maxRequeue: 10 * time.Second,
		},
		{
			name: "once the replacement is ready the noticed instance leaves the targets and drains",
			in: Snapshot{Spec: spec(2, 2, nil), Now: t0, Instances: []View{
				with(inst("a", time.Minute, true), func(v *View) { v.InterruptAt = at(10 * time.Second); v.InFlight = 3 }),
				inst("b", time.Minute, true), inst("c", time.Second, true)}},
			targets: []string{"b", "c"}, ready: 2,
			phases:     map[string]string{"a": tidev1.PhaseDraining, "c": tidev1.PhaseReady},
			maxRequeue: drainPoll,
		},
		{
			name: "an idle reclaimed instance is terminated without waiting for the deadline once replaced",
			in: Snapshot{Spec: spec(2, 2, nil), Now: t0, Instances: []View{
				with(inst("a", time.Minute, true), func(v *View) { v.InterruptAt = at(10 * time.Second); v.InFlight = 0 }),
				inst("b", time.Minute, true), inst("c", time.Second, true)}},
			targets: []string{"b", "c"}, ready: 2, terminations: []string{"a"},
		},
		{
			name: "with unknown in-flight a replaced reclaimed instance waits for its deadline",
			in: Snapshot{Spec: spec(2, 2, nil), Now: t0, Instances: []View{
				with(inst("a", time.Minute, true), func(v *View) { v.InterruptAt = at(10 * time.Second) }),
				inst("b", time.Minute, true), inst("c", time.Second, true)}},
			targets: []string{"b", "c"}, ready: 2, maxRequeue: 10 * time.Second,
		},
		{
			name: "a scale-down drain does not serve while other instances are ready",
			in: Snapshot{Spec: spec(1, 3, i32(2)), Now: t0, Instances: []View{
				inst("a", time.Hour, true),
				with(inst("b", time.Minute, true), func(v *View) { v.DrainDeadline = at(20 * time.Second); v.InFlight = 2 })}},
			launches: 1, targets: []string{"a"}, ready: 1, maxRequeue: drainPoll,
		},
		{
			name: "the last ready instance keeps serving while it drains and nothing else is ready",
			in: Snapshot{Spec: spec(1, 1, nil), Now: t0, Instances: []View{
				with(inst("a", time.Minute, true), func(v *View) { v.InterruptAt = at(10 * time.Second); v.InFlight = 0 })}},
			launches: 1, targets: []string{"a"}, ready: 0, maxRequeue: 10 * time.Second,
		},
		{
			name: "past the reclaim deadline the instance is terminated",
			in: Snapshot{Spec: spec(1, 1, nil), Now: t0, Instances: []View{
				with(inst("a", time.Minute, true), func(v *View) { v.InterruptAt = at(-time.Second); v.InFlight = 2 })}},
			launches: 1, terminations: []string{"a"},
		},
		{
			name:     "an instance not ready after the start timeout is replaced",
			in:       Snapshot{Spec: spec(1, 1, nil), Now: t0, Instances: []View{inst("a", DefaultLocalStartTimeout, false)}},
			launches: 1, terminations: []string{"a"},
		},
		{
			name: "scale down drains the youngest ready instance",
			in: Snapshot{Spec: spec(1, 3, i32(2)), Now: t0, Instances: []View{
				inst("old", time.Hour, true), inst("mid", time.Minute, true), inst("young", time.Second, true)}},
			drains: []string{"young"}, targets: []string{"mid", "old"}, ready: 2, maxRequeue: DefaultDrain,
			phases: map[string]string{"young": tidev1.PhaseDraining, "mid": tidev1.PhaseReady, "old": tidev1.PhaseReady},
		},
		{
			name: "scale down drains on-demand before spot",
			in: Snapshot{Spec: spec(1, 3, i32(1)), Now: t0, Instances: []View{
				with(inst("od", time.Hour, true), func(v *View) { v.Market = provider.MarketOnDemand }),
				inst("spot", time.Second, true)}},
			drains: []string{"od"}, targets: []string{"spot"}, ready: 1, maxRequeue: DefaultDrain,
		},
		{
			name: "scale down terminates a not-ready instance before draining a ready one",
			in: Snapshot{Spec: spec(1, 3, i32(1)), Now: t0, Instances: []View{
				inst("ready", time.Hour, true), inst("starting", time.Second, false)}},
			terminations: []string{"starting"}, targets: []string{"ready"}, ready: 1,
		},
		{
			name: "a scale-down drain ends when the instance is idle",
			in: Snapshot{Spec: spec(1, 3, i32(1)), Now: t0, Instances: []View{
				inst("a", time.Hour, true),
				with(inst("b", time.Minute, true), func(v *View) { v.DrainDeadline = at(20 * time.Second); v.InFlight = 0 })}},
			terminations: []string{"b"}, targets: []string{"a"}, ready: 1,
		},
		{
			name: "launches wait while blocked by backoff",
			in: Snapshot{Spec: spec(2, 2, nil), Now: t0, LaunchBlockedUntil: t0.Add(4 * time.Second),
				Instances: []View{inst("a", time.Hour, true)}},
			targets: []string{"a"}, ready: 1, maxRequeue: 4 * time.Second,
		},
		{
			name: "a terminating instance does not count",
			in: Snapshot{Spec: spec(1, 1, nil), Now: t0, Instances: []View{
				with(inst("a", time.Hour, true), func(v *View) { v.State = provider.StateTerminating })}},
			launches: 1, phases: map[string]string{"a": tidev1.PhaseTerminating},
		},
		{
			name:     "replicas between the watermarks is honoured",
			in:       Snapshot{Spec: spec(1, 5, i32(3)), Now: t0},
			launches: 3,
		},
		{
			name: "minimum zero and nothing running does nothing",
			in:   Snapshot{Spec: spec(0, 2, nil), Now: t0},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in.Now.IsZero() {
				tc.in.Now = t0
			}
			p := Decide(tc.in)
			if len(p.Launches) != tc.launches {
				t.Errorf("launches = %d, want %d", len(p.Launches), tc.launches)
			}
			if got := targetIDs(p); !reflect.DeepEqual(got, tc.targets) {
				t.Errorf("targets = %v, want %v", got, tc.targets)
			}
			if got := termIDs(p); !reflect.DeepEqual(got, tc.terminations) {
				t.Errorf("terminations = %v, want %v", got, tc.terminations)
			}
			if got := drainIDs(p); !reflect.DeepEqual(got, tc.drains) {
				t.Errorf("drains = %v, want %v", got, tc.drains)
			}
			if p.Ready != tc.ready {
				t.Errorf("ready = %d, want %d", p.Ready, tc.ready)
			}
			for id, want := range tc.phases {
				if p.Phases[id] != want {
					t.Errorf("phase of %s = %q, want %q", id, p.Phases[id], want)
				}
			}
			switch {
			case tc.maxRequeue == 0 && p.Requeue != 0:
				t.Errorf("requeue = %s, want none", p.Requeue)
			case tc.maxRequeue != 0 && (p.Requeue == 0 || p.Requeue > tc.maxRequeue):
				t.Errorf("requeue = %s, want in (0, %s]", p.Requeue, tc.maxRequeue)
			}
			// Invariant: no target is being terminated or drained.
			gone := map[string]bool{}
			for _, id := range append(termIDs(p), drainIDs(p)...) {
				gone[id] = true
			}
			for _, id := range targetIDs(p) {
				if gone[id] {
					t.Errorf("target %s is also leaving", id)
				}
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	cases := []struct {
		failures int
		want     time.Duration
	}{
		{1, 500 * time.Millisecond}, {2, time.Second}, {3, 2 * time.Second}, {10, 256 * time.Second}, {11, maxBackoff}, {50, maxBackoff},
	}
	for _, tc := range cases {
		if got := backoff(tc.failures); got != tc.want {
			t.Errorf("backoff(%d) = %s, want %s", tc.failures, got, tc.want)
		}
	}
}

func TestDesiredReplicas(t *testing.T) {
	cases := []struct {
		s    *tidev1.TidePoolSpec
		want int32
	}{
		{spec(2, 4, nil), 2}, {spec(2, 4, i32(3)), 3}, {spec(2, 4, i32(9)), 4}, {spec(2, 4, i32(0)), 2},
	}
	for _, tc := range cases {
		if got := tc.s.DesiredReplicas(); got != tc.want {
			t.Errorf("DesiredReplicas(%d..%d, %v) = %d, want %d", tc.s.Minimum, tc.s.Maximum, tc.s.Replicas, got, tc.want)
		}
	}
}

func stopped(v View) View {
	v.State = provider.StateStopped
	v.Market = provider.MarketOnDemand
	return v
}
