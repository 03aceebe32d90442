package placement

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// Strategy is a named placement strategy: what a pool's owner chooses
// instead of tuning a Policy. Its values are api/v1's Strategy* constants.
type Strategy string

// Strategies.
const (
	// Adaptive learns the market (Rate, Timing) and keeps, each round, the
	// spares that hold the availability target at the least cost.
	Adaptive Strategy = "Adaptive"
	// LowestPrice: spot in the cheapest zones, on-demand only for spot
	// that cannot be placed.
	LowestPrice Strategy = "LowestPrice"
	// ZoneResilient: spot spread over zones and regions, at most half of
	// it in one zone, on-demand cover for the loss of the fullest zone,
	// every gap in ready spot covered by on-demand at once.
	ZoneResilient Strategy = "ZoneResilient"
	// OnDemand: every instance on-demand.
	OnDemand Strategy = "OnDemand"
)

// Strategies lists every strategy, the default first.
var Strategies = []Strategy{Adaptive, LowestPrice, ZoneResilient, OnDemand}

// Env is the pool a strategy resolves for.
type Env struct {
	// Want is N; OnDemandBase the always-on on-demand part of it.
	Want, OnDemandBase int
	// Zones limits placement (empty: every zone offered).
	Zones []string
	// Standby is the warm standby's size in force (0: none, or the
	// provider cannot stop instances).
	Standby int
	// Target is the availability target, a fraction such as 0.999
	// (Adaptive only).
	Target float64
	// Timing is the notice and the start times to plan with: measured,
	// else the provider's documented notice and assumed starts.
	Timing Timing
}

// Resolve returns the Policy the strategy wants now for the pool, and one
// line saying why. in is the round's placement input (instances,
// offerings, memory); only Adaptive reads it.
func (s Strategy) Resolve(env Env, in Input) (Policy, string) {
	n := max(0, env.Want)
	base := min(max(0, env.OnDemandBase), n)
	spot := n - base
	pol := Policy{OnDemandBase: base, SpotFallback: true, Zones: env.Zones, Standby: max(0, env.Standby)}
	switch s {
	case OnDemand:
		pol.OnDemandBase, pol.SpotFallback = n, false
		return pol, "every instance on-demand"
	case LowestPrice:
		pol.CheapFirst = true
		return pol, "spot in the cheapest zones, on-demand for spot that cannot be placed"
	case ZoneResilient:
		pol.EagerFallback, pol.SpreadRegions, pol.CoverLoss = true, true, DomainZone
		pol.MaxPerZone = max(1, (spot+1)/2)
		return pol, fmt.Sprintf("spot spread over zones and regions, at most %d per zone, on-demand cover for a zone's loss", pol.MaxPerZone)
	}
	return adaptive(pol, env, in, spot)
}

// adaptive chooses the spares of an Adaptive pool. Every gap in ready spot
// is covered at once (by a standby start where one is kept, else an
// on-demand launch), so a reclaim costs the pool a dip only when its
// replacement is not ready within the notice: for gap(k) = start - notice,
// where start is the warm start if the standby holds the k instances a
// zone loses at once, else the cold start. With no spares the expected
// share of time below N is
//
//	risk = sum over offerings held of Rate(offering) x gap(instances held there)
//
// (Rate: the memory's learnt preemption episodes per hour held). Within
// the budget 1 - target, the pool runs spot in its cheapest zones with no
// spares. Beyond it, the pool keeps c spare spot instances with at most c
// per zone, so that no zone's loss takes it below N, for the least c that
// the usable zones can hold; where too few zones have capacity for any c,
// one spare absorbs partial losses.
func adaptive(pol Policy, env Env, in Input, spot int) (Policy, string) {
	pol.EagerFallback, pol.EagerStartsOnly = true, true
	pol.CheapFirst = true
	if spot == 0 {
		return pol, "no spot wanted"
	}
	budget := 1 - env.Target
	if budget <= 0 {
		budget = 0
	}
	held := map[Key]int{}
	heldSpot, standby := 0, 0
	for _, x := range in.Instances {
		switch {
		case x.Leaving:
		case x.Stopped && x.Market == provider.MarketOnDemand:
			standby++
		case x.Stopped:
		case x.Market != provider.MarketOnDemand:
			held[Key{x.Zone, x.InstanceType, x.Market}]++
			heldSpot++
		}
	}
	standby = min(standby, env.Standby)
	gap := func(k int) float64 {
		start := env.Timing.ColdStart
		if standby >= k {
			start = env.Timing.WarmStart
		}
		return max(0, start-env.Timing.Notice).Hours()
	}
	spotOffers, _, _ := pol.usable(in.Offerings, in.memory())
	zones := map[string]bool{}
	best := math.Inf(1)
	for _, o := range spotOffers {
		zones[o.Zone] = true
		best = min(best, in.memory().Rate(KeyOf(o)))
	}
	risk := 0.0
	for _, k := range sortedKeys(held) {
		risk += in.memory().Rate(k) * gap(held[k])
	}
	if missing := spot - heldSpot; missing > 0 && !math.IsInf(best, 1) {
		risk += best * gap(missing)
	}
	if risk <= budget {
		return pol, fmt.Sprintf("expected time below N without spares %.3f%% is within the %.3f%% budget: no spares", 100*risk, 100*budget)
	}
	for c := 1; c <= spot; c++ {
		if len(zones) >= (spot+c+c-1)/c {
			pol.Overprovision, pol.MaxPerZone, pol.SpreadRegions = c, c, true
			return pol, fmt.Sprintf("expected time below N without spares %.3f%% is above the %.3f%% budget: %d spare spot, at most %d per zone over %d usable zones",
				100*risk, 100*budget, c, c, len(zones))
		}
	}
	pol.Overprovision = 1
	return pol, fmt.Sprintf("expected time below N without spares %.3f%% is above the %.3f%% budget, and %d usable zones cannot spread the spares: 1 spare spot",
		100*risk, 100*budget, len(zones))
}

func sortedKeys(m map[Key]int) []Key {
	ks := make([]Key, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b Key) int {
		if keyLess(a, b) {
			return -1
		}
		if keyLess(b, a) {
			return 1
		}
		return 0
	})
	return ks
}

// DefaultTiming is what a pool plans with before it has measured its
// market: the provider's documented notice (AWS: two minutes,
// https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html;
// GCP and Azure: 30 seconds,
// https://cloud.google.com/compute/docs/instances/spot#preemption and
// https://learn.microsoft.com/azure/virtual-machines/spot-vms; Tencent's
// notice is taken as two minutes until one is seen), and assumed starts:
// 5 minutes cold (boot, image, weights) and 2 minutes warm on a cloud,
// BENCHMARKS.md's sourced estimate.
func DefaultTiming(providerName string) Timing {
	switch providerName {
	case "gcp", "azure":
		return Timing{Notice: 30 * time.Second, ColdStart: 5 * time.Minute, WarmStart: 2 * time.Minute}
	case "local":
		return Timing{ColdStart: 30 * time.Second, WarmStart: 30 * time.Second}
	default:
		return Timing{Notice: 2 * time.Minute, ColdStart: 5 * time.Minute, WarmStart: 2 * time.Minute}
	}
}

// Merge returns t with the fields m has measured.
func (t Timing) Merge(m Timing) Timing {
	if m.Notice > 0 {
		t.Notice = m.Notice
	}
	if m.ColdStart > 0 {
		t.ColdStart = m.ColdStart
	}
	if m.WarmStart > 0 {
		t.WarmStart = m.WarmStart
	}
	return t
}
