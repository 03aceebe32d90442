package spotbench

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider/spotsim"
)

// TestSpotDips replays the traces with the dip log on and prints, per
// policy, what the remaining dips of the serving count follow: how many
// instances were lost at once, in how many zones and regions, how many
// spares were ready, and whether the zone had lost an instance in the hour
// before. It checks that the log accounts for every dip and every minute
// short.
func TestSpotDips(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the spot traces: not with -short")
	}
	if raceEnabled {
		t.Skip("replays the spot traces, ten times slower under -race: run without -race")
	}
	for _, name := range []string{"aws1", "aws3"} {
		t.Run(name, func(t *testing.T) {
			dir := traceDir(name)
			if _, err := os.Stat(dir); err != nil {
				t.Skipf("spot traces not found (%v): they live in ../shared/data/spot-traces/; set TIDEGPU_SPOT_TRACES", err)
			}
			tr, err := spotsim.LoadTrace(dir, name == "aws3")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range dipRows() {
				res, err := Run(Config{Trace: tr, Want: benchWant, Policy: r.policy, ColdStart: benchColdStart, PreemptedTTL: r.preemptedTTL, LogDips: true})
				if err != nil {
					t.Fatal(err)
				}
				var short time.Duration
				for _, d := range res.DipLog {
					short += d.Length
				}
				if len(res.DipLog) != res.ServingDips || short != res.Scored-res.MetServing {
					t.Fatalf("%s: log has %d dips, %v short; the run counted %d dips, %v short",
						r.label, len(res.DipLog), short, res.ServingDips, res.Scored-res.MetServing)
				}
				t.Logf("\n%s, %s: %.3f %% serving, %d dips, %v short\n%s", name, r.label, 100*res.ServingAvailability(),
					res.ServingDips, short, dipSummary(res.DipLog))
			}
		})
	}
}

type dipRow struct {
	label        string
	policy       placement.Policy
	preemptedTTL time.Duration
}

func dipRows() []dipRow {
	op2 := placement.Policy{SpotFallback: true, Overprovision: 2}
	return []dipRow{
		{"spot + fallback", placement.Policy{SpotFallback: true}, 0},
		{"spot + fallback + overprovision 2", op2, 0},
		{"spot + fallback + overprovision 2, max 2 per zone", capped(op2, 2), 0},
		{"spot + fallback + overprovision 2, max 2 per zone, zone-loss cover", cover(capped(op2, 2), placement.DomainZone), 0},
		{"spot + fallback + overprovision 2, max 2 per zone, regions first, zone-loss cover", regions(cover(capped(op2, 2), placement.DomainZone)), 0},
		{"spot + fallback + overprovision 2, cover preempted zones (3 h)", preempted(cover(op2, placement.DomainZone)), 3 * time.Hour},
	}
}

// dipSummary groups dips by what they follow and sums their time.
func dipSummary(dips []Dip) string {
	type agg struct {
		n     int
		total time.Duration
	}
	groups := map[string]*agg{}
	add := func(k string, d Dip) {
		g := groups[k]
		if g == nil {
			g = &agg{}
			groups[k] = g
		}
		g.n++
		g.total += d.Length
	}
	for _, d := range dips {
		lost, regions := 0, map[string]int{}
		for z, n := range d.Lost {
			lost += n
			regions[market.RegionOf(z)]++
		}
		sameRegion := false
		for _, n := range regions {
			sameRegion = sameRegion || n > 1
		}
		spares := d.ServingBefore - benchWant
		var k string
		switch {
		case lost == 0:
			k = fmt.Sprintf("no notice before it (on-demand starting: %v)", d.OnDemandStarting > 0)
		default:
			k = fmt.Sprintf("lost %d in %d zone(s) of %d region(s)%s, %d spare(s) ready before", lost, len(d.Lost), len(regions),
				map[bool]string{true: " (2+ zones of one region)", false: ""}[sameRegion], max(0, spares))
		}
		add(k, d)
		if len(d.Repeat) > 0 {
			add("  of those: a lost zone had lost an instance in the hour before", d)
		}
		if lost > 0 && lost <= max(0, spares) {
			add("  of those: no more lost than spares (a spare was not where it was needed)", d)
		}
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return groups[keys[i]].total > groups[keys[j]].total })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %4d dips, %8v: %s\n", groups[k].n, groups[k].total, k)
	}
	return b.String()
}
