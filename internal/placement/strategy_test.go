package placement

import (
	"math"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/provider"
)

var awsTiming = Timing{Notice: 2 * time.Minute, ColdStart: 5 * time.Minute, WarmStart: 2 * time.Minute}

func TestResolveFixedStrategies(t *testing.T) {
	env := Env{Want: 4, OnDemandBase: 1, Zones: []string{"a", "b"}, Standby: 2, Target: 0.999, Timing: awsTiming}
	cases := []struct {
		s    Strategy
		want Policy
	}{
		{OnDemand, Policy{OnDemandBase: 4, Zones: env.Zones, Standby: 2}},
		{LowestPrice, Policy{OnDemandBase: 1, SpotFallback: true, CheapFirst: true, Zones: env.Zones, Standby: 2}},
		{ZoneResilient, Policy{OnDemandBase: 1, SpotFallback: true, EagerFallback: true, EagerStartsOnly: true, SpreadRegions: true, CoverLoss: DomainZone,
			MaxPerZone: 2, Zones: env.Zones, Standby: 2}},
	}
	for _, c := range cases {
		got, why := c.s.Resolve(env, Input{})
		if got.OnDemandBase != c.want.OnDemandBase || got.SpotFallback != c.want.SpotFallback || got.EagerFallback != c.want.EagerFallback ||
			got.CheapFirst != c.want.CheapFirst || got.SpreadRegions != c.want.SpreadRegions || got.CoverLoss != c.want.CoverLoss ||
			got.MaxPerZone != c.want.MaxPerZone || got.Standby != c.want.Standby || len(got.Zones) != 2 || why == "" {
			t.Errorf("%s: %+v (%s), want %+v", c.s, got, why, c.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%s: invalid policy: %v", c.s, err)
		}
	}
}

// The Adaptive strategy keeps spares only when the expected time below N
// without them is above the budget: a standby whose warm start fits in the
// notice hides every loss; a 30 s notice does not, and then the pool keeps
// spare spot spread so that no zone's loss takes more than the spares.
func TestResolveAdaptive(t *testing.T) {
	four := []Instance{spot("s1", "a", true), spot("s2", "b", true), spot("s3", "c", true), spot("s4", "d", true)}
	standby4 := append(append([]Instance(nil), four...), stopped(od("o1", "a", false)), stopped(od("o2", "b", false)),
		stopped(od("o3", "c", false)), stopped(od("o4", "d", false)))
	fourZones := offers(map[string]float64{"a": 0.3, "b": 0.3, "c": 0.4, "d": 0.5})
	cases := []struct {
		name   string
		timing Timing
		insts  []Instance
		offers []provider.Offering
		target float64
		spares int
		cap    int
	}{
		{"warm start within the notice, standby full: no spares", awsTiming, standby4, fourZones, 0.999, 0, 0},
		// 4 + 1 spares at 1 per zone would need 5 zones: 2 spares, 2 per zone.
		{"no standby yet: a cold start exceeds the notice, spares cover a zone", awsTiming, four, fourZones, 0.999, 2, 2},
		{"30 s notice: the warm start exceeds it", Timing{Notice: 30 * time.Second, ColdStart: 5 * time.Minute, WarmStart: 2 * time.Minute}, standby4, fourZones, 0.999, 2, 2},
		{"five zones: one spare, one per zone", awsTiming, four, offers(map[string]float64{"a": 0.3, "b": 0.3, "c": 0.4, "d": 0.5, "e": 0.5}), 0.999, 1, 1},
		{"a low target tolerates the prior's risk", Timing{Notice: 30 * time.Second, ColdStart: 5 * time.Minute, WarmStart: 2 * time.Minute}, standby4, fourZones, 0.99, 0, 0},
		{"two zones of 2: 4 spares, 4 per zone, cover a zone's loss", awsTiming, []Instance{spot("s1", "a", true), spot("s2", "a", true), spot("s3", "b", true), spot("s4", "b", true)},
			offers(map[string]float64{"a": 0.3, "b": 0.3}), 0.999, 4, 4},
		{"one zone: no spare can cover its loss", awsTiming, four[:1], offers(map[string]float64{"a": 0.3}), 0.999, 0, 0},
	}
	for _, c := range cases {
		mem := NewCapacityMemory(testingclock.NewFakeClock(t0), 0)
		env := Env{Want: 4, Standby: 4, Target: c.target, Timing: c.timing}
		got, why := Adaptive.Resolve(env, Input{Want: 4, Instances: c.insts, Offerings: c.offers, Memory: mem})
		if got.Overprovision != c.spares || got.MaxPerZone != c.cap || !got.EagerFallback || !got.EagerStartsOnly || !got.SpotFallback {
			t.Errorf("%s: overprovision %d, max per zone %d (%s); want %d and %d, eager starts", c.name, got.Overprovision, got.MaxPerZone, why, c.spares, c.cap)
		}
		if !strings.Contains(why, "budget") {
			t.Errorf("%s: the reason does not say the budget: %q", c.name, why)
		}
	}
}

// LossRates learns the size of the pool's loss episodes: preemptions
// within the TTL of an episode's first are one episode, all offerings
// pooled; counts and hours fade with the half-life.
func TestLossRates(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	mem := NewCapacityMemory(clk, 3*time.Minute)
	mem.SetLearning(Learning{HalfLife: 24 * time.Hour})
	held := map[Key]int{{"a", itype, provider.MarketSpot}: 2, {"b", itype, provider.MarketSpot}: 2}
	prior := mem.LossRates(4, 4)
	if want := priorEpisodes / priorHours; math.Abs(prior[4]-want) > 1e-12 || prior[1] != 0 {
		t.Fatalf("prior %v, want %v at size 4 only", prior, want)
	}
	mem.Accrue(held)
	for range 10 { // 10 hours held, in steps of an hour
		clk.Step(time.Hour)
		mem.Accrue(held)
	}
	// One episode taking 3 (two zones within a minute), one taking 1.
	mem.RecordPreemption(Key{"a", itype, provider.MarketSpot})
	clk.Step(30 * time.Second)
	mem.RecordPreemption(Key{"a", itype, provider.MarketSpot})
	mem.RecordPreemption(Key{"b", itype, provider.MarketSpot})
	clk.Step(time.Hour)
	mem.RecordPreemption(Key{"b", itype, provider.MarketSpot})
	r := mem.LossRates(4, 4)
	if r[3] <= 0 || r[1] <= 0 || r[2] != 0 || math.Abs(r[1]-r[3]) > 0.1*r[3] {
		t.Errorf("rates %v: want one episode of 3 and one of 1, none of 2", r)
	}
	if r[3] > 1.0/10 || r[3] < 1.0/(10+priorHours+1) {
		t.Errorf("rate of size-3 episodes %v per hour: want about 1 per 10-16 hours held", r[3])
	}
	// Three half-lives later, the same counts weigh an eighth.
	clk.Step(72 * time.Hour)
	later := mem.LossRates(4, 4)
	if later[3] >= r[3] {
		t.Errorf("rates do not fade without exposure: %v then %v", r, later)
	}
	var nilMem *CapacityMemory
	if got := nilMem.LossRates(2, 2); got[2] != priorEpisodes/priorHours {
		t.Errorf("a nil memory's rates %v, want the prior", got)
	}
}

func TestTimingMeasured(t *testing.T) {
	mem := NewCapacityMemory(nil, 0)
	if got := mem.Timing(); got != (Timing{}) {
		t.Fatalf("nothing measured yet: %+v", got)
	}
	mem.ObserveNotice(30 * time.Second)
	mem.ObserveStart(4*time.Minute, false)
	mem.ObserveStart(6*time.Minute, false)
	mem.ObserveStart(time.Minute, true)
	got := DefaultTiming("aws").Merge(mem.Timing())
	if got.Notice != 30*time.Second || got.WarmStart != time.Minute {
		t.Errorf("measured notice and warm start not used: %+v", got)
	}
	if want := time.Duration(0.7*float64(4*time.Minute) + 0.3*float64(6*time.Minute)); got.ColdStart != want {
		t.Errorf("cold start %v, want the running mean %v", got.ColdStart, want)
	}
	for _, c := range []struct {
		provider string
		notice   time.Duration
	}{{"aws", 2 * time.Minute}, {"tencent", 2 * time.Minute}, {"gcp", 30 * time.Second}, {"azure", 30 * time.Second}, {"local", 0}} {
		if got := DefaultTiming(c.provider).Notice; got != c.notice {
			t.Errorf("%s: default notice %v, want %v", c.provider, got, c.notice)
		}
	}
}
