package spotbench

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

func trace(t *testing.T, zones map[string][]int) *spotsim.Trace {
	t.Helper()
	var zts []spotsim.ZoneTrace
	for z, c := range zones {
		zts = append(zts, spotsim.ZoneTrace{Zone: z, Gap: 5 * time.Minute, Capacity: c})
	}
	tr, err := spotsim.NewTrace(zts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestRun checks the experiment's accounting on small traces whose outcome
// can be worked out by hand.
func TestRun(t *testing.T) {
	eight := func(v ...int) []int { return v }
	tests := []struct {
		name       string
		cfg        Config
		met        time.Duration
		dips       int
		longest    time.Duration
		odHours    float64
		spotHours  float64
		cost       float64
		refusedMin int
		// Standby: starts, stops and stopped hours; metServing (0: not
		// checked) is the engine's view.
		starts, stops int
		standbyHours  float64
		metServing    time.Duration
	}{
		{
			// 2 x 3.06 $/h for the 35 scored minutes, never short.
			name: "all on-demand",
			cfg: Config{Want: 2, Policy: placement.Policy{OnDemandBase: 2}, ColdStart: 5 * time.Minute,
				Trace: trace(t, map[string][]int{"us-east-1a": eight(0, 0, 0, 0, 0, 0, 0, 0)})},
			met: 35 * time.Minute, odHours: 2 * 35.0 / 60, cost: 2 * 3.06 * 35 / 60,
		},
		{
			// Zone at 0 during [10, 15) min: notice at 10 (not ready from
			// then), killed at 12; the zone is remembered until 13 (3 min),
			// refused at 13 (remembered until 16), placed at 16, ready at
			// 21: short from 10 to 21.
			name: "spot only, one zone",
			cfg: Config{Want: 2, ColdStart: 5 * time.Minute,
				Trace: trace(t, map[string][]int{"us-east-1a": eight(2, 2, 0, 2, 2, 2, 2, 2)})},
			met: 24 * time.Minute, dips: 1, longest: 11 * time.Minute, refusedMin: 1,
			// Scored from 5 min: 2 instances until 12, none until 16, 2 after.
			spotHours: (2*7 + 2*24) / 60.0, cost: (2*7 + 2*24) / 60.0 * 0.316025,
		},
		{
			// A 1 min cold start is shorter than the 2 min notice, but the
			// noticed instance stops counting at once: one 1-minute dip.
			name: "spot over zones, one zone lost",
			cfg: Config{Want: 2, ColdStart: time.Minute,
				Trace: trace(t, map[string][]int{"us-east-1a": eight(1, 1, 0, 0, 1, 1, 1, 1), "us-east-1b": eight(1, 1, 1, 1, 1, 1, 1, 1), "us-east-1c": eight(1, 1, 1, 1, 1, 1, 1, 1)})},
			met: 34 * time.Minute, dips: 1, longest: time.Minute,
			// 2 spot all along, plus the noticed one from 10 to 12.
			spotHours: (2*35 + 2) / 60.0, cost: (2*35 + 2) / 60.0 * 0.316025,
		},
		{
			name: "overprovision 1 covers it",
			cfg: Config{Want: 2, ColdStart: time.Minute, Policy: placement.Policy{Overprovision: 1},
				Trace: trace(t, map[string][]int{"us-east-1a": eight(1, 1, 0, 0, 1, 1, 1, 1), "us-east-1b": eight(1, 1, 1, 1, 1, 1, 1, 1), "us-east-1c": eight(1, 1, 1, 1, 1, 1, 1, 1)})},
			met: 35 * time.Minute,
			// 3 spot during the notice from 10 to 12 ... then 2 until 20,
			// when us-east-1a is back (after its memory) and takes the third.
			spotHours: -1, cost: -1,
		},
		{
			// Spot gone everywhere from 10 to 20 min: the fallback
			// on-demand launches once the notice comes, ready at 15; spot
			// is back at 20 (the zone, remembered for 3 min after each
			// refusal at 13, 16 and 19, is tried again at 22 and placed),
			// ready at 27, when the on-demand instance retires.
			name: "spot + fallback",
			cfg: Config{Want: 1, ColdStart: 5 * time.Minute, Policy: placement.Policy{SpotFallback: true},
				Trace: trace(t, map[string][]int{"us-east-1a": eight(1, 1, 0, 0, 1, 1, 1, 1)})},
			met: 30 * time.Minute, dips: 1, longest: 5 * time.Minute, refusedMin: 1,
			spotHours: -1, odHours: -1, cost: -1,
		},
		{
			// Warm standby 1, warm start 1 min, eager fallback. At 0: spot,
			// an on-demand stand-in (o1) and one for the standby (o2);
			// at 5 all are ready: o2 is stopped, o1 terminated. At 10 the
			// notice: o2 is started (ready at 11) and o3 launched to
			// refill the standby (not retired while it starts). At 15
			// o3 is ready and stopped (the younger ID of two started at
			// 10). Spot is back at 22 (refused at 13, 16, 19), ready at
			// 27, when o2 is terminated (the standby is full).
			// Drained at notice, short from 10 to 11; the engine's view
			// is never short.
			name: "spot + eager fallback + warm standby",
			cfg: Config{Want: 1, ColdStart: 5 * time.Minute, WarmStart: time.Minute,
				Policy: placement.Policy{SpotFallback: true, EagerFallback: true, Standby: 1},
				Trace:  trace(t, map[string][]int{"us-east-1a": eight(1, 1, 0, 0, 1, 1, 1, 1)})},
			met: 34 * time.Minute, dips: 1, longest: time.Minute, refusedMin: 3, metServing: 35 * time.Minute,
			// Spot 5-12 and 22-40; o2 runs 10-27, o3 10-15; stopped: o2
			// 5-10, o3 15-40.
			spotHours: 25 / 60.0, odHours: 22 / 60.0, standbyHours: 30 / 60.0,
			cost:   25/60.0*0.316025 + 22/60.0*3.06 + 30/60.0*DefaultStandbyPrice,
			starts: 1, stops: 2,
		},
		{
			// The same without the standby: the stand-in launched at the
			// notice is ready at 15; drained at notice short 10-15, the
			// engine's view 12-15.
			name: "spot + eager fallback, no standby",
			cfg: Config{Want: 1, ColdStart: 5 * time.Minute, WarmStart: time.Minute,
				Policy: placement.Policy{SpotFallback: true, EagerFallback: true},
				Trace:  trace(t, map[string][]int{"us-east-1a": eight(1, 1, 0, 0, 1, 1, 1, 1)})},
			met: 30 * time.Minute, dips: 1, longest: 5 * time.Minute, refusedMin: 3, metServing: 32 * time.Minute,
			spotHours: -1, odHours: -1, cost: -1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Warmup = 5 * time.Minute
			res, err := Run(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Scored != 35*time.Minute {
				t.Errorf("scored %v, want 35m", res.Scored)
			}
			if res.Met != tc.met || res.Dips != tc.dips || res.LongestDip != tc.longest {
				t.Errorf("met %v dips %d longest %v, want %v %d %v", res.Met, res.Dips, res.LongestDip, tc.met, tc.dips, tc.longest)
			}
			if res.Refused < tc.refusedMin {
				t.Errorf("refused %d, want at least %d", res.Refused, tc.refusedMin)
			}
			near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
			if tc.odHours >= 0 && !near(res.MarketHours(provider.MarketOnDemand), tc.odHours) {
				t.Errorf("on-demand hours %v, want %v", res.MarketHours(provider.MarketOnDemand), tc.odHours)
			}
			if tc.spotHours >= 0 && !near(res.MarketHours(provider.MarketSpot), tc.spotHours) {
				t.Errorf("spot hours %v, want %v", res.MarketHours(provider.MarketSpot), tc.spotHours)
			}
			if tc.cost >= 0 && !near(res.Cost, tc.cost) {
				t.Errorf("cost %v, want %v", res.Cost, tc.cost)
			}
			if res.Starts != tc.starts || res.Stops != tc.stops || !near(res.StandbyHours, tc.standbyHours) {
				t.Errorf("starts %d stops %d standby hours %v, want %d %d %v", res.Starts, res.Stops, res.StandbyHours, tc.starts, tc.stops, tc.standbyHours)
			}
			if tc.metServing > 0 && res.MetServing != tc.metServing {
				t.Errorf("met (engine's view) %v, want %v", res.MetServing, tc.metServing)
			}
			if !near(res.CostAt(nil, 3.06), res.StandbyCost+3.06*(res.MarketHours(provider.MarketSpot)+res.MarketHours(provider.MarketOnDemand))) {
				t.Errorf("CostAt with every price at 3.06")
			}
		})
	}
}

func TestRunConfigErrors(t *testing.T) {
	tr := trace(t, map[string][]int{"a": {1}})
	long := trace(t, map[string][]int{"a": {1, 1, 1, 1}})
	for name, cfg := range map[string]Config{
		"no trace":               {Want: 1},
		"no want":                {Trace: tr},
		"bad policy":             {Trace: tr, Want: 1, Policy: placement.Policy{Overprovision: -1}},
		"warm-up too long":       {Trace: tr, Want: 1},
		"negative warm start":    {Trace: long, Want: 1, Warmup: 5 * time.Minute, WarmStart: -time.Minute},
		"negative standby price": {Trace: long, Want: 1, Warmup: 5 * time.Minute, StandbyPrice: -1},
	} {
		if _, err := Run(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}
