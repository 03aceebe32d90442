package engine

import (
	"testing"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/placement"
)

func i32p(v int32) *int32 { return &v }

func TestStrategyStandbyAndTarget(t *testing.T) {
	cases := []struct {
		name     string
		spec     *tidev1.PlacementSpec
		strategy placement.Strategy
		placed   bool
		standby  int
		target   float64
	}{
		{"no placement: the spec's own offering", nil, "", false, 0, 0.999},
		{"empty placement: Adaptive, a standby per spot instance", &tidev1.PlacementSpec{}, placement.Adaptive, true, 4, 0.999},
		{"Adaptive with an on-demand base", &tidev1.PlacementSpec{OnDemandBase: 1}, placement.Adaptive, true, 3, 0.999},
		{"Adaptive, standby off", &tidev1.PlacementSpec{Standby: i32p(0)}, placement.Adaptive, true, 0, 0.999},
		{"LowestPrice: no standby unless asked", &tidev1.PlacementSpec{Strategy: "LowestPrice"}, placement.LowestPrice, true, 0, 0.999},
		{"ZoneResilient with a standby", &tidev1.PlacementSpec{Strategy: "ZoneResilient", Standby: i32p(2)}, placement.ZoneResilient, true, 2, 0.999},
		{"a target", &tidev1.PlacementSpec{AvailabilityTarget: "99.5"}, placement.Adaptive, true, 4, 0.995},
	}
	for _, c := range cases {
		spec := &tidev1.TidePoolSpec{Placement: c.spec}
		s, placed := StrategyOf(spec)
		if s != c.strategy || placed != c.placed {
			t.Errorf("%s: StrategyOf = %q, %v; want %q, %v", c.name, s, placed, c.strategy, c.placed)
		}
		if got := StandbyFor(spec, 4); got != c.standby {
			t.Errorf("%s: StandbyFor(4) = %d, want %d", c.name, got, c.standby)
		}
		if got := TargetOf(spec); got < c.target-1e-12 || got > c.target+1e-12 {
			t.Errorf("%s: TargetOf = %v, want %v", c.name, got, c.target)
		}
	}
}

func TestTimingOf(t *testing.T) {
	n := int32(30)
	mem := placement.NewCapacityMemory(nil, 0)
	got := timingOf(&tidev1.TidePoolSpec{Provider: tidev1.ProviderSim, Sim: &tidev1.SimSpec{NoticeSeconds: &n}}, mem)
	if got.Notice != 30*time.Second || got.ColdStart != 5*time.Minute {
		t.Errorf("sim pool with a 30 s notice: %+v", got)
	}
	mem.ObserveStart(7*time.Minute, false)
	mem.ObserveNotice(90 * time.Second)
	got = timingOf(&tidev1.TidePoolSpec{Provider: tidev1.ProviderAWS}, mem)
	if got.Notice != 90*time.Second || got.ColdStart != 7*time.Minute || got.WarmStart != 2*time.Minute {
		t.Errorf("measured timing not used: %+v", got)
	}
}
