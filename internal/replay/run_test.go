package replay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

// The traces here are built in the SpotHedge artifact's format (one
// capacity per zone per gap_seconds step; ../shared/data/README.md).

func trace(t *testing.T, gap time.Duration, zones map[string][]int) *spotsim.Trace {
	t.Helper()
	var zs []spotsim.ZoneTrace
	for z, c := range zones {
		zs = append(zs, spotsim.ZoneTrace{Zone: z, Gap: gap, Capacity: c})
	}
	tr, err := spotsim.NewTrace(zs)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func steps(pattern ...int) []int {
	// pattern: value, count, value, count, ...
	var out []int
	for i := 0; i+1 < len(pattern); i += 2 {
		for range pattern[i+1] {
			out = append(out, pattern[i])
		}
	}
	return out
}

func cloudPool(n int32, pl *tidev1.PlacementSpec) *tidev1.TidePool {
	zero := int32(0)
	return &tidev1.TidePool{ObjectMeta: metav1.ObjectMeta{Name: "chat"}, Spec: tidev1.TidePoolSpec{
		Provider: tidev1.ProviderAWS, InstanceType: "p3.2xlarge", Minimum: n, Maximum: n, DrainSeconds: &zero, Placement: pl,
	}}
}

// One zone loses its spot capacity for an hour: the noticed instances
// serve through the notice, the fallback's on-demand instances are ready a
// cold start after the notice, so the pool dips for cold start - notice.
func TestReplayFallbackDipsForColdStartMinusNotice(t *testing.T) {
	tr := trace(t, 5*time.Minute, map[string][]int{"us-east-1a": steps(2, 24, 0, 12, 2, 24)})
	res, err := Run(context.Background(), Options{Pool: cloudPool(2, &tidev1.PlacementSpec{AvailabilityZones: []string{"us-east-1a"}, Strategy: tidev1.StrategyLowestPrice}),
		Trace: tr, ColdStart: 5 * time.Minute, Notice: 2 * time.Minute, Warmup: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Preemptions != 2 {
		t.Errorf("preemptions %d, want 2", res.Preemptions)
	}
	if res.Dips != 1 || res.LongestDip < 3*time.Minute || res.LongestDip > 3*time.Minute+time.Second {
		t.Errorf("dips %d, longest %v; want 1 of cold start - notice (3m)", res.Dips, res.LongestDip)
	}
	if res.Hours.OnDemand < 2 { // two for the hour of no spot, until spot is back and ready
		t.Errorf("on-demand hours %.2f, want at least 2", res.Hours.OnDemand)
	}
	if res.Savings <= 0 || res.Savings >= 1 || res.Cost <= 0 || res.OnDemandCost <= res.Cost {
		t.Errorf("cost %.2f, all on-demand %.2f, savings %.3f", res.Cost, res.OnDemandCost, res.Savings)
	}
	if res.Availability >= 1 || res.Availability < 0.95 || res.AvailabilityDrained > res.Availability {
		t.Errorf("availability %.4f (drained at notice %.4f)", res.Availability, res.AvailabilityDrained)
	}
	if len(res.Series) == 0 || res.Series[0].Wanted != 2 {
		t.Fatalf("series %+v", res.Series)
	}
	minServing := 2
	for _, s := range res.Series {
		minServing = min(minServing, s.Serving)
	}
	if minServing != 0 {
		t.Errorf("the series hides the dip: least serving %d, want 0", minServing)
	}
}

// A warm standby started at the notice serves before the noticed instance
// goes when the warm start is shorter than the notice: no dip. The replay
// runs the engine's decision: the same trace under another spec decides
// otherwise.
func TestReplayFollowsTheSpec(t *testing.T) {
	tr := trace(t, 5*time.Minute, map[string][]int{"us-east-1a": steps(2, 24, 0, 12, 2, 24)})
	var reasons []string
	run := func(pl *tidev1.PlacementSpec) Result {
		reasons = nil
		res, err := Run(context.Background(), Options{Pool: cloudPool(2, pl), Trace: tr, ColdStart: 5 * time.Minute,
			WarmStart: time.Minute, Notice: 2 * time.Minute, Warmup: 10 * time.Minute,
			Events: func(e events.Event) { reasons = append(reasons, e.Reason+": "+e.Message) }})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// The decisions are the engine's: its events say what the strategy
	// resolved to and why each instance was launched or started.
	said := func(what string) bool {
		for _, r := range reasons {
			if strings.Contains(r, what) {
				return true
			}
		}
		return false
	}
	two := int32(2)
	plain := run(&tidev1.PlacementSpec{AvailabilityZones: []string{"us-east-1a"}, Strategy: tidev1.StrategyLowestPrice})
	if !said("Placement: LowestPrice") || !said("on-demand fallback") {
		t.Errorf("LowestPrice: the engine's events do not show its decision: %q", reasons)
	}
	standby := run(&tidev1.PlacementSpec{AvailabilityZones: []string{"us-east-1a"}, Standby: &two})
	if !said("Placement: Adaptive") || !said("Started: started standby") {
		t.Errorf("Adaptive: the engine's events do not show its decision: %q", reasons)
	}
	if standby.Dips != 0 || standby.Starts != 2 {
		t.Errorf("with a standby: %d dips, %d starts; want 0 and 2", standby.Dips, standby.Starts)
	}
	if plain.Dips == 0 || plain.Starts != 0 {
		t.Errorf("without: %d dips, %d starts; want a dip and no start", plain.Dips, plain.Starts)
	}
}

func TestReplayOptionErrors(t *testing.T) {
	tr := trace(t, 5*time.Minute, map[string][]int{"us-east-1a": steps(2, 24), "eu-north-9a": steps(2, 24)})
	for name, c := range map[string]struct {
		opts Options
		want string
	}{
		"no pool":      {Options{Trace: tr}, "a named pool"},
		"no trace":     {Options{Pool: cloudPool(2, nil)}, "a trace"},
		"zone missing": {Options{Pool: cloudPool(2, &tidev1.PlacementSpec{AvailabilityZones: []string{"us-west-2a"}}), Trace: tr}, "zone us-west-2a of the pool has no trace"},
		"no price":     {Options{Pool: cloudPool(2, &tidev1.PlacementSpec{AvailabilityZones: []string{"eu-north-9a"}}), Trace: tr}, "zone eu-north-9a: no spot price"},
		"local start timeout": {Options{Pool: func() *tidev1.TidePool {
			p := cloudPool(2, nil)
			p.Spec.Provider = tidev1.ProviderSim
			return p
		}(), Trace: tr}, "start timeout"},
		"short": {Options{Pool: cloudPool(2, nil), Trace: tr, Warmup: 3 * time.Hour}, "warm-up"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Run(context.Background(), c.opts)
			if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want ErrOptions saying %q", err, c.want)
			}
		})
	}
}
