package spotbench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/replay"
)

// evalParts are the data the defaults were not chosen on.
var evalParts = []string{"aws1", "aws3/2"}

// TestSpotHeadline is the headline, cheap enough for every CI run: the
// default strategy on all of aws1 (never used to choose anything), 2 min
// notice, 5 min cold start, 2 min warm start, holds the goal.
func TestSpotHeadline(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("trace replays: not under -short or -race")
	}
	parts := loadParts(t)
	res := replayAll(t, []run{{part: parts["aws1"], notice: 2 * time.Minute, coldStart: 5 * time.Minute, warmStart: 2 * time.Minute}})[0]
	t.Logf("aws1, default strategy (%s), 120 s notice: availability %s (drained at the notice %s), saved %s, %d dips, longest %v",
		res.Strategy, pct(res.Availability), pct(res.AvailabilityDrained), pct(res.Savings), res.Dips, res.LongestDip)
	if res.Availability < goalAvailable || res.Savings < goalSavings {
		t.Errorf("default strategy on aws1: availability %s, saved %s; the goal is %s and %s",
			pct(res.Availability), pct(res.Savings), pct(goalAvailable), pct(goalSavings))
	}
}

// TestSpotEvaluation reports every strategy on the evaluation data at both
// notices, the default's sensitivity to cold start, warm start and notice,
// and the cost/availability frontier at 30 s; it asserts that no strategy
// is worse than plain spot + fallback (LowestPrice) on availability and
// cost at once, and the headline at 120 s on both parts.
func TestSpotEvaluation(t *testing.T) {
	heavy(t)
	parts := loadParts(t)
	strategies := []string{tidev1.StrategyAdaptive, tidev1.StrategyLowestPrice, tidev1.StrategyZoneResilient, tidev1.StrategyOnDemand}
	notices := []time.Duration{2 * time.Minute, 30 * time.Second}
	const cold, warm = 5 * time.Minute, 2 * time.Minute

	// 1. Every strategy, both notices, both evaluation parts.
	var runs []run
	for _, s := range strategies {
		for _, n := range notices {
			for _, p := range evalParts {
				runs = append(runs, run{part: parts[p], strategy: s, notice: n, coldStart: cold, warmStart: warm})
			}
		}
	}
	res := replayAll(t, runs)
	var b strings.Builder
	fmt.Fprintf(&b, "strategies, pool of %d, cold %v, warm %v (engine's view; drained at the notice in brackets)\n", benchWant, cold, warm)
	fmt.Fprintf(&b, "| strategy | notice | aws1 availability | aws1 saved | aws3 2nd half availability | aws3 2nd half saved | worst availability | mean saved |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	byKey := map[string][2]replay.Result{}
	for i := 0; i < len(runs); i += 2 {
		a, c := res[i], res[i+1]
		key := runs[i].strategy + "|" + runs[i].notice.String()
		byKey[key] = [2]replay.Result{a, c}
		fmt.Fprintf(&b, "| %s | %v | %s (%s), %d dips | %s | %s (%s), %d dips | %s | %s | %s |\n", runs[i].strategy, runs[i].notice,
			pct(a.Availability), pct(a.AvailabilityDrained), a.Dips, pct(a.Savings),
			pct(c.Availability), pct(c.AvailabilityDrained), c.Dips, pct(c.Savings),
			pct(min(a.Availability, c.Availability)), pct((a.Savings+c.Savings)/2))
	}
	t.Log("\n" + b.String())
	for _, n := range notices {
		lp := byKey[tidev1.StrategyLowestPrice+"|"+n.String()]
		for _, s := range strategies {
			r := byKey[s+"|"+n.String()]
			for i := range r {
				if r[i].Availability < lp[i].Availability && r[i].Cost > lp[i].Cost {
					t.Errorf("%s at %v on %s: worse than LowestPrice on availability (%s < %s) and cost (%.0f > %.0f) at once",
						s, n, evalParts[i], pct(r[i].Availability), pct(lp[i].Availability), r[i].Cost, lp[i].Cost)
				}
			}
		}
	}
	// At 30 s the goal is out of reach on aws1 (BENCHMARKS.md): hold
	// the figures reported there, so that a change making them worse fails.
	floors := [2]float64{0.9925, 0.999}
	for i, r := range byKey[tidev1.StrategyAdaptive+"|30s"] {
		if r.Availability < floors[i] || r.Savings < 0.60 {
			t.Errorf("the default at 30 s notice on %s: availability %s, saved %s; BENCHMARKS.md reports at least %s and 60 %%",
				evalParts[i], pct(r.Availability), pct(r.Savings), pct(floors[i]))
		}
	}
	for i, r := range byKey[tidev1.StrategyAdaptive+"|2m0s"] {
		if r.Availability < goalAvailable || r.Savings < goalSavings {
			t.Errorf("the default at 120 s notice on %s: availability %s, saved %s; the goal is %s and %s",
				evalParts[i], pct(r.Availability), pct(r.Savings), pct(goalAvailable), pct(goalSavings))
		}
	}

	// 2. The default's sensitivity: cold start 2/5/10 min, warm start 1/2/4 min.
	type setting struct{ cold, warm time.Duration }
	settings := []setting{{2 * time.Minute, warm}, {10 * time.Minute, warm}, {cold, time.Minute}, {cold, 4 * time.Minute}}
	runs = runs[:0]
	for _, st := range settings {
		for _, n := range notices {
			for _, p := range evalParts {
				runs = append(runs, run{part: parts[p], notice: n, coldStart: st.cold, warmStart: st.warm})
			}
		}
	}
	res = replayAll(t, runs)
	b.Reset()
	fmt.Fprintf(&b, "the default's sensitivity (the 5m/2m rows are in the table above)\n")
	fmt.Fprintf(&b, "| cold start | warm start | notice | aws1 availability | aws1 saved | aws3 2nd half availability | aws3 2nd half saved |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for i := 0; i < len(runs); i += 2 {
		a, c := res[i], res[i+1]
		fmt.Fprintf(&b, "| %v | %v | %v | %s | %s | %s | %s |\n", runs[i].coldStart, runs[i].warmStart, runs[i].notice,
			pct(a.Availability), pct(a.Savings), pct(c.Availability), pct(c.Savings))
	}
	t.Log("\n" + b.String())

	// 3. The frontier at 30 s notice: the default at other targets, and
	// with an on-demand base (the number a user owns).
	type point struct {
		target string
		base   int32
	}
	points := []point{{"99", 0}, {"99.5", 0}, {"99.99", 0}, {"", 1}, {"", 2}}
	runs = runs[:0]
	for _, pt := range points {
		for _, p := range evalParts {
			runs = append(runs, run{part: parts[p], target: pt.target, onDemandBase: pt.base, notice: 30 * time.Second, coldStart: cold, warmStart: warm})
		}
	}
	res = replayAll(t, runs)
	b.Reset()
	fmt.Fprintf(&b, "frontier at 30 s notice: Adaptive at other availability targets and on-demand bases (target 99.9, base 0 and the other strategies above)\n")
	fmt.Fprintf(&b, "| target | on-demand base | aws1 availability | aws1 saved | aws3 2nd half availability | aws3 2nd half saved |\n| --- | --- | --- | --- | --- | --- |\n")
	for i := 0; i < len(runs); i += 2 {
		a, c := res[i], res[i+1]
		tg := runs[i].target
		if tg == "" {
			tg = "99.9"
		}
		fmt.Fprintf(&b, "| %s %% | %d | %s | %s | %s | %s |\n", tg, runs[i].onDemandBase, pct(a.Availability), pct(a.Savings), pct(c.Availability), pct(c.Savings))
	}
	t.Log("\n" + b.String())
}
