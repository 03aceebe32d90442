package engine

import (
	"reflect"
	"testing"
	"time"

	fakeclock "k8s.io/utils/clock/testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

const itype = "p3.2xlarge"

// placedSpec is a cloud pool of n placed by strategy over zones a and b.
func placedSpec(n int32, strategy string, standby *int32) *tidev1.TidePoolSpec {
	return &tidev1.TidePoolSpec{Provider: tidev1.ProviderAWS, InstanceType: itype, Minimum: n, Maximum: n,
		InstanceChargeType: tidev1.ChargeSpot, Serving: tidev1.ServingSpec{Models: []string{"m"}},
		Placement: &tidev1.PlacementSpec{Strategy: strategy, AvailabilityZones: []string{"a", "b"}, Standby: standby}}
}

// offers: spot in a (cheaper) and b, on-demand in a; spot false makes
// spot unavailable everywhere.
func offers(spot bool) []provider.Offering {
	return []provider.Offering{
		{Zone: "a", InstanceType: itype, Market: provider.MarketSpot, PricePerHour: 1, Available: spot},
		{Zone: "b", InstanceType: itype, Market: provider.MarketSpot, PricePerHour: 2, Available: spot},
		{Zone: "a", InstanceType: itype, Market: provider.MarketOnDemand, PricePerHour: 3, Available: true},
	}
}

// pinst is a running instance in zone a on market m.
func pinst(id string, m provider.Market, ready bool) View {
	v := inst(id, time.Hour, ready)
	v.Zone, v.InstanceType, v.Market = "a", itype, m
	return v
}

func placedSnapshot(spec *tidev1.TidePoolSpec, spot bool, mem Memory, views ...View) Snapshot {
	return Snapshot{Spec: spec, Now: t0, Instances: views, Placed: true, Offerings: offers(spot), Memory: mem,
		StandbyUsable: spec.Placement.Standby != nil}
}

type launchKey struct {
	market provider.Market
	zone   string
}

func launchKeys(d Decision) []launchKey {
	var out []launchKey
	for _, l := range d.Launches {
		out = append(out, launchKey{l.Market, l.Zone})
	}
	return out
}

// Placement is part of the decision: the strategy's launches, standby
// starts, recalls, retirements into drains, stops and terminations, and
// targets without the retired instances.
func TestDecidePlaced(t *testing.T) {
	one := int32(1)
	clk := fakeclock.NewFakeClock(t0)
	mem := placement.NewCapacityMemory(clk, 0)
	draining := func(v View, into bool, inFlight int) View {
		v.DrainDeadline, v.StopAfterDrain, v.InFlight = at(20*time.Second), into, inFlight
		return v
	}
	cases := []struct {
		name     string
		in       Snapshot
		launches []launchKey
		starts   []string
		recalls  []string
		drains   []string
		stops    []string
		terms    []string
		targets  []string
		phases   map[string]string
		check    func(t *testing.T, d Decision)
	}{
		{
			name:     "LowestPrice launches spot in the cheapest zone",
			in:       placedSnapshot(placedSpec(2, "LowestPrice", nil), true, mem),
			launches: []launchKey{{provider.MarketSpot, "a"}, {provider.MarketSpot, "a"}},
			check: func(t *testing.T, d Decision) {
				if d.Strategy != placement.LowestPrice || d.Policy == "" {
					t.Errorf("placement line %q: %q", d.Strategy, d.Policy)
				}
				if len(d.Memory) != 1 || len(d.Memory[0].Held) != 0 {
					t.Errorf("memory updates %+v, want one accrual of nothing held", d.Memory)
				}
			},
		},
		{
			name:     "without spot the fallback launches on-demand",
			in:       placedSnapshot(placedSpec(1, "LowestPrice", nil), false, mem),
			launches: []launchKey{{provider.MarketOnDemand, "a"}},
		},
		{
			name: "the standby is started in place of an on-demand launch",
			in: placedSnapshot(placedSpec(1, "LowestPrice", &one), false, mem,
				with(pinst("s", provider.MarketOnDemand, false), func(v *View) { v.State = provider.StateStopped })),
			starts: []string{"s"},
			// The started instance leaves the standby: one on-demand
			// launch refills it.
			launches: []launchKey{{provider.MarketOnDemand, "a"}},
			phases:   map[string]string{"s": tidev1.PhasePending},
		},
		{
			name: "an instance draining into standby is recalled when on-demand is wanted again",
			in: placedSnapshot(placedSpec(1, "LowestPrice", &one), false, mem,
				draining(pinst("r", provider.MarketOnDemand, true), true, 2)),
			recalls:  []string{"r"},
			launches: []launchKey{{provider.MarketOnDemand, "a"}},
			targets:  []string{"r"}, // the last ready instance serves
			check: func(t *testing.T, d Decision) {
				if d.Requeue != time.Millisecond {
					t.Errorf("requeue %v after a recall, want at once", d.Requeue)
				}
			},
		},
		{
			// Drained just as it is wanted again: recalled, neither
			// stopped nor terminated.
			name: "an instance recalled as its drain into standby ends serves on",
			in: placedSnapshot(placedSpec(2, "LowestPrice", &one), false, mem, pinst("s1", provider.MarketSpot, true),
				draining(pinst("r", provider.MarketOnDemand, true), true, 0)),
			recalls:  []string{"r"},
			launches: []launchKey{{provider.MarketOnDemand, "a"}}, // the standby refill
			targets:  []string{"s1"},
			phases:   map[string]string{"r": tidev1.PhaseDraining},
			check: func(t *testing.T, d Decision) {
				if len(d.Terminations)+len(d.Stops) > 0 {
					t.Errorf("the recalled instance is taken out: terminations %+v, stops %+v", d.Terminations, d.Stops)
				}
			},
		},
		{
			name: "ready spot retires the fallback into standby: it drains, then stops",
			in: placedSnapshot(placedSpec(1, "LowestPrice", &one), true, mem,
				pinst("od", provider.MarketOnDemand, true), pinst("s1", provider.MarketSpot, true)),
			drains:  []string{"od"},
			targets: []string{"s1"},
			phases:  map[string]string{"od": tidev1.PhaseDraining, "s1": tidev1.PhaseReady},
			check: func(t *testing.T, d Decision) {
				if !d.Drains[0].IntoStandby {
					t.Error("the drain does not go into standby")
				}
				if d.Requeue == 0 || d.Requeue > drainPoll {
					t.Errorf("requeue %v, want the drain followed within %v", d.Requeue, drainPoll)
				}
				if !reflect.DeepEqual(d.Memory[0].Held, map[placement.Key]int{{Zone: "a", InstanceType: itype, Market: provider.MarketSpot}: 1}) {
					t.Errorf("held %v, want the one spot instance", d.Memory[0].Held)
				}
			},
		},
		{
			name: "a drained instance on its way into standby is stopped, not terminated",
			in: placedSnapshot(placedSpec(1, "LowestPrice", &one), true, mem,
				pinst("s1", provider.MarketSpot, true), draining(pinst("od", provider.MarketOnDemand, true), true, 0)),
			stops:   []string{"od"},
			targets: []string{"s1"},
			phases:  map[string]string{"od": tidev1.PhaseStandby},
		},
		{
			name: "spot above the target is retired: drained, and no longer a target",
			in: placedSnapshot(placedSpec(1, "LowestPrice", nil), true, mem,
				pinst("s1", provider.MarketSpot, true), with(pinst("s2", provider.MarketSpot, true), func(v *View) { v.LaunchedAt = t0.Add(-time.Minute) })),
			drains:  []string{"s2"},
			targets: []string{"s1"},
			phases:  map[string]string{"s1": tidev1.PhaseReady, "s2": tidev1.PhaseDraining},
		},
		{
			name: "a not-ready instance placement retires is terminated at once",
			in: placedSnapshot(placedSpec(1, "LowestPrice", nil), true, mem,
				pinst("s1", provider.MarketSpot, true), pinst("od", provider.MarketOnDemand, false)),
			terms:   []string{"od"},
			targets: []string{"s1"},
		},
		{
			name: "while launches back off nothing is placed or retired",
			in: func() Snapshot {
				s := placedSnapshot(placedSpec(2, "LowestPrice", nil), true, mem, pinst("s1", provider.MarketSpot, true))
				s.LaunchBlockedUntil = t0.Add(3 * time.Second)
				return s
			}(),
			targets: []string{"s1"},
			check: func(t *testing.T, d Decision) {
				if d.Requeue != 3*time.Second || len(d.Memory) != 0 || d.Policy != "" {
					t.Errorf("requeue %v, memory %v, policy %q: want the backoff's end, no accrual, no placement", d.Requeue, d.Memory, d.Policy)
				}
			},
		},
		{
			name:     "offerings unknown: the spec's own offering",
			in:       Snapshot{Spec: placedSpec(1, "LowestPrice", nil), Now: t0, Memory: mem},
			launches: []launchKey{{provider.MarketSpot, ""}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			ids := func(n int, id func(int) string) []string {
				var out []string
				for i := range n {
					out = append(out, id(i))
				}
				return out
			}
			for _, c := range []struct {
				what      string
				got, want []string
			}{
				{"starts", ids(len(d.Starts), func(i int) string { return d.Starts[i].ID }), tc.starts},
				{"recalls", ids(len(d.Recalls), func(i int) string { return d.Recalls[i].ID }), tc.recalls},
				{"drains", drainIDs(d), tc.drains},
				{"stops", ids(len(d.Stops), func(i int) string { return d.Stops[i].ID }), tc.stops},
				{"terminations", termIDs(d), tc.terms},
				{"targets", targetIDs(d), tc.targets},
			} {
				if !reflect.DeepEqual(c.got, c.want) {
					t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
				}
			}
			if got := launchKeys(d); !reflect.DeepEqual(got, tc.launches) {
				t.Errorf("launches = %v, want %v", got, tc.launches)
			}
			for id, want := range tc.phases {
				if d.Phases[id] != want {
					t.Errorf("phase of %s = %q, want %q", id, d.Phases[id], want)
				}
			}
			for _, l := range d.Launches {
				if l.Reason == "" {
					t.Errorf("launch %+v without a reason", l)
				}
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

// Decide reads the capacity memory and changes nothing in it: the
// exposure comes back as a command, and the decision plans with it.
func TestDecideLeavesTheMemory(t *testing.T) {
	clk := fakeclock.NewFakeClock(t0)
	mem := placement.NewCapacityMemory(clk, 0)
	mem.Accrue(nil)
	clk.Step(time.Hour)
	k := placement.Key{Zone: "a", InstanceType: itype, Market: provider.MarketSpot}
	before := mem.LossRates(2, 1)
	s := placedSnapshot(placedSpec(1, "Adaptive", nil), true, mem, pinst("s1", provider.MarketSpot, true))
	d := Decide(s)
	if got := mem.LossRates(2, 1); !reflect.DeepEqual(got, before) {
		t.Errorf("Decide changed the memory: loss rates %v, were %v", got, before)
	}
	if len(d.Memory) != 1 || d.Memory[0].Held[k] != 1 {
		t.Fatalf("memory updates %+v, want an accrual of the spot held", d.Memory)
	}
	if again := Decide(s); !reflect.DeepEqual(again, d) {
		t.Errorf("the same snapshot gave another decision:\n%+v\n%+v", again, d)
	}
}

// The rest of a decision: weights and models on targets, the launches'
// "replacing" notes, probes, the outside requeue, a drained instance on
// its way into standby stopped even when the pool is no longer placed.
func TestDecideSettles(t *testing.T) {
	sp := spec(2, 2, nil)
	sp.Serving.Models = []string{"llama"}
	s := Snapshot{Spec: sp, Now: t0, Weights: map[string]int32{"a": 7}, Lost: []string{"gone-1"}, Requeue: 5 * time.Second,
		Instances: []View{inst("a", time.Minute, true), inst("b", time.Second, false),
			with(inst("c", time.Minute, true), func(v *View) { v.DrainDeadline, v.StopAfterDrain, v.InFlight = at(time.Second), true, 0 })}}
	d := Decide(s)
	want := []registrar.Target{{ID: "a", Address: "127.0.0.1:a", Weight: 7, Models: []string{"llama"}}}
	if !reflect.DeepEqual(d.Targets, want) {
		t.Errorf("targets %+v, want %+v", d.Targets, want)
	}
	if len(d.Launches) != 0 {
		t.Errorf("launches %+v: b is starting", d.Launches)
	}
	if len(d.Probes) != 1 || d.Probes[0].ID != "b" {
		t.Errorf("probes %+v, want b", d.Probes)
	}
	if len(d.Stops) != 1 || d.Stops[0].ID != "c" || len(d.Terminations) != 0 || d.Phases["c"] != tidev1.PhaseStandby {
		t.Errorf("stops %+v, terminations %+v: want c drained into standby", d.Stops, d.Terminations)
	}
	if d.Requeue != 5*time.Second {
		t.Errorf("requeue %v, want the outside 5s (before b's start timeout)", d.Requeue)
	}
	s.Instances = s.Instances[:1]
	if d := Decide(s); len(d.Launches) != 1 || d.Launches[0].Replacing != "gone-1" {
		t.Errorf("launches %+v, want one replacing gone-1", d.Launches)
	}
}

// A pool that may scale to zero keeps one stopped on-demand instance at
// zero (Adaptive's default standby), and its wake-up starts it.
func TestDecideScaleToZeroStandby(t *testing.T) {
	mem := placement.NewCapacityMemory(fakeclock.NewFakeClock(t0), 0)
	spec := func(n int32) *tidev1.TidePoolSpec {
		s := placedSpec(0, "", nil)
		s.Maximum, s.Replicas = 2, &n
		s.Autoscaling = &tidev1.AutoscalingSpec{}
		return s
	}
	stopped := with(pinst("s", provider.MarketOnDemand, false), func(v *View) { v.State = provider.StateStopped })
	if got := StandbyFor(spec(0), 0); got != 1 {
		t.Fatalf("StandbyFor at zero = %d, want 1", got)
	}
	if got := StandbyFor(&tidev1.TidePoolSpec{Placement: &tidev1.PlacementSpec{}}, 0); got != 0 {
		t.Fatalf("StandbyFor(0) of a pool that cannot scale to zero = %d, want 0", got)
	}
	atZero := placedSnapshot(spec(0), true, mem, stopped)
	atZero.StandbyUsable = true
	d := Decide(atZero)
	if len(d.Terminations)+len(d.Launches)+len(d.Starts) != 0 || d.Phases["s"] != tidev1.PhaseStandby {
		t.Fatalf("at zero: terminations %v launches %v starts %v phase %q; want the standby kept as it is", termIDs(d), launchKeys(d), d.Starts, d.Phases["s"])
	}
	woken := placedSnapshot(spec(1), true, mem, stopped)
	woken.StandbyUsable = true
	d = Decide(woken)
	if len(d.Starts) != 1 || d.Starts[0].ID != "s" {
		t.Fatalf("woken: starts %v launches %v; want the standby started", d.Starts, launchKeys(d))
	}
	t.Logf("woken: start %s (%s); launches %v", d.Starts[0].ID, d.Starts[0].Reason, launchKeys(d))
}
