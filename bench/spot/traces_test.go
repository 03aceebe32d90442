package spotbench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

// Prices of the comparison (USD per hour, p3.2xlarge).
const (
	// onDemandPrice is p3.2xlarge on-demand in us-east-1 (the data
	// README, and internal/market's catalog.csv).
	onDemandPrice = 3.06
	// The SkyServe paper's g5.48xlarge figures (7 May 2024, the data
	// README): on-demand 16.288 $/h, spot 2.71 to 6.84 $/h by zone. Their
	// ratios applied to p3.2xlarge's on-demand price give a uniform spot
	// price at the paper's cheapest and dearest zone.
	paperOnDemand  = 16.288
	paperSpotLow   = 2.71
	paperSpotHigh  = 6.84
	goalSavings    = 0.50
	goalAvailable  = 0.999
	benchWant      = 4
	benchColdStart = 5 * time.Minute
)

func traceDir(name string) string {
	if p := os.Getenv("TIDEGPU_SPOT_TRACES"); p != "" {
		return filepath.Join(p, name)
	}
	return filepath.Join("..", "..", "..", "shared", "data", "spot-traces", name)
}

// policyRow is one line of the table.
type policyRow struct {
	label     string
	policy    placement.Policy
	coldStart time.Duration
	oneZone   bool // run once per zone, report the best and the worst zone
	// preemptedTTL of the capacity memory: 0 the default (1 h), -1 off.
	preemptedTTL time.Duration
	// preemptedMax > 0 makes the preempted hold adaptive, from
	// preemptedTTL up to preemptedMax (CapacityMemory.SetPreemptedBackoff).
	preemptedMax time.Duration
	// warmStart of a started standby instance (policy.Standby > 0).
	warmStart time.Duration
}

// standbyRows are the warm standby rows (issue 7): the best policies of
// the tables above, with eager fallback (a notice is covered at once, by a
// standby start) and without, with a standby of 2 and 4 stopped on-demand
// instances and a warm start of 1 to 3 min.
func standbyRows() []policyRow {
	fb := placement.Policy{SpotFallback: true}
	op2 := placement.Policy{SpotFallback: true, Overprovision: 2}
	headline := regions(cover(capped(op2, 2), placement.DomainZone))
	aws1 := cheapFirst(preemptedCap(preempted(cover(op2, placement.DomainZone)), 1))
	bases := []policyRow{
		{label: "spot + fallback, eager", policy: eager(fb)},
		{label: "spot + fallback + overprovision 2, eager", policy: eager(op2)},
		{label: "aws3 headline (op 2, max 2 per zone, regions first, zone-loss cover), eager", policy: eager(headline)},
		{label: "aws1 best (op 2, cover preempted zones (adaptive 2 h..32 h), max 1 per preempted zone, cheap first), eager", policy: eager(aws1), preemptedTTL: 2 * time.Hour, preemptedMax: 32 * time.Hour},
		{label: "aws1 cheapest (op 2, cover preempted zones (3 h), max 1 per preempted zone, cheap first), eager", policy: eager(aws1), preemptedTTL: 3 * time.Hour},
	}
	var rows []policyRow
	for _, b := range bases {
		for _, k := range []int{2, 4} {
			for _, w := range []time.Duration{time.Minute, 90 * time.Second, 2 * time.Minute, 3 * time.Minute} {
				r := b
				r.policy.Standby, r.warmStart = k, w
				rows = append(rows, r)
			}
		}
	}
	// Without eager fallback a notice is covered by a start only when its
	// spot replacement cannot be placed.
	for _, b := range []policyRow{
		{label: "spot + fallback (lazy)", policy: fb},
		{label: "aws3 headline (lazy)", policy: headline},
		{label: "aws1 best (lazy)", policy: aws1, preemptedTTL: 2 * time.Hour, preemptedMax: 32 * time.Hour},
	} {
		b.policy.Standby, b.warmStart = 2, 2*time.Minute
		rows = append(rows, b)
	}
	return rows
}

// rowKey names a row uniquely (standby rows share their label).
func (r policyRow) key() string {
	return fmt.Sprintf("%s|%d|%v", r.label, r.policy.Standby, r.warmStart)
}

func policyRows() []policyRow {
	fb := placement.Policy{SpotFallback: true}
	op := func(n int) placement.Policy { return placement.Policy{SpotFallback: true, Overprovision: n} }
	return []policyRow{
		{label: "spot only, one zone", oneZone: true},
		{label: "spot only, all zones"},
		{label: "spot only, all zones, overprovision 2", policy: placement.Policy{Overprovision: 2}},
		{label: "spot + fallback", policy: fb},
		{label: "spot + fallback, eager (SkyServe's rule)", policy: placement.Policy{SpotFallback: true, EagerFallback: true}},
		{label: "spot + fallback + overprovision 1", policy: op(1)},
		{label: "spot + fallback + overprovision 2", policy: op(2)},
		{label: "spot + fallback + overprovision 2 + on-demand base 1", policy: placement.Policy{SpotFallback: true, Overprovision: 2, OnDemandBase: 1}},
		{label: "all on-demand", policy: placement.Policy{OnDemandBase: benchWant}},
		// Without SpotHedge's preference for zones that were not preempted.
		{label: "spot + fallback, no preempted-zone preference", policy: fb, preemptedTTL: -1},
		{label: "spot + fallback + overprovision 2, no preempted-zone preference", policy: op(2), preemptedTTL: -1},
		// Sensitivity to the cold start.
		{label: "spot + fallback, cold start 2 min", policy: fb, coldStart: 2 * time.Minute},
		{label: "spot + fallback + overprovision 1, cold start 2 min", policy: op(1), coldStart: 2 * time.Minute},
		{label: "spot + fallback + overprovision 2, cold start 2 min", policy: op(2), coldStart: 2 * time.Minute},
		{label: "spot + fallback + overprovision 2, cold start 10 min", policy: op(2), coldStart: 10 * time.Minute},
		// Failure domains (issue 7, item 6): a cap per zone, and on-demand
		// cover for the loss of a zone's (or region's) spot.
		{label: "spot + fallback + overprovision 2, max 2 per zone", policy: capped(op(2), 2)},
		{label: "spot + fallback, zone-loss cover", policy: cover(fb, placement.DomainZone)},
		{label: "spot + fallback + overprovision 1, max 1 per zone, zone-loss cover", policy: cover(capped(op(1), 1), placement.DomainZone)},
		{label: "spot + fallback + overprovision 2, max 2 per zone, zone-loss cover", policy: cover(capped(op(2), 2), placement.DomainZone)},
		{label: "spot + fallback + overprovision 2, max 2 per zone, zone-loss cover, eager", policy: eager(cover(capped(op(2), 2), placement.DomainZone))},
		{label: "spot + fallback + overprovision 3, max 2 per zone, zone-loss cover", policy: cover(capped(op(3), 2), placement.DomainZone)},
		// Regions first (SpreadRegions).
		{label: "spot + fallback + overprovision 2, regions first", policy: regions(op(2))},
		{label: "spot + fallback + overprovision 2, max 2 per zone, regions first", policy: regions(capped(op(2), 2))},
		{label: "spot + fallback + overprovision 2, max 2 per zone, regions first, zone-loss cover", policy: regions(cover(capped(op(2), 2), placement.DomainZone))},
		{label: "spot + fallback + overprovision 2, max 2 per zone, regions first, zone-loss cover, eager", policy: eager(regions(cover(capped(op(2), 2), placement.DomainZone)))},
		{label: "spot + fallback + overprovision 3, max 2 per zone, regions first, zone-loss cover", policy: regions(cover(capped(op(3), 2), placement.DomainZone))},
		{label: "spot + fallback + overprovision 2, max 1 per zone, region-loss cover", policy: cover(capped(op(2), 1), placement.DomainRegion)},
		// Risk-aware: cover only zones that lost an instance recently.
		{label: "spot + fallback + overprovision 2, cover preempted zones (1 h)", policy: preempted(cover(op(2), placement.DomainZone))},
		{label: "spot + fallback + overprovision 2, cover preempted zones (3 h)", policy: preempted(cover(op(2), placement.DomainZone)), preemptedTTL: 3 * time.Hour},
		{label: "spot + fallback + overprovision 2, cover preempted zones (12 h)", policy: preempted(cover(op(2), placement.DomainZone)), preemptedTTL: 12 * time.Hour},
		{label: "spot + fallback + overprovision 2, max 2 per zone, cover preempted zones (24 h)", policy: preempted(cover(capped(op(2), 2), placement.DomainZone)), preemptedTTL: 24 * time.Hour},
		// Adaptive hold, a cap on preempted zones and cheap-first placement
		// (issue 7, item 6, on aws1).
		{label: "spot + fallback + overprovision 2, cover preempted zones (adaptive 2 h..32 h)", policy: preempted(cover(op(2), placement.DomainZone)), preemptedTTL: 2 * time.Hour, preemptedMax: 32 * time.Hour},
		{label: "spot + fallback + overprovision 2, cover preempted zones (3 h), max 1 per preempted zone, cheap first", policy: cheapFirst(preemptedCap(preempted(cover(op(2), placement.DomainZone)), 1)), preemptedTTL: 3 * time.Hour},
		{label: "spot + fallback + overprovision 2, cover preempted zones (adaptive 30 min..32 h), max 1 per preempted zone, cheap first", policy: cheapFirst(preemptedCap(preempted(cover(op(2), placement.DomainZone)), 1)), preemptedTTL: 30 * time.Minute, preemptedMax: 32 * time.Hour},
		{label: "spot + fallback + overprovision 2, cover preempted zones (adaptive 2 h..32 h), max 1 per preempted zone, cheap first", policy: cheapFirst(preemptedCap(preempted(cover(op(2), placement.DomainZone)), 1)), preemptedTTL: 2 * time.Hour, preemptedMax: 32 * time.Hour},
		{label: "spot + fallback + overprovision 2, max 2 per zone, regions first, zone-loss cover, cheap first", policy: cheapFirst(regions(cover(capped(op(2), 2), placement.DomainZone)))},
		// The headline policy at other cold starts.
		{label: "spot + fallback + overprovision 2, max 2 per zone, regions first, zone-loss cover, cold start 2 min", policy: regions(cover(capped(op(2), 2), placement.DomainZone)), coldStart: 2 * time.Minute},
		{label: "spot + fallback + overprovision 2, max 2 per zone, regions first, zone-loss cover, cold start 10 min", policy: regions(cover(capped(op(2), 2), placement.DomainZone)), coldStart: 10 * time.Minute},
	}
}

func capped(p placement.Policy, n int) placement.Policy { p.MaxPerZone = n; return p }

func cover(p placement.Policy, d placement.Domain) placement.Policy { p.CoverLoss = d; return p }

func eager(p placement.Policy) placement.Policy { p.EagerFallback = true; return p }

func regions(p placement.Policy) placement.Policy { p.SpreadRegions = true; return p }

func preempted(p placement.Policy) placement.Policy { p.CoverPreemptedOnly = true; return p }

func preemptedCap(p placement.Policy, n int) placement.Policy { p.MaxPerPreemptedZone = n; return p }

func cheapFirst(p placement.Policy) placement.Policy { p.CheapFirst = true; return p }

type outcome struct {
	row    policyRow
	zone   string // for one-zone rows
	res    Result
	runErr error
}

// TestSpotTraces replays aws1 and aws3 for a pool of 4 under each policy
// and prints the table of BENCHMARKS.md.
func TestSpotTraces(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 81 days of spot traces (about 35 s): not with -short")
	}
	if raceEnabled {
		t.Skip("replays 81 days of spot traces, ten times slower under -race: run without -race")
	}
	for _, name := range []string{"aws1", "aws3"} {
		t.Run(name, func(t *testing.T) {
			dir := traceDir(name)
			if _, err := os.Stat(dir); err != nil {
				t.Skipf("spot traces not found (%v): they live in ../shared/data/spot-traces/ next to the repository; set TIDEGPU_SPOT_TRACES to the spot-traces folder", err)
			}
			tr, err := spotsim.LoadTrace(dir, name == "aws3")
			if err != nil {
				t.Fatal(err)
			}
			replay(t, name, tr)
		})
	}
}

func replay(t *testing.T, name string, tr *spotsim.Trace) {
	start := time.Now()
	var jobs []outcome
	for _, r := range append(policyRows(), standbyRows()...) {
		if r.coldStart == 0 {
			r.coldStart = benchColdStart
		}
		if !r.oneZone {
			jobs = append(jobs, outcome{row: r})
			continue
		}
		for _, z := range tr.ZoneNames() {
			jobs = append(jobs, outcome{row: r, zone: z})
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i := range jobs {
		wg.Add(1)
		go func(o *outcome) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p := o.row.policy
			if o.zone != "" {
				p.Zones = []string{o.zone}
			}
			o.res, o.runErr = Run(Config{Trace: tr, Want: benchWant, Policy: p, ColdStart: o.row.coldStart, PreemptedTTL: o.row.preemptedTTL, PreemptedMax: o.row.preemptedMax,
				WarmStart: o.row.warmStart})
		}(&jobs[i])
	}
	wg.Wait()
	for _, o := range jobs {
		if o.runErr != nil {
			t.Fatalf("%s %s: %v", o.row.label, o.zone, o.runErr)
		}
	}

	// The all on-demand baseline.
	var base Result
	for _, o := range jobs {
		if o.row.label == "all on-demand" {
			base = o.res
		}
	}
	wantBase := float64(benchWant) * onDemandPrice * base.Scored.Hours()
	if math.Abs(base.Cost-wantBase) > 1e-6*wantBase || base.Availability() != 1 {
		t.Fatalf("all on-demand: cost %.2f (want %.2f), availability %v (want 1)", base.Cost, wantBase, base.Availability())
	}
	uniform := func(price float64) map[string]float64 {
		m := map[string]float64{}
		for _, z := range tr.ZoneNames() {
			m[z] = price
		}
		return m
	}
	low := uniform(onDemandPrice * paperSpotLow / paperOnDemand)
	high := uniform(onDemandPrice * paperSpotHigh / paperOnDemand)
	baseLow, baseHigh := base.CostAt(low, onDemandPrice), base.CostAt(high, onDemandPrice)

	var b strings.Builder
	fmt.Fprintf(&b, "\n%s: %d zones, %.1f days (%.1f scored), pool of %d, cold start %v unless said, notice %v, step %v\n\n",
		name, len(tr.Zones), tr.Duration().Hours()/24, base.Scored.Hours()/24, benchWant, benchColdStart, spotsim.DefaultNotice, DefaultStep)
	fmt.Fprintf(&b, "| policy | ready >= 4 (engine) | dips | longest dip | ready >= 4, drained at notice | spot h | on-demand h | cost vs all on-demand (catalog) | (paper, cheap zone) | (paper, dear zone) | goal met at |\n")
	fmt.Fprintf(&b, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	var met []string
	line := func(label string, r Result) {
		catalog := r.Cost / base.Cost
		pl, ph := r.CostAt(low, onDemandPrice)/baseLow, r.CostAt(high, onDemandPrice)/baseHigh
		// The goal at each price table, with the engine's semantics (a
		// noticed instance serves until its replacement is ready or it
		// ends) and, after the slash, with a noticed instance drained at
		// once (the older rule).
		goal := func(avail float64) string {
			var ok []string
			for _, c := range []struct {
				name string
				cost float64
			}{{"catalog", catalog}, {"cheap", pl}, {"dear", ph}} {
				if avail >= goalAvailable && 1-c.cost >= goalSavings {
					ok = append(ok, c.name)
				}
			}
			if len(ok) == 0 {
				return "no"
			}
			return strings.Join(ok, "+")
		}
		g := goal(r.ServingAvailability()) + " / " + goal(r.Availability())
		if g != "no / no" {
			met = append(met, fmt.Sprintf("%s (%s)", label, g))
		}
		standby := ""
		if strings.Count(label, " | ") == 2 { // a standby row
			standby = fmt.Sprintf(" %.0f | %d |", r.StandbyHours, r.Starts)
		}
		fmt.Fprintf(&b, "| %s | %.3f %% | %d | %s | %.3f %% | %.0f | %.0f |%s %.1f %% (saves %.1f %%) | %.1f %% | %.1f %% | %s |\n",
			label, 100*r.ServingAvailability(), r.ServingDips, r.LongestServingDip.Round(time.Second), 100*r.Availability(), r.MarketHours(provider.MarketSpot),
			r.MarketHours(provider.MarketOnDemand), standby, 100*catalog, 100*(1-catalog), 100*pl, 100*ph, g)
	}
	for _, r := range policyRows() {
		var group []outcome
		for _, o := range jobs {
			if o.row.key() == r.key() {
				group = append(group, o)
			}
		}
		if !r.oneZone {
			line(r.label, group[0].res)
			continue
		}
		sort.Slice(group, func(i, j int) bool { return group[i].res.ServingAvailability() > group[j].res.ServingAvailability() })
		line(fmt.Sprintf("%s (best: %s)", r.label, group[0].zone), group[0].res)
		line(fmt.Sprintf("%s (worst: %s)", r.label, group[len(group)-1].zone), group[len(group)-1].res)
	}
	fmt.Fprintf(&b, "\n%s, warm standby (stopped on-demand at %.4g $/h each; a start is ready after the warm start; standby fill launches are on-demand cold starts):\n\n", name, DefaultStandbyPrice)
	fmt.Fprintf(&b, "| policy | standby | warm start | ready >= 4 (engine) | dips | longest dip | ready >= 4, drained at notice | spot h | on-demand h | standby h | starts | cost vs all on-demand (catalog) | (paper, cheap zone) | (paper, dear zone) | goal met at |\n")
	fmt.Fprintf(&b, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range standbyRows() {
		for _, o := range jobs {
			if o.row.key() == r.key() {
				line(fmt.Sprintf("%s | %d | %v", r.label, r.policy.Standby, r.warmStart), o.res)
			}
		}
	}
	if len(met) == 0 {
		fmt.Fprintf(&b, "\nGoal (>= %.0f %% cheaper than all on-demand with ready >= 4 at least %.1f %% of the time): not met by any policy, at any price table.\n", 100*goalSavings, 100*goalAvailable)
	} else {
		fmt.Fprintf(&b, "\nGoal (>= %.0f %% cheaper than all on-demand with ready >= 4 at least %.1f %% of the time), price tables where met (engine / drained at notice): %s.\n", 100*goalSavings, 100*goalAvailable, strings.Join(met, "; "))
	}
	fmt.Fprintf(&b, "(%d runs in %v)\n", len(jobs), time.Since(start).Round(100*time.Millisecond))
	t.Log(b.String())

	// Sanity: more hedging never makes the pool less available.
	avail := map[string]float64{}
	for _, o := range jobs {
		if o.zone == "" && o.row.policy.Standby == 0 {
			avail[o.row.label] = o.res.ServingAvailability()
		}
	}
	for _, pair := range [][2]string{
		{"spot only, all zones", "spot + fallback"},
		{"spot + fallback", "spot + fallback + overprovision 2"},
		{"spot only, all zones", "spot only, all zones, overprovision 2"},
		{"spot + fallback + overprovision 2, max 2 per zone", "spot + fallback + overprovision 2, max 2 per zone, zone-loss cover"},
		{"spot + fallback + overprovision 2, cover preempted zones (1 h)", "spot + fallback + overprovision 2, cover preempted zones (12 h)"},
		{"spot + fallback + overprovision 2, cover preempted zones (3 h), max 1 per preempted zone, cheap first", "spot + fallback + overprovision 2, cover preempted zones (adaptive 2 h..32 h), max 1 per preempted zone, cheap first"},
	} {
		if avail[pair[1]] < avail[pair[0]] {
			t.Errorf("%s: availability %.5f below %s: %.5f", pair[1], avail[pair[1]], pair[0], avail[pair[0]])
		}
	}
	// Warm standby: a shorter warm start, or a larger standby, never
	// makes the pool less available; with a warm start within the notice
	// a standby of N covers every loss of eager fallback.
	byKey := map[string]Result{}
	for _, o := range jobs {
		byKey[o.row.key()] = o.res
	}
	for _, r := range standbyRows() {
		for _, w := range []time.Duration{time.Minute, 90 * time.Second, 2 * time.Minute} {
			if w >= r.warmStart {
				break
			}
			shorter := r
			shorter.warmStart = w
			res, ok := byKey[shorter.key()]
			if !ok {
				continue
			}
			if a, b := res.ServingAvailability(), byKey[r.key()].ServingAvailability(); a < b {
				t.Errorf("%s, standby %d: warm start %v gives %.5f, below %.5f at %v", r.label, r.policy.Standby, w, a, b, r.warmStart)
			}
		}
		if r.policy.Standby == 2 {
			more := r
			more.policy.Standby = 4
			if res, ok := byKey[more.key()]; ok && res.ServingAvailability() < byKey[r.key()].ServingAvailability() {
				t.Errorf("%s, warm start %v: standby 4 gives %.5f, below standby 2: %.5f", r.label, r.warmStart, res.ServingAvailability(), byKey[r.key()].ServingAvailability())
			}
		}
	}
	full := policyRow{label: "spot + fallback, eager", policy: placement.Policy{SpotFallback: true, EagerFallback: true, Standby: benchWant}, warmStart: spotsim.DefaultNotice}
	if res := byKey[full.key()]; res.ServingAvailability() != 1 || res.Starts == 0 || res.StandbyHours == 0 {
		t.Errorf("%s, standby %d, warm start %v: availability %.5f with %d starts and %.0f standby hours, want 1 (every loss covered within the notice)",
			full.label, benchWant, full.warmStart, res.ServingAvailability(), res.Starts, res.StandbyHours)
	}
}
