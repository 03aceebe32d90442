package placement

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/provider"
)

func stopped(in Instance) Instance { in.Stopped, in.Ready = true, false; return in }

// onDemandOnly keeps the on-demand offerings (no spot can be placed).
func onDemandOnly(offs []provider.Offering) []provider.Offering {
	return slices.DeleteFunc(slices.Clone(offs), func(o provider.Offering) bool { return o.Market != provider.MarketOnDemand })
}

// withOnDemandPrice sets the on-demand price of one zone.
func withOnDemandPrice(offs []provider.Offering, zone string, p float64) []provider.Offering {
	out := slices.Clone(offs)
	for i := range out {
		if out[i].Zone == zone && out[i].Market == provider.MarketOnDemand {
			out[i].PricePerHour = p
		}
	}
	return out
}

func starts(d Decision) []string {
	out := []string{}
	for _, s := range d.Starts {
		out = append(out, s.ID)
	}
	return out
}

// retiresStop renders retirements as "ID", or "ID:stop" for a stop.
func retiresStop(d Decision) []string {
	out := []string{}
	for _, r := range d.Retires {
		if r.Stop {
			out = append(out, r.ID+":stop")
		} else {
			out = append(out, r.ID)
		}
	}
	return out
}

// TestDecideStandby covers Policy.Standby: starts in place of on-demand
// launches, stops in place of terminations, the standby fill and the
// retirement of stopped instances beyond the standby.
func TestDecideStandby(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	blockODa := NewCapacityMemory(clk, time.Minute)
	blockODa.Record(Key{"a", itype, provider.MarketOnDemand}, "insufficient capacity")
	blockODb := NewCapacityMemory(clk, time.Minute)
	blockODb.Record(Key{"b", itype, provider.MarketOnDemand}, "insufficient capacity")
	fb := Policy{SpotFallback: true}
	eagerSB := func(k int) Policy { return Policy{SpotFallback: true, EagerFallback: true, Standby: k} }
	withSB := func(p Policy, k int) Policy { p.Standby = k; return p }

	tests := []struct {
		name     string
		policy   Policy
		want     int
		insts    []Instance
		offers   []provider.Offering
		mem      *CapacityMemory
		launches []string // market@zone
		starts   []string
		retires  []string // ID or ID:stop
		odT      int
		note     string // a note must mention it
		reason   string // some launch reason must mention it
	}{
		{
			name: "standby off: a stopped instance counts for nothing and is terminated", policy: Policy{OnDemandBase: 1},
			want: 1, insts: []Instance{stopped(od("s1", "a", false))}, offers: offers(threeZones),
			launches: []string{"on-demand@a"}, retires: []string{"s1"}, odT: 1,
		},
		{
			name: "a start replaces an on-demand launch, then the standby is filled again", policy: Policy{OnDemandBase: 1, Standby: 1},
			want: 1, insts: []Instance{stopped(od("s1", "c", false))}, offers: offers(threeZones),
			launches: []string{"on-demand@a"}, starts: []string{"s1"}, odT: 1, reason: "warm standby 1 of 1",
		},
		{
			name: "the fallback starts what standby holds and launches the rest", policy: eagerSB(1),
			want: 3, insts: []Instance{spot("1", "b", true), stopped(od("s1", "c", false))}, offers: onDemandOnly(offers(threeZones)),
			// One fallback start (s1), one fallback launch, one standby fill.
			launches: []string{"on-demand@a", "on-demand@a"}, starts: []string{"s1"}, odT: 2, reason: "on-demand fallback 2 of 2",
		},
		{
			name: "the cover starts standby too", policy: withSB(Policy{CoverLoss: DomainZone, EagerFallback: true, SpotFallback: true}, 2),
			want: 2, insts: []Instance{spot("1", "b", true), spot("2", "b", true), stopped(od("s1", "a", false)), stopped(od("s2", "c", false))}, offers: onDemandOnly(offers(threeZones)),
			// Losing zone b leaves 0 of 2: two cover starts, and two fill launches.
			starts: []string{"s1", "s2"}, launches: []string{"on-demand@a", "on-demand@c"}, odT: 2,
		},
		{
			name: "ready surplus on-demand is stopped while the standby is short, terminated beyond it", policy: withSB(fb, 1),
			want: 2, insts: []Instance{spot("1", "b", true), spot("2", "c", true), od("o1", "a", true), young(od("o2", "b", true), time.Minute)}, offers: offers(threeZones),
			retires: []string{"o2:stop", "o1"},
		},
		{
			name: "no stop without standby", policy: fb,
			want: 2, insts: []Instance{spot("1", "b", true), spot("2", "c", true), od("o1", "a", true)}, offers: offers(threeZones),
			retires: []string{"o1"},
		},
		{
			name: "a not-ready surplus on-demand is not stopped, and terminated once the standby is full", policy: withSB(fb, 1),
			want: 2, insts: []Instance{spot("1", "b", true), spot("2", "c", true), stopped(od("s1", "a", false)), od("o1", "a", false)}, offers: offers(threeZones),
			retires: []string{"o1"},
		},
		{
			name: "not-ready surplus is kept to fill the standby, and nothing more is launched", policy: withSB(fb, 2),
			want: 2, insts: []Instance{spot("1", "b", true), spot("2", "c", true), od("f1", "a", false), od("f2", "b", false)}, offers: offers(threeZones),
		},
		{
			name: "only what the standby lacks is kept: the youngest not-ready goes", policy: withSB(fb, 1),
			want: 2, insts: []Instance{spot("1", "b", true), spot("2", "c", true), od("f1", "a", false), young(od("f2", "b", false), time.Minute)}, offers: offers(threeZones),
			retires: []string{"f2"},
		},
		{
			name: "ready surplus fills the standby before not-ready surplus is kept", policy: withSB(fb, 2),
			want: 2, insts: []Instance{spot("1", "b", true), spot("2", "c", true), od("f1", "a", false), young(od("f2", "b", false), time.Minute), od("r1", "c", true)}, offers: offers(threeZones),
			retires: []string{"f2", "r1:stop"},
		},
		{
			name: "with N = 0 a ready on-demand is stopped, a not-ready one terminated, nothing launched", policy: Policy{Standby: 2},
			want: 0, insts: []Instance{od("f1", "a", false), od("r1", "b", true)}, offers: offers(threeZones),
			retires: []string{"f1", "r1:stop"},
		},
		{
			name: "the standby is filled by on-demand launches", policy: withSB(fb, 2),
			want: 2, insts: []Instance{spot("1", "b", true), spot("2", "c", true), stopped(od("s1", "a", false))}, offers: offers(threeZones),
			launches: []string{"on-demand@a"}, reason: "warm standby 2 of 2",
		},
		{
			name: "on-demand the pool needs now is not counted as standby fill", policy: withSB(fb, 1),
			want: 2, insts: []Instance{spot("1", "b", true), od("o1", "a", true)}, offers: onDemandOnly(offers(threeZones)),
			launches: []string{"on-demand@c"}, odT: 1,
		},
		{
			name: "stopped instances beyond the standby: one that cannot start goes first", policy: withSB(fb, 1), mem: blockODb,
			want: 1, insts: []Instance{spot("1", "c", true), stopped(od("s1", "a", false)), stopped(od("s2", "b", false))}, offers: offers(threeZones),
			retires: []string{"s2"}, note: "standby s2 in b not started",
		},
		{
			name: "stopped instances beyond the standby: then the dearest", policy: withSB(fb, 1),
			want: 1, insts: []Instance{spot("1", "c", true), stopped(od("s1", "a", false)), stopped(od("s2", "b", false))}, offers: withOnDemandPrice(offers(threeZones), "a", 4),
			retires: []string{"s1"},
		},
		{
			name: "a blocked standby is not started: launched instead", policy: Policy{OnDemandBase: 1, Standby: 1}, mem: blockODa,
			want: 1, insts: []Instance{stopped(od("s1", "a", false))}, offers: offers(threeZones),
			launches: []string{"on-demand@b"}, odT: 1, note: "standby s1 in a not started",
		},
		{
			name: "a standby outside the zones is not started", policy: Policy{OnDemandBase: 1, Standby: 1, Zones: []string{"b"}},
			want: 1, insts: []Instance{stopped(od("s1", "a", false))}, offers: offers(threeZones),
			launches: []string{"on-demand@b"}, odT: 1, note: "outside the policy's zones",
		},
		{
			name: "a stopped spot instance is no standby: terminated", policy: Policy{},
			want: 1, insts: []Instance{spot("1", "b", true), stopped(spot("x", "b", false))}, offers: offers(threeZones),
			retires: []string{"x"},
		},
		{
			name: "a leaving stopped instance counts for nothing and is left alone", policy: Policy{OnDemandBase: 1, Standby: 1},
			want: 1, insts: []Instance{leaving(stopped(od("s1", "a", false)))}, offers: offers(threeZones),
			launches: []string{"on-demand@a", "on-demand@b"}, odT: 1,
		},
		{
			name: "a stopped instance does not count as live on-demand", policy: Policy{OnDemandBase: 2, Standby: 2},
			want: 2, insts: []Instance{od("o1", "a", true), stopped(od("s1", "b", false)), stopped(od("s2", "c", false))}, offers: offers(threeZones),
			// s1 goes to b (fewer than a), the fill to c.
			starts: []string{"s1"}, launches: []string{"on-demand@c"}, odT: 2,
		},
		{
			name: "starts take the cheapest standby, then the zone holding fewest", policy: Policy{OnDemandBase: 1, Standby: 3},
			want: 2, insts: []Instance{spot("1", "a", true), stopped(od("s1", "c", false)), stopped(od("s2", "a", false)), stopped(od("s3", "b", false))},
			offers: withOnDemandPrice(offers(threeZones), "c", 4),
			starts: []string{"s3"}, launches: []string{"on-demand@a"}, odT: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.policy.Validate(); err != nil {
				t.Fatal(err)
			}
			d := tc.policy.Decide(Input{Want: tc.want, Instances: tc.insts, Offerings: tc.offers, Memory: tc.mem})
			norm := func(s []string) []string {
				if s == nil {
					return []string{}
				}
				return s
			}
			if got := launches(d); !slices.Equal(got, norm(tc.launches)) {
				t.Errorf("launches = %v, want %v (notes %q)", got, norm(tc.launches), d.Notes)
			}
			if got := starts(d); !slices.Equal(got, norm(tc.starts)) {
				t.Errorf("starts = %v, want %v", got, norm(tc.starts))
			}
			if got := retiresStop(d); !slices.Equal(got, norm(tc.retires)) {
				t.Errorf("retires = %v, want %v", got, norm(tc.retires))
			}
			if d.OnDemandTarget != tc.odT {
				t.Errorf("on-demand target %d, want %d", d.OnDemandTarget, tc.odT)
			}
			if tc.note != "" && !slices.ContainsFunc(d.Notes, func(n string) bool { return strings.Contains(n, tc.note) }) {
				t.Errorf("notes %q: want one mentioning %q", d.Notes, tc.note)
			}
			if tc.reason != "" && !slices.ContainsFunc(d.Launches, func(l Launch) bool { return strings.Contains(l.Reason, tc.reason) }) {
				t.Errorf("launches %+v: want a reason mentioning %q", d.Launches, tc.reason)
			}
			for _, s := range d.Starts {
				if !strings.Contains(s.Reason, "start standby") {
					t.Errorf("start %+v: want a reason", s)
				}
			}
			byID := map[string]Instance{}
			for _, x := range tc.insts {
				byID[x.ID] = x
			}
			for _, r := range d.Retires {
				if r.Reason == "" {
					t.Errorf("retire %+v: want a reason", r)
				}
				if x := byID[r.ID]; r.Stop && (!x.Ready || x.Market != provider.MarketOnDemand) {
					t.Errorf("stop of %+v: only ready on-demand instances are stopped", x)
				}
			}
		})
	}
}

// TestStandbyCycle plays a pool with a standby of 2 through a preemption:
// the standby is filled, stopped once ready, started at the notice (in
// place of an on-demand launch), refilled, and stopped again once spot is
// back; the pool never holds fewer than N ready once it had N, and the
// decisions settle.
func TestStandbyCycle(t *testing.T) {
	const n = 3
	p := Policy{SpotFallback: true, EagerFallback: true, Standby: 2}
	offs := offers(threeZones)
	clk := testingclock.NewFakeClock(t0)
	mem := NewCapacityMemory(clk, time.Minute)
	var insts []Instance
	next := 0
	apply := func(d Decision) {
		for _, l := range d.Launches {
			next++
			insts = append(insts, Instance{ID: fmt.Sprint(next), Zone: l.Zone, InstanceType: l.InstanceType, Market: l.Market, LaunchedAt: clk.Now()})
		}
		for _, s := range d.Starts {
			i := slices.IndexFunc(insts, func(x Instance) bool { return x.ID == s.ID })
			if i < 0 || !insts[i].Stopped {
				t.Fatalf("start of %s: not a stopped instance", s.ID)
			}
			insts[i].Stopped, insts[i].LaunchedAt = false, clk.Now()
		}
		for _, r := range d.Retires {
			i := slices.IndexFunc(insts, func(x Instance) bool { return x.ID == r.ID })
			if r.Stop {
				insts[i].Stopped, insts[i].Ready = true, false
				continue
			}
			insts = slices.Delete(insts, i, i+1)
		}
	}
	decide := func() Decision { return p.Decide(Input{Want: n, Instances: insts, Offerings: offs, Memory: mem}) }
	tally := func() (ready, spotReady, stoppedOD, liveOD int) {
		for _, x := range insts {
			switch {
			case x.Leaving:
			case x.Stopped:
				stoppedOD++
			default:
				if x.Ready {
					ready++
					if x.Market != provider.MarketOnDemand {
						spotReady++
					}
				}
				if x.Market == provider.MarketOnDemand {
					liveOD++
				}
			}
		}
		return
	}
	readyAll := func() {
		for i := range insts {
			if !insts[i].Stopped {
				insts[i].Ready = true
			}
		}
	}

	d := decide()
	// Eager: 3 spot, 3 on-demand stand-ins while they start, and 2
	// on-demand for the standby.
	if got := launches(d); !slices.Equal(got, []string{"spot@b", "spot@c", "spot@a", "on-demand@a", "on-demand@b", "on-demand@c", "on-demand@a", "on-demand@b"}) {
		t.Fatalf("first launches %v: want 3 spot, 3 on-demand stand-ins and 2 on-demand for the standby", got)
	}
	if !strings.Contains(d.Launches[7].Reason, "warm standby 2 of 2") {
		t.Errorf("last launch reason %q: want the standby", d.Launches[7].Reason)
	}
	apply(d)
	// While they start, nothing changes.
	if d := decide(); len(d.Launches)+len(d.Starts)+len(d.Retires) != 0 {
		t.Fatalf("while starting: %+v, want nothing", d)
	}
	readyAll()
	d = decide()
	if got := retiresStop(d); !slices.Equal(got, []string{"8:stop", "7:stop", "6", "5", "4"}) {
		t.Fatalf("once ready: retires %v, want two on-demand stopped and three terminated", got)
	}
	apply(d)
	if r, sr, so, lo := tally(); r != n || sr != n || so != 2 || lo != 0 {
		t.Fatalf("settled: ready %d spot ready %d stopped %d live on-demand %d, want %d %d 2 0", r, sr, so, lo, n, n)
	}
	if d := decide(); len(d.Launches)+len(d.Starts)+len(d.Retires) != 0 {
		t.Fatalf("settled: %+v, want nothing", d)
	}

	// A notice in zone a: its spot is leaving (it serves until it ends).
	i := slices.IndexFunc(insts, func(x Instance) bool { return x.Zone == "a" && x.Market == provider.MarketSpot })
	insts[i].Leaving = true
	mem.RecordPreemption(Key{"a", itype, provider.MarketSpot})
	clk.Step(time.Minute)
	d = decide()
	if len(d.Starts) != 1 || len(d.Launches) != 2 {
		t.Fatalf("at the notice: starts %v launches %v, want 1 start and 2 launches (spot replacement, standby fill)", starts(d), launches(d))
	}
	apply(d)
	// The warm start ends before the notice does: the started instance is
	// ready, then the noticed one ends.
	started := d.Starts[0].ID
	for i := range insts {
		if insts[i].ID == started {
			insts[i].Ready = true
		}
	}
	insts = slices.DeleteFunc(insts, func(x Instance) bool { return x.Leaving })
	if r, _, _, _ := tally(); r < n {
		t.Fatalf("after the notice ran out: ready %d < %d", r, n)
	}
	if d := decide(); len(d.Launches)+len(d.Starts)+len(d.Retires) != 0 {
		t.Fatalf("while the replacement and the fill start: %+v, want nothing", d)
	}
	// The spot replacement and the fill are ready: the surplus on-demand
	// goes back to standby (one stopped, one terminated).
	readyAll()
	for round := 0; round < 3; round++ {
		d = decide()
		apply(d)
		if r, _, _, _ := tally(); r < n {
			t.Fatalf("round %d: ready %d < %d", round, r, n)
		}
	}
	if r, sr, so, lo := tally(); r != n || sr != n || so != 2 || lo != 0 {
		t.Fatalf("at the end: ready %d spot ready %d stopped %d live on-demand %d, want %d %d 2 0", r, sr, so, lo, n, n)
	}
	if d := decide(); len(d.Launches)+len(d.Starts)+len(d.Retires) != 0 {
		t.Fatalf("at the end: %+v, want nothing", d)
	}
}
