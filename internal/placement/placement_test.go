package placement

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/provider"
)

const itype = "p3.2xlarge"

var t0 = time.Date(2024, 5, 7, 0, 0, 0, 0, time.UTC)

// offers returns spot offerings for the zones (with the given prices) and an
// on-demand offering at 3.06 in each.
func offers(spot map[string]float64) []provider.Offering {
	var out []provider.Offering
	zones := make([]string, 0, len(spot))
	for z := range spot {
		zones = append(zones, z)
	}
	slices.Sort(zones)
	for _, z := range zones {
		out = append(out,
			provider.Offering{InstanceType: itype, Zone: z, Market: provider.MarketSpot, PricePerHour: spot[z], Currency: "USD", PriceSource: provider.PriceCatalog, Available: true},
			provider.Offering{InstanceType: itype, Zone: z, Market: provider.MarketOnDemand, PricePerHour: 3.06, Currency: "USD", PriceSource: provider.PriceCatalog, Available: true})
	}
	return out
}

var threeZones = map[string]float64{"a": 1.0, "b": 0.3, "c": 0.5}

func spot(id, zone string, ready bool) Instance {
	return Instance{ID: id, Zone: zone, InstanceType: itype, Market: provider.MarketSpot, Ready: ready, LaunchedAt: t0}
}

func od(id, zone string, ready bool) Instance {
	return Instance{ID: id, Zone: zone, InstanceType: itype, Market: provider.MarketOnDemand, Ready: ready, LaunchedAt: t0}
}

func leaving(in Instance) Instance { in.Leaving = true; return in }

func young(in Instance, d time.Duration) Instance { in.LaunchedAt = t0.Add(d); return in }

// launches renders launches as "market@zone" for comparison.
func launches(d Decision) []string {
	out := []string{}
	for _, l := range d.Launches {
		out = append(out, string(l.Market)+"@"+l.Zone)
	}
	return out
}

func retires(d Decision) []string {
	out := []string{}
	for _, r := range d.Retires {
		out = append(out, r.ID)
	}
	return out
}

func TestDecide(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	blockA := NewCapacityMemory(clk, time.Minute)
	blockA.Record(Key{"a", itype, provider.MarketSpot}, "insufficient capacity")
	blockAll := NewCapacityMemory(clk, time.Minute)
	for _, z := range []string{"a", "b", "c"} {
		blockAll.Record(Key{z, itype, provider.MarketSpot}, "preempted")
	}
	unavailable := offers(threeZones)
	for i := range unavailable {
		if unavailable[i].Market == provider.MarketSpot && unavailable[i].Zone != "c" {
			unavailable[i].Available = false
		}
	}
	unknownPrice := offers(map[string]float64{"a": 0, "b": 2.0})
	// Preempted but no longer blocked: the preempted hold outlasts the TTL.
	clk2 := testingclock.NewFakeClock(t0)
	heldA, heldB := NewCapacityMemory(clk2, time.Minute), NewCapacityMemory(clk2, time.Minute)
	heldA.RecordPreemption(Key{"a", itype, provider.MarketSpot})
	heldB.RecordPreemption(Key{"b", itype, provider.MarketSpot})
	clk2.Step(2 * time.Minute)
	ab := offers(map[string]float64{"a": 0.3, "b": 0.5})

	tests := []struct {
		name     string
		policy   Policy
		want     int
		insts    []Instance
		offers   []provider.Offering
		mem      *CapacityMemory
		launches []string
		retires  []string
		unplaced int
		spotT    int
		odT      int
	}{
		{
			name: "empty pool spreads spot over zones, cheapest first among equals",
			want: 4, offers: offers(threeZones),
			launches: []string{"spot@b", "spot@c", "spot@a", "spot@b"}, spotT: 4,
		},
		{
			name: "overprovision 2 holds two per zone", policy: Policy{Overprovision: 2},
			want: 4, offers: offers(threeZones),
			launches: []string{"spot@b", "spot@c", "spot@a", "spot@b", "spot@c", "spot@a"}, spotT: 6,
		},
		{
			name: "zones holding fewer of the pool's spot first", want: 4,
			insts:    []Instance{spot("1", "b", true), spot("2", "b", true), spot("3", "c", true)},
			offers:   offers(threeZones),
			launches: []string{"spot@a"}, spotT: 4,
		},
		{
			name: "on-demand base is part of N", policy: Policy{OnDemandBase: 1},
			want: 4, offers: offers(threeZones),
			launches: []string{"spot@b", "spot@c", "spot@a", "on-demand@a"}, spotT: 3, odT: 1,
		},
		{
			name: "base >= N runs all on-demand, spread over zones at equal price", policy: Policy{OnDemandBase: 9},
			want: 4, offers: offers(threeZones),
			launches: []string{"on-demand@a", "on-demand@b", "on-demand@c", "on-demand@a"}, spotT: 0, odT: 4,
		},
		{
			name: "maxPerZone caps each zone; the fallback covers the unplaced part of N", policy: Policy{SpotFallback: true, MaxPerZone: 1},
			want: 4, offers: offers(threeZones),
			launches: []string{"spot@b", "spot@c", "spot@a", "on-demand@a"}, unplaced: 1, spotT: 4, odT: 4,
		},
		{
			name: "among zones holding equally few, the region holding fewer wins over price", want: 2,
			insts:    []Instance{spot("1", "us-east-1a", true)},
			offers:   offers(map[string]float64{"us-east-1a": 0.3, "us-east-1b": 0.3, "us-west-2a": 1.0}),
			launches: []string{"spot@us-west-2a"}, spotT: 2,
		},
		{
			name: "SpreadRegions ranks the region before the zone", policy: Policy{SpreadRegions: true}, want: 4,
			insts:    []Instance{spot("1", "us-east-1a", true), spot("2", "us-east-1b", true), spot("3", "us-west-2a", true)},
			offers:   offers(map[string]float64{"us-east-1a": 0.3, "us-east-1b": 0.3, "us-east-1c": 0.3, "us-west-2a": 1.0}),
			launches: []string{"spot@us-west-2a"}, spotT: 4,
		},
		{
			name: "without SpreadRegions the zone holding fewer wins", want: 4,
			insts:    []Instance{spot("1", "us-east-1a", true), spot("2", "us-east-1b", true), spot("3", "us-west-2a", true)},
			offers:   offers(map[string]float64{"us-east-1a": 0.3, "us-east-1b": 0.3, "us-east-1c": 0.3, "us-west-2a": 1.0}),
			launches: []string{"spot@us-east-1c"}, spotT: 4,
		},
		{
			name: "zone-loss cover: all spot in one zone, on-demand covers N", policy: Policy{SpotFallback: true, CoverLoss: DomainZone},
			want: 2, insts: []Instance{spot("1", "b", true), spot("2", "b", true)}, offers: offers(threeZones),
			launches: []string{"on-demand@a", "on-demand@c"}, spotT: 2, odT: 2,
		},
		{
			name: "zone-loss cover: spot spread so that any zone may go, no cover", policy: Policy{SpotFallback: true, Overprovision: 1, CoverLoss: DomainZone},
			want: 2, insts: []Instance{spot("1", "a", true), spot("2", "b", true), spot("3", "c", true)}, offers: offers(threeZones),
			spotT: 3,
		},
		{
			name: "zone-loss cover retires its on-demand once spot outside the largest zone is ready", policy: Policy{SpotFallback: true, Overprovision: 1, CoverLoss: DomainZone},
			want: 2, insts: []Instance{spot("1", "a", true), spot("2", "b", true), spot("3", "c", true), od("9", "a", true)}, offers: offers(threeZones),
			retires: []string{"9"}, spotT: 3,
		},
		{
			name: "zone-loss cover, lazy: a starting spot instance counts", policy: Policy{SpotFallback: true, CoverLoss: DomainZone},
			want: 2, insts: []Instance{spot("1", "b", true), spot("2", "c", false)}, offers: offers(threeZones),
			launches: []string{"on-demand@a"}, spotT: 2, odT: 2,
		},
		{
			name: "zone-loss cover, eager: only ready spot counts", policy: Policy{SpotFallback: true, EagerFallback: true, CoverLoss: DomainZone},
			want: 2, insts: []Instance{spot("1", "b", true), spot("2", "c", false)}, offers: offers(threeZones),
			launches: []string{"on-demand@a", "on-demand@a"}, spotT: 2, odT: 2,
		},
		{
			name: "region-loss cover counts a region's zones together", policy: Policy{SpotFallback: true, Overprovision: 1, CoverLoss: DomainRegion},
			want: 2, insts: []Instance{spot("1", "us-east-1a", true), spot("2", "us-east-1b", true), spot("3", "us-west-2a", true)},
			offers:   offers(map[string]float64{"us-east-1a": 0.3, "us-east-1b": 0.3, "us-west-2a": 1.0}),
			launches: []string{"on-demand@us-east-1a"}, spotT: 3, odT: 1,
		},
		{
			name: "an offering in the capacity memory is skipped", want: 3,
			offers: offers(threeZones), mem: blockA,
			launches: []string{"spot@b", "spot@c", "spot@b"}, spotT: 3,
		},
		{
			name: "an offering the provider reports unavailable is skipped", want: 2,
			offers: unavailable, launches: []string{"spot@c", "spot@c"}, spotT: 2,
		},
		{
			name: "no spot anywhere, no fallback: unplaced", want: 4,
			offers: offers(threeZones), mem: blockAll,
			launches: []string{}, unplaced: 4, spotT: 4,
		},
		{
			name: "no spot anywhere, fallback: on-demand for all of N", policy: Policy{SpotFallback: true}, want: 4,
			offers: offers(threeZones), mem: blockAll,
			launches: []string{"on-demand@a", "on-demand@b", "on-demand@c", "on-demand@a"}, unplaced: 4, spotT: 4, odT: 4,
		},
		{
			name: "fallback covers only N, not the overprovision", policy: Policy{SpotFallback: true, Overprovision: 2}, want: 2,
			offers: offers(threeZones), mem: blockAll,
			launches: []string{"on-demand@a", "on-demand@b"}, unplaced: 4, spotT: 4, odT: 2,
		},
		{
			name: "lazy fallback: a starting spot replacement needs no on-demand", policy: Policy{SpotFallback: true}, want: 4,
			insts:    []Instance{spot("1", "a", true), spot("2", "b", true), spot("3", "c", true), spot("4", "b", false)},
			offers:   offers(threeZones),
			launches: []string{}, spotT: 4, odT: 1,
		},
		{
			name: "eager fallback: a starting spot replacement gets an on-demand stand-in", policy: Policy{SpotFallback: true, EagerFallback: true}, want: 4,
			insts:    []Instance{spot("1", "a", true), spot("2", "b", true), spot("3", "c", true), spot("4", "b", false)},
			offers:   offers(threeZones),
			launches: []string{"on-demand@a"}, spotT: 4, odT: 1,
		},
		{
			name: "spot back but not ready: on-demand stays", policy: Policy{SpotFallback: true}, want: 2,
			insts:    []Instance{od("o1", "a", true), od("o2", "b", true), spot("s1", "b", false), spot("s2", "c", false)},
			offers:   offers(threeZones),
			launches: []string{}, retires: []string{}, spotT: 2, odT: 2,
		},
		{
			name: "spot ready: on-demand stand-ins retire, without a dip", policy: Policy{SpotFallback: true}, want: 2,
			insts:    []Instance{od("o1", "a", true), od("o2", "b", true), spot("s1", "b", true), spot("s2", "c", false)},
			offers:   offers(threeZones),
			launches: []string{}, retires: []string{"o2"}, spotT: 2, odT: 1,
		},
		{
			name: "a not-ready on-demand retires before a ready one", policy: Policy{SpotFallback: true}, want: 4,
			insts: []Instance{od("o1", "a", true), od("o2", "a", true), od("o3", "a", false),
				spot("s1", "a", true), spot("s2", "b", true), spot("s3", "c", true), spot("s4", "c", false)},
			offers:   offers(threeZones),
			launches: []string{}, retires: []string{"o3", "o2"}, spotT: 4, odT: 1,
		},
		{
			name: "the youngest on-demand leaves first", policy: Policy{SpotFallback: true}, want: 1,
			insts:    []Instance{young(od("o1", "a", true), time.Minute), od("o2", "a", true), spot("s1", "c", true)},
			offers:   offers(threeZones),
			launches: []string{}, retires: []string{"o1", "o2"}, spotT: 1, odT: 0,
		},
		{
			name: "the on-demand base is never retired for spot", policy: Policy{SpotFallback: true, OnDemandBase: 1}, want: 3,
			insts:    []Instance{od("o1", "a", true), od("o2", "b", true), spot("s1", "b", true), spot("s2", "c", true)},
			offers:   offers(threeZones),
			launches: []string{}, retires: []string{"o2"}, spotT: 2, odT: 1,
		},
		{
			name: "a leaving instance counts for nothing and is not retired", want: 2,
			insts:  []Instance{leaving(spot("1", "b", true)), spot("2", "c", true)},
			offers: offers(threeZones), mem: NewCapacityMemory(clk, time.Minute),
			launches: []string{"spot@b"}, spotT: 2,
		},
		{
			name: "a zone that just lost an instance is skipped when remembered", want: 2,
			insts:  []Instance{leaving(spot("1", "b", true)), spot("2", "c", true)},
			offers: offers(threeZones),
			mem: func() *CapacityMemory {
				m := NewCapacityMemory(clk, time.Minute)
				m.Record(Key{"b", itype, provider.MarketSpot}, "preempted")
				return m
			}(),
			launches: []string{"spot@a"}, spotT: 2,
		},
		{
			name: "a recently preempted zone comes after the others, even holding fewer", want: 4,
			insts:  []Instance{spot("1", "a", true), spot("2", "c", true)},
			offers: offers(threeZones),
			mem: func() *CapacityMemory {
				own := testingclock.NewFakeClock(t0)
				m := NewCapacityMemory(own, time.Minute)
				m.RecordPreemption(Key{"b", itype, provider.MarketSpot})
				own.Step(time.Minute) // b usable again, still preempted
				return m
			}(),
			launches: []string{"spot@c", "spot@a"}, spotT: 4,
		},
		{
			name: "a preempted zone is used when it is the only one left", want: 2,
			offers: offers(map[string]float64{"b": 0.3}),
			mem: func() *CapacityMemory {
				own := testingclock.NewFakeClock(t0)
				m := NewCapacityMemory(own, time.Minute)
				m.RecordPreemption(Key{"b", itype, provider.MarketSpot})
				own.Step(time.Minute)
				return m
			}(),
			launches: []string{"spot@b", "spot@b"}, spotT: 2,
		},
		{
			name: "scale down spot: not ready first, then the zone holding most, then dearest", want: 2,
			insts: []Instance{spot("a1", "a", true), spot("b1", "b", true), spot("b2", "b", true),
				spot("c1", "c", true), spot("c2", "c", false)},
			offers:   offers(threeZones),
			launches: []string{}, retires: []string{"c2", "b2", "a1"}, spotT: 2,
		},
		{
			name: "never below N ready", policy: Policy{SpotFallback: true}, want: 3,
			insts:    []Instance{od("o1", "a", true), od("o2", "a", true), spot("s1", "b", true), spot("s2", "c", true), spot("s3", "c", false)},
			offers:   offers(threeZones),
			launches: []string{}, retires: []string{"o2"}, spotT: 3, odT: 1,
		},
		{
			name: "N 0 retires everything", policy: Policy{Overprovision: 1, SpotFallback: true}, want: 0,
			insts:    []Instance{od("o1", "a", true), spot("s1", "b", true)},
			offers:   offers(threeZones),
			launches: []string{}, retires: []string{"o1", "s1"}, spotT: 0, odT: 0,
		},
		{
			name: "zones limit placement", policy: Policy{Zones: []string{"a"}}, want: 2,
			offers: offers(threeZones), launches: []string{"spot@a", "spot@a"}, spotT: 2,
		},
		{
			name: "an unknown price is the dearest", want: 1,
			offers: unknownPrice, launches: []string{"spot@b"}, spotT: 1,
		},
		{
			name: "a preempted zone takes up to maxPerZone without maxPerPreemptedZone", policy: Policy{SpotFallback: true, MaxPerZone: 2},
			want: 4, offers: ab, mem: heldA,
			launches: []string{"spot@b", "spot@b", "spot@a", "spot@a"}, spotT: 4, odT: 4,
		},
		{
			name: "cheap first fills the cheapest zone up to the cap", policy: Policy{CheapFirst: true, MaxPerZone: 2},
			want: 4, offers: offers(threeZones),
			launches: []string{"spot@b", "spot@b", "spot@c", "spot@c"}, spotT: 4,
		},
		{
			name: "cheap first without a cap fills the cheapest zone", policy: Policy{CheapFirst: true},
			want: 3, offers: offers(threeZones),
			launches: []string{"spot@b", "spot@b", "spot@b"}, spotT: 3,
		},
		{
			name: "cheap first still places preempted zones last", policy: Policy{CheapFirst: true, MaxPerZone: 1},
			want: 2, offers: ab, mem: heldA,
			launches: []string{"spot@b", "spot@a"}, spotT: 2,
		},
		{
			name: "no offerings at all", policy: Policy{SpotFallback: true}, want: 1,
			launches: []string{}, unplaced: 1, spotT: 1, odT: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.policy.Validate(); err != nil {
				t.Fatal(err)
			}
			d := tc.policy.Decide(Input{Want: tc.want, Instances: tc.insts, Offerings: tc.offers, Memory: tc.mem})
			if got := launches(d); !slices.Equal(got, tc.launches) {
				t.Errorf("launches = %v, want %v (notes %q)", got, tc.launches, d.Notes)
			}
			wantRet := tc.retires
			if wantRet == nil {
				wantRet = []string{}
			}
			if got := retires(d); !slices.Equal(got, wantRet) {
				t.Errorf("retires = %v, want %v", got, wantRet)
			}
			if d.Unplaced != tc.unplaced {
				t.Errorf("unplaced = %d, want %d", d.Unplaced, tc.unplaced)
			}
			if d.SpotTarget != tc.spotT || d.OnDemandTarget != tc.odT {
				t.Errorf("targets spot %d on-demand %d, want %d %d", d.SpotTarget, d.OnDemandTarget, tc.spotT, tc.odT)
			}
			for _, l := range d.Launches {
				if l.Reason == "" || l.InstanceType != itype {
					t.Errorf("launch %+v: want a reason and the instance type", l)
				}
			}
			for _, r := range d.Retires {
				if r.Reason == "" {
					t.Errorf("retire %+v: want a reason", r)
				}
			}
		})
	}
}

// TestDecideNoDip replays a fallback and return to spot step by step: the
// pool never has fewer than N ready once it first had N.
func TestDecideNoDip(t *testing.T) {
	const n = 3
	p := Policy{SpotFallback: true}
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
		for _, r := range d.Retires {
			insts = slices.DeleteFunc(insts, func(x Instance) bool { return x.ID == r.ID })
		}
	}
	readyAll := func() {
		for i := range insts {
			insts[i].Ready = true
		}
	}
	countReady := func() int {
		r := 0
		for _, x := range insts {
			if x.Ready && !x.Leaving {
				r++
			}
		}
		return r
	}
	apply(p.Decide(Input{Want: n, Offerings: offs, Memory: mem}))
	readyAll()
	if countReady() != n {
		t.Fatalf("ready %d after start, want %d", countReady(), n)
	}
	// Every spot zone loses capacity: notices, and launches refused.
	for i := range insts {
		insts[i].Leaving = true
		mem.Record(Key{insts[i].Zone, itype, provider.MarketSpot}, "preempted")
	}
	apply(p.Decide(Input{Want: n, Instances: insts, Offerings: offs, Memory: mem}))
	if got := launches(p.Decide(Input{Want: n, Instances: insts, Offerings: offs, Memory: mem})); len(got) != 0 {
		t.Fatalf("second decision launched again: %v", got)
	}
	insts = slices.DeleteFunc(insts, func(x Instance) bool { return x.Leaving })
	readyAll()
	// Spot comes back: spot launches start while on-demand serves.
	clk.Step(2 * time.Minute)
	for round := 0; round < 4; round++ {
		before := countReady()
		apply(p.Decide(Input{Want: n, Instances: insts, Offerings: offs, Memory: mem}))
		if got := countReady(); got < n {
			t.Fatalf("round %d: ready %d < %d after the decision (was %d)", round, got, n, before)
		}
		// One more instance becomes ready per round.
		for i := range insts {
			if !insts[i].Ready {
				insts[i].Ready = true
				break
			}
		}
	}
	for _, x := range insts {
		if x.Market == provider.MarketOnDemand {
			t.Errorf("on-demand %s still there once spot is back", x.ID)
		}
	}
	if len(insts) != n {
		t.Errorf("%d instances at the end, want %d", len(insts), n)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want string
	}{
		{"zero", Policy{}, ""},
		{"full", Policy{Overprovision: 2, OnDemandBase: 1, SpotFallback: true, EagerFallback: true, Zones: []string{"a"}}, ""},
		{"negative overprovision", Policy{Overprovision: -1}, "overprovision -1"},
		{"negative base", Policy{OnDemandBase: -2}, "onDemandBase -2"},
		{"eager without fallback", Policy{EagerFallback: true}, "eagerFallback needs spotFallback"},
		{"empty zone", Policy{Zones: []string{""}}, "empty zone name"},
		{"negative maxPerZone", Policy{MaxPerZone: -1}, "maxPerZone -1"},
		{"negative standby", Policy{Standby: -1}, "standby -1"},
		{"standby", Policy{Standby: 4, SpotFallback: true}, ""},
		{"unknown cover domain", Policy{CoverLoss: "Rack"}, `coverLoss "Rack"`},
		{"cover domains", Policy{CoverLoss: DomainRegion, MaxPerZone: 2}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidPolicy mentioning %q", err, tc.want)
			}
		})
	}
}

func TestCapacityMemory(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	m := NewCapacityMemory(clk, 3*time.Minute)
	a := Key{"a", itype, provider.MarketSpot}
	b := Key{"b", itype, provider.MarketSpot}

	tests := []struct {
		name    string
		do      func()
		blocked map[Key]bool
	}{
		{"empty", func() {}, map[Key]bool{a: false, b: false}},
		{"a refused", func() {
			if !m.Observe(a, fmt.Errorf("launching: %w", &provider.InsufficientCapacityError{Zone: "a", Market: provider.MarketSpot})) {
				t.Error("Observe(ICE) = false")
			}
		}, map[Key]bool{a: true, b: false}},
		{"throttling says nothing about capacity", func() {
			if m.Observe(b, &provider.ThrottledError{Err: errors.New("RequestLimitExceeded")}) {
				t.Error("Observe(throttled) = true")
			}
			if m.Observe(b, nil) {
				t.Error("Observe(nil) = true")
			}
		}, map[Key]bool{a: true, b: false}},
		{"just before the TTL", func() { clk.Step(3*time.Minute - time.Nanosecond) }, map[Key]bool{a: true}},
		{"at the TTL", func() { clk.Step(time.Nanosecond) }, map[Key]bool{a: false}},
		{"recorded again, then forgotten", func() { m.Record(b, "preempted"); m.Forget(b) }, map[Key]bool{b: false}},
		{"a second record extends", func() {
			m.Record(a, "x")
			clk.Step(2 * time.Minute)
			m.Record(a, "y")
			clk.Step(2 * time.Minute)
		}, map[Key]bool{a: true}},
	}
	for _, tc := range tests {
		tc.do()
		for k, want := range tc.blocked {
			if _, got := m.Blocked(k); got != want {
				t.Errorf("%s: Blocked(%v) = %v, want %v", tc.name, k, got, want)
			}
		}
	}
	l := m.List()
	if len(l) != 1 || l[0].Key != a || l[0].Why != "y" || !l[0].Until.Equal(clk.Now().Add(time.Minute)) {
		t.Errorf("List = %+v", l)
	}

	// Preemptions: blocked for the TTL, preempted for DefaultPreemptedTTL.
	m.RecordPreemption(b)
	for _, step := range []struct {
		after              time.Duration
		blocked, preempted bool
	}{
		{0, true, true},
		{3 * time.Minute, false, true},
		{DefaultPreemptedTTL - 3*time.Minute, false, false},
	} {
		clk.Step(step.after)
		if _, got := m.Blocked(b); got != step.blocked {
			t.Errorf("after +%v: Blocked = %v, want %v", step.after, got, step.blocked)
		}
		if got := m.Preempted(b); got != step.preempted {
			t.Errorf("after +%v: Preempted = %v, want %v", step.after, got, step.preempted)
		}
	}
	var nilMem *CapacityMemory
	nilMem.Record(a, "x")
	if _, b := nilMem.Blocked(a); b || nilMem.List() != nil || nilMem.TTL() != 0 {
		t.Error("a nil memory remembers")
	}
	if NewCapacityMemory(nil, 0).TTL() != DefaultCapacityTTL {
		t.Error("default TTL")
	}
}

// Accrued reads as the memory will once the exposure is accrued, and
// leaves the memory as it was.
func TestAccrued(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	a := Key{"a", itype, provider.MarketSpot}
	b := Key{"b", itype, provider.MarketSpot}
	build := func() *CapacityMemory {
		m := NewCapacityMemory(clk, 0)
		clk.SetTime(t0)
		m.Accrue(map[Key]int{a: 1})
		clk.Step(3 * time.Hour)
		m.RecordPreemption(a)
		return m
	}
	m, applied := build(), build()
	before := m.LossRates(3, 1)
	view := m.Accrued(map[Key]int{a: 2, b: 1})
	applied.Accrue(map[Key]int{a: 2, b: 1})
	if got, want := view.LossRates(3, 1), applied.LossRates(3, 1); !slices.Equal(got, want) {
		t.Errorf("Accrued view: loss rates %v, want %v as after Accrue", got, want)
	}
	if got := m.LossRates(3, 1); !slices.Equal(got, before) {
		t.Errorf("Accrued changed the memory: loss rates %v, were %v", got, before)
	}
	if slices.Equal(view.LossRates(3, 1), before) {
		t.Error("the view does not count the exposure")
	}
	if !view.Preempted(a) || view.Preempted(b) {
		t.Error("the view does not read the memory's preemptions")
	}
	var none *CapacityMemory
	if !slices.Equal(none.Accrued(map[Key]int{a: 1}).LossRates(3, 1), none.LossRates(3, 1)) {
		t.Error("a nil memory's view reads otherwise than the nil memory")
	}
}

// A nil memory remembers nothing and does not panic: an unplaced pool has
// none and still sees reclaim notices and starts.
func TestNilCapacityMemory(t *testing.T) {
	var m *CapacityMemory
	m.ObserveNotice(time.Minute)
	m.ObserveStart(time.Minute, true)
	m.Accrue(map[Key]int{{"a", itype, provider.MarketSpot}: 1})
	m.RecordPreemption(Key{"a", itype, provider.MarketSpot})
	if m.Timing() != (Timing{}) || m.List() != nil {
		t.Error("a nil memory remembered something")
	}
}
