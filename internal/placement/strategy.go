package placement

import (
	"fmt"
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
	// every gap in ready spot covered at once by a standby start where a
	// standby is kept.
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
		pol.EagerFallback, pol.EagerStartsOnly, pol.SpreadRegions, pol.CoverLoss = true, true, true, DomainZone
		pol.MaxPerZone = max(1, (spot+1)/2)
		return pol, fmt.Sprintf("spot spread over zones and regions, at most %d per zone, on-demand cover for a zone's loss", pol.MaxPerZone)
	}
	return adaptive(pol, env, in, spot)
}

// adaptive chooses the spares of an Adaptive pool. Every gap in ready spot
// is covered at once by a standby start where one is kept (an on-demand
// launch from cold only for spot that cannot be placed), so a loss of m
// spot instances at once costs the pool a dip only beyond its spares, and
// only for gap(x) = start - notice, where start is the warm start when the
// standby holds the x instances missing, else the cold start. With c spare
// spot instances, at most c per zone (so that no zone's loss alone takes
// more than the spares; c needs ceil((spot + c) / c) usable zones), the
// expected share of time below N is
//
//	risk(c) = sum over m > c of LossRate(m) x gap(m - c)
//
// where LossRate(m) is the memory's learnt rate per hour of loss episodes
// taking m spot instances at once (all zones pooled: zones and regions
// fail together; before it has seen any, a prior that the fullest zone is
// lost once a day). Adaptive keeps the least c whose risk is within
// 1 - target, or the least risky c when none is. On-demand spares were
// measured and left out: on the traces they bought little availability
// at a high price (BENCHMARKS.md).
func adaptive(pol Policy, env Env, in Input, spot int) (Policy, string) {
	pol.EagerFallback, pol.EagerStartsOnly = true, true
	pol.CheapFirst = true
	if spot == 0 {
		return pol, "no spot wanted"
	}
	budget := max(0, 1-env.Target)
	standby := 0
	for _, x := range in.Instances {
		if x.Stopped && !x.Leaving && x.Market == provider.MarketOnDemand {
			standby++
		}
	}
	standby = min(standby, env.Standby)
	gap := func(x int) float64 {
		if x <= 0 {
			return 0
		}
		start := env.Timing.ColdStart
		if standby >= x {
			start = env.Timing.WarmStart
		}
		return max(0, start-env.Timing.Notice).Hours()
	}
	spotOffers, _, _ := pol.usable(in.Offerings, in.memory())
	zones := map[string]bool{}
	for _, o := range spotOffers {
		zones[o.Zone] = true
	}
	// Until the pool has seen its market, it expects its fullest zone to
	// be lost now and then (zones are the unit the traces lose).
	perZone, fullest := map[string]int{}, 0
	for _, x := range in.Instances {
		if !x.Leaving && !x.Stopped && x.Market != provider.MarketOnDemand {
			perZone[x.Zone]++
			fullest = max(fullest, perZone[x.Zone])
		}
	}
	if fullest == 0 {
		fullest = (spot + max(1, len(zones)) - 1) / max(1, len(zones))
	}
	maxLoss := 2 * spot
	rates := in.memory().LossRates(maxLoss, fullest)
	risk := func(c int) float64 {
		r := 0.0
		for m := c + 1; m <= maxLoss; m++ {
			r += rates[m] * gap(m-c)
		}
		return r
	}
	best, bestRisk := 0, risk(0)
	for c := 1; c <= spot && bestRisk > budget; c++ {
		if len(zones) < (spot+c+c-1)/c {
			continue
		}
		if r := risk(c); r < bestRisk {
			best, bestRisk = c, r
		}
	}
	pol.Overprovision = best
	if best > 0 {
		pol.MaxPerZone, pol.SpreadRegions = best, true
	}
	spares := "no spares"
	if best > 0 {
		spares = fmt.Sprintf("%d spare spot, at most %d per zone", best, best)
	}
	return pol, fmt.Sprintf("expected time below N %.3f%% (budget %.3f%%; %d usable spot zones, %d standby): %s",
		100*bestRisk, 100*budget, len(zones), standby, spares)
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
