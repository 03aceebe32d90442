package placement

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// Policy is a SpotHedge placement policy; see the package doc for what each
// field does, precisely. The zero Policy runs all N on spot in every zone
// with no fallback.
type Policy struct {
	// Overprovision is the number of spare spot instances kept beyond N, as
	// a safeguard against preemptions. It is never covered by on-demand.
	Overprovision int `json:"overprovision,omitempty"`
	// OnDemandBase is the number of always-on on-demand instances, part of
	// N. OnDemandBase >= N runs the pool all on-demand.
	OnDemandBase int `json:"onDemandBase,omitempty"`
	// SpotFallback launches on-demand instances for the part of N that spot
	// cannot hold, and retires them once ready spot covers it again.
	SpotFallback bool `json:"spotFallback,omitempty"`
	// EagerFallback (with SpotFallback) covers every gap in ready spot with
	// on-demand at once, even while a spot replacement is starting
	// (SkyServe's dynamic_ondemand_fallback). Without it, on-demand is
	// launched only for spot that could not be placed.
	EagerFallback bool `json:"eagerFallback,omitempty"`
	// EagerStartsOnly narrows EagerFallback to standby starts: a gap in
	// ready spot is covered at once by starting a standby instance (ready
	// after a warm start), but an on-demand launch (ready no sooner than
	// the spot replacement) only for spot that could not be placed.
	EagerStartsOnly bool `json:"eagerStartsOnly,omitempty"`
	// Zones limits placement to these zones; empty means every zone offered.
	Zones []string `json:"zones,omitempty"`
	// MaxPerZone caps the pool's live spot instances in one zone (a zone
	// is one failure domain: the traces lose a zone's instances together);
	// 0 means no cap. Spot that no zone below the cap can take is
	// Unplaced, and the fallback covers its part of N with on-demand.
	MaxPerZone int `json:"maxPerZone,omitempty"`
	// CoverLoss keeps enough on-demand that the loss of all the pool's
	// spot in any one failure domain (DomainZone or DomainRegion) leaves N:
	// on-demand covers N minus the spot outside the domain holding the
	// most, while spot cannot be spread that far (few zones have capacity,
	// or MaxPerZone is reached everywhere). It is launched like the
	// fallback (at once with EagerFallback, else once the spot is placed)
	// and retired like it, once ready spot outside the largest domain
	// covers N. Empty: no cover.
	CoverLoss Domain `json:"coverLoss,omitempty"`
	// SpreadRegions ranks the region holding the fewest of the pool's spot
	// before the zone holding the fewest (zones of one region often fail
	// together). Without it the zone comes first and the region only breaks
	// ties. Best with MaxPerZone: without a cap it can fill the one zone a
	// region has capacity in.
	SpreadRegions bool `json:"spreadRegions,omitempty"`
	// CheapFirst ranks spot offerings by price before spread: among usable
	// offerings (after the preference for zones not preempted), the
	// cheaper comes first and the zone (and region) holding fewer of the
	// pool's spot only breaks ties. Spread then comes from MaxPerZone;
	// without a cap the pool fills the cheapest zone.
	CheapFirst bool `json:"cheapFirst,omitempty"`
	// Standby is the number of stopped on-demand instances to keep as a
	// warm standby (the Stopped instances of an EC2 Auto Scaling warm
	// pool): instances that were Ready once, so their disk holds the
	// model, and were then stopped. A stopped instance costs only its
	// disk, and starting it serves after a warm start, much shorter than
	// a cold one. Every on-demand launch the policy wants (base,
	// fallback, cover) starts a standby instance instead while one is
	// there (Decision.Starts); ready on-demand instances it retires are
	// stopped (Retire.Stop) rather than terminated while the standby is
	// short; and while N > 0 it launches extra on-demand instances to
	// fill the standby, which are not retired before they are Ready and
	// then stopped. 0 (the default) turns it off: nothing is started or
	// stopped, and stopped instances are terminated.
	Standby int `json:"standby,omitempty"`
}

// Domain is a failure domain: instances in one fail together.
type Domain string

// Failure domains.
const (
	// DomainZone: an availability zone.
	DomainZone Domain = "Zone"
	// DomainRegion: all the zones of a region (market.RegionOf).
	DomainRegion Domain = "Region"
)

// ErrInvalidPolicy is wrapped by Policy.Validate's errors.
var ErrInvalidPolicy = errors.New("invalid placement policy")

// Validate checks the policy's fields.
func (p Policy) Validate() error {
	var errs []error
	if p.Overprovision < 0 {
		errs = append(errs, fmt.Errorf("%w: overprovision %d: want 0 or more", ErrInvalidPolicy, p.Overprovision))
	}
	if p.CoverLoss != "" && p.CoverLoss != DomainZone && p.CoverLoss != DomainRegion {
		errs = append(errs, fmt.Errorf("%w: coverLoss %q: want %q, %q or empty", ErrInvalidPolicy, p.CoverLoss, DomainZone, DomainRegion))
	}
	if p.MaxPerZone < 0 {
		errs = append(errs, fmt.Errorf("%w: maxPerZone %d: want 0 (no cap) or more", ErrInvalidPolicy, p.MaxPerZone))
	}
	if p.Standby < 0 {
		errs = append(errs, fmt.Errorf("%w: standby %d: want 0 (off) or more", ErrInvalidPolicy, p.Standby))
	}
	if p.OnDemandBase < 0 {
		errs = append(errs, fmt.Errorf("%w: onDemandBase %d: want 0 or more", ErrInvalidPolicy, p.OnDemandBase))
	}

	if p.EagerFallback && !p.SpotFallback {
		errs = append(errs, fmt.Errorf("%w: eagerFallback needs spotFallback", ErrInvalidPolicy))
	}
	for _, z := range p.Zones {
		if z == "" {
			errs = append(errs, fmt.Errorf("%w: zones: empty zone name", ErrInvalidPolicy))
			break
		}
	}
	return errors.Join(errs...)
}

// Instance is one of the pool's instances as placement sees it.
type Instance struct {
	ID           string          `json:"id"`
	Zone         string          `json:"zone"`
	InstanceType string          `json:"instanceType,omitempty"`
	Market       provider.Market `json:"market"`
	// Ready: it serves traffic.
	Ready bool `json:"ready"`
	// Leaving: it has an interruption notice, is draining or terminating;
	// it counts for nothing and is never retired here.
	Leaving bool `json:"leaving,omitempty"`
	// Stopped: it is stopped or stopping (provider.StateStopped or
	// StateStopping), keeping its disk. It counts for nothing live: not
	// spot, not on-demand, not ready. A stopped on-demand instance that
	// is not Leaving is standby (Policy.Standby); any other stopped
	// instance is retired.
	Stopped bool `json:"stopped,omitempty"`
	// LaunchedAt orders retirements (youngest first).
	LaunchedAt time.Time `json:"launchedAt"`
}

// Input is everything a decision depends on.
type Input struct {
	// Want is N, the number of serving instances the pool wants.
	Want int
	// Instances are the pool's instances.
	Instances []Instance
	// Offerings are what the provider offers (zone x type x market, price,
	// availability).
	Offerings []provider.Offering
	// Memory holds the offerings to skip; nil skips none.
	Memory Memory
}

// memory is in.Memory, or a memory that remembers nothing.
func (in Input) memory() Memory {
	if in.Memory == nil {
		return (*CapacityMemory)(nil)
	}
	return in.Memory
}

// Launch asks for one instance on one offering.
type Launch struct {
	Zone         string          `json:"zone"`
	InstanceType string          `json:"instanceType"`
	Market       provider.Market `json:"market"`
	PricePerHour float64         `json:"pricePerHour"`
	PriceSource  string          `json:"priceSource,omitempty"`
	Reason       string          `json:"reason"`
}

// Retire asks to take an instance out (drain it if ready, then terminate,
// or stop it when Stop is set).
type Retire struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
	// Stop: stop the instance instead of terminating it, keeping it as
	// warm standby (Policy.Standby). Only set for a Ready on-demand
	// instance (one that has loaded its model); the engine drains it
	// first, as any ready retirement.
	Stop bool `json:"stop,omitempty"`
}

// Start asks to start a stopped standby instance, in place of one
// on-demand launch: it serves after a warm start. A start of an instance
// that is still stopping has to wait until it is stopped.
type Start struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Decision is what to do now, as plain data.
type Decision struct {
	// SpotTarget and OnDemandTarget are the live instances wanted per
	// market: spotTarget and keepOD of the package doc.
	SpotTarget     int `json:"spotTarget"`
	OnDemandTarget int `json:"onDemandTarget"`
	// Launches, in the order decided.
	Launches []Launch `json:"launches,omitempty"`
	// Retires, in the order decided.
	Retires []Retire `json:"retires,omitempty"`
	// Starts are standby instances to start, each in place of one
	// on-demand launch (Policy.Standby), in the order decided.
	Starts []Start `json:"starts,omitempty"`
	// Unplaced counts the spot launches wanted that no usable offering
	// could take.
	Unplaced int `json:"unplaced,omitempty"`
	// Notes say what was skipped and why.
	Notes []string `json:"notes,omitempty"`
}

// counts summarises the live instances.
type counts struct {
	spotLive, spotReady, odLive, odReady int
	spotByZone                           map[string]int // live spot per zone
	spotReadyByZone                      map[string]int // ready spot per zone
	spotByRegion                         map[string]int // live spot per region
	allByZone                            map[string]int // live instances per zone
}

func count(insts []Instance) counts {
	c := counts{spotByZone: map[string]int{}, spotReadyByZone: map[string]int{}, spotByRegion: map[string]int{}, allByZone: map[string]int{}}
	for _, in := range insts {
		if in.Leaving || in.Stopped {
			continue
		}
		c.allByZone[in.Zone]++
		if in.Market == provider.MarketOnDemand {
			c.odLive++
			if in.Ready {
				c.odReady++
			}
			continue
		}
		c.spotLive++
		c.spotByZone[in.Zone]++
		c.spotByRegion[market.RegionOf(in.Zone)]++
		if in.Ready {
			c.spotReady++
			c.spotReadyByZone[in.Zone]++
		}
	}
	return c
}

// Decide computes the launches and retirements that move the pool toward
// the policy's targets. It is pure apart from reading Memory at its clock.
func (p Policy) Decide(in Input) Decision {
	n := max(0, in.Want)
	base := min(max(0, p.OnDemandBase), n)
	spotTarget := 0
	if n > 0 {
		spotTarget = n - base + max(0, p.Overprovision)
	}
	c := count(in.Instances)
	d := Decision{SpotTarget: spotTarget}

	spotOffers, odOffers, notes := p.usable(in.Offerings, in.memory())
	d.Notes = append(d.Notes, notes...)
	preempted := map[Key]bool{}
	for _, o := range spotOffers {
		if in.memory().Preempted(KeyOf(o)) {
			preempted[KeyOf(o)] = true
		}
	}

	// Spot launches, spread over zones.
	placed := 0
	for i := c.spotLive; i < spotTarget; i++ {
		o, ok := pickSpot(spotOffers, c.spotByZone, c.spotByRegion, preempted, p)
		if !ok {
			d.Unplaced = spotTarget - i
			why := "no usable spot offering"
			if p.MaxPerZone > 0 && len(spotOffers) > 0 {
				why = fmt.Sprintf("no usable spot offering in a zone below its cap of %d", p.MaxPerZone)
			}
			d.Notes = append(d.Notes, fmt.Sprintf("%d spot launches not placed: %s", d.Unplaced, why))
			break
		}
		held := c.spotByZone[o.Zone]
		c.spotByZone[o.Zone]++
		c.spotByRegion[market.RegionOf(o.Zone)]++
		c.allByZone[o.Zone]++
		placed++
		recent := ""
		if preempted[KeyOf(o)] {
			recent = ", preempted recently but the only choice"
		}
		d.Launches = append(d.Launches, launchOf(o, fmt.Sprintf("spot %d of %d (N %d - on-demand base %d + overprovision %d): %s holds %d of the pool's spot%s, %s",
			i+1, spotTarget, n, base, max(0, p.Overprovision), o.Zone, held, recent, priceText(o))))
	}

	// On-demand: base, plus the fallback and the zone-loss cover.
	keep, launchTo := base, base
	lazyTo := base // without EagerFallback: what a launch (not a start) may fill
	if p.SpotFallback {
		keep += max(0, (n-base)-c.spotReady)
		lazyTo += max(0, (n-base)-(c.spotLive+placed))
		launchTo = lazyTo
		if p.EagerFallback {
			launchTo = keep
		}
	}
	domain := func(zone string) string { return zone }
	if p.CoverLoss == DomainRegion {
		domain = market.RegionOf
	}
	worstLive, worstReady := c.worst(domain, false), c.worst(domain, true)
	coverLazy := 0
	if p.CoverLoss != "" && n > base {
		coverKeep := base + max(0, (n-base)-(c.spotReady-worstReady))
		coverLaunch := base + max(0, (n-base)-(c.spotLive+placed-worstLive))
		coverLazy = coverLaunch
		if p.EagerFallback {
			coverLaunch = coverKeep
		}
		keep, launchTo = max(keep, coverKeep), max(launchTo, coverLaunch)
	}
	d.OnDemandTarget = keep
	prices := priceIndex(in.Offerings)
	startable, idle := p.standby(in, &d)
	standby := len(startable) + len(idle)
	odLaunched := 0
	for i := c.odLive; i < launchTo; i++ {
		why := fmt.Sprintf("on-demand base %d of %d", i+1, base)
		switch {
		case i >= base && p.CoverLoss != "" && (!p.SpotFallback || i >= base+max(0, (n-base)-(c.spotLive+placed))):
			why = fmt.Sprintf("cover for a %s loss %d of %d: %d spot live or placed, %d of them in one %s", strings.ToLower(string(p.CoverLoss)),
				i+1-base, launchTo-base, c.spotLive+placed, worstLive, strings.ToLower(string(p.CoverLoss)))
		case i >= base:
			why = fmt.Sprintf("on-demand fallback %d of %d: %d of %d spot ready, %d live or placed",
				i+1-base, launchTo-base, c.spotReady, n-base, c.spotLive+placed)
		}
		if x, ok := pickStandby(&startable, c.allByZone, prices); ok {
			c.allByZone[x.Zone]++
			d.Starts = append(d.Starts, Start{ID: x.ID, Reason: fmt.Sprintf("start standby in %s instead of an on-demand launch (%d of %d standby left): %s",
				x.Zone, standby-len(d.Starts)-1, p.Standby, why)})
			continue
		}
		if p.EagerStartsOnly && i >= max(lazyTo, coverLazy) {
			break // no standby left: the spot replacement is as quick as a launch
		}
		o, ok := pickOnDemand(odOffers, c.allByZone)
		if !ok {
			d.Notes = append(d.Notes, fmt.Sprintf("%d on-demand launches not placed: no usable on-demand offering", launchTo-i))
			break
		}
		c.allByZone[o.Zone]++
		odLaunched++
		d.Launches = append(d.Launches, launchOf(o, why+", "+priceText(o)))
	}
	standbyLeft := standby - len(d.Starts)

	// Retirements: never below N ready.
	ready := c.spotReady + c.odReady
	odRetired, stops := 0, 0
	if excess := c.odLive - keep; excess > 0 {
		cands := filter(in.Instances, func(x Instance) bool {
			return !x.Leaving && !x.Stopped && x.Market == provider.MarketOnDemand
		})
		sortRetire(cands, nil, prices)
		var out []Instance // as decided without a standby: not ready first
		for _, x := range cands {
			if excess == 0 {
				break
			}
			if x.Ready && ready-1 < n {
				continue
			}
			if x.Ready {
				ready--
			}
			out = append(out, x)
			excess--
		}
		why := fmt.Sprintf("on-demand %d above target %d", c.odLive, keep)
		if p.SpotFallback && c.odLive > base {
			why = fmt.Sprintf("fallback no longer needed: %d spot ready of %d", c.spotReady, n-base)
		}
		// Ready ones fill the standby first (stopped, not terminated);
		// then not-ready ones are kept to fill what is left of it, the
		// last to retire (the oldest) kept first.
		stop := map[string]bool{}
		for _, x := range out {
			if x.Ready && standbyLeft+stops < p.Standby {
				stop[x.ID] = true
				stops++
			}
		}
		notReady := 0
		for _, x := range out {
			if !x.Ready {
				notReady++
			}
		}
		protect := 0
		if n > 0 {
			protect = min(notReady, max(0, p.Standby-standbyLeft-stops))
		}
		seen, stopped := 0, 0
		for _, x := range out {
			r := Retire{ID: x.ID, Reason: why}
			if !x.Ready {
				if seen++; seen > notReady-protect {
					continue
				}
			}
			if stop[x.ID] {
				r.Stop = true
				r.Reason += fmt.Sprintf("; stopped as warm standby %d of %d", standbyLeft+stopped+1, p.Standby)
				stopped++
			}
			d.Retires = append(d.Retires, r)
			odRetired++
		}
	}

	// Standby fill: on-demand launched to be stopped once Ready, while
	// the standby plus the on-demand held beyond what the pool needs now
	// is short of Standby.
	if p.Standby > 0 && n > 0 {
		held := max(0, c.odLive+len(d.Starts)+odLaunched-odRetired-min(keep, launchTo))
		for k := standbyLeft + stops + held; k < p.Standby; k++ {
			o, ok := pickOnDemand(odOffers, c.allByZone)
			if !ok {
				d.Notes = append(d.Notes, fmt.Sprintf("%d standby launches not placed: no usable on-demand offering", p.Standby-k))
				break
			}
			c.allByZone[o.Zone]++
			d.Launches = append(d.Launches, launchOf(o, fmt.Sprintf("on-demand for warm standby %d of %d (to be stopped once ready): %d stopped, %d stopping now, %d on-demand held beyond the %d needed, %s",
				k+1, p.Standby, standbyLeft, stops, held, min(keep, launchTo), priceText(o))))
		}
	}
	// Stopped instances beyond the standby are terminated: those that
	// cannot be started first, then the dearest.
	if extra := standbyLeft - p.Standby; extra > 0 {
		rev := slices.Clone(startable)
		slices.Reverse(rev)
		order := append(slices.Clone(idle), rev...)
		for _, x := range order[:extra] {
			d.Retires = append(d.Retires, Retire{ID: x.ID, Reason: fmt.Sprintf("standby: %d stopped, above %d", standbyLeft, p.Standby)})
		}
	}
	for _, x := range in.Instances {
		if x.Stopped && !x.Leaving && x.Market != provider.MarketOnDemand {
			d.Retires = append(d.Retires, Retire{ID: x.ID, Reason: fmt.Sprintf("stopped %s instance: only on-demand instances are standby", x.Market)})
		}
	}
	if excess := c.spotLive - spotTarget; excess > 0 {
		cands := filter(in.Instances, func(x Instance) bool { return !x.Leaving && !x.Stopped && x.Market != provider.MarketOnDemand })
		byZone := count(in.Instances).spotByZone
		for ; excess > 0 && len(cands) > 0; excess-- {
			// Re-rank after each pick: the zone holding the most changes.
			sortRetire(cands, byZone, prices)
			i := slices.IndexFunc(cands, func(x Instance) bool { return !x.Ready || ready-1 >= n })
			if i < 0 {
				break
			}
			x := cands[i]
			cands = slices.Delete(cands, i, i+1)
			byZone[x.Zone]--
			if x.Ready {
				ready--
			}
			d.Retires = append(d.Retires, Retire{ID: x.ID, Reason: fmt.Sprintf("spot %d above target %d", c.spotLive, spotTarget)})
		}
	}
	return d
}

// standby returns the pool's stopped on-demand instances that are not
// Leaving: those a start may take (with Standby > 0, in Zones when set,
// their on-demand offering not Blocked), cheapest first, then the oldest,
// then by ID; and the others, noting why they are not started.
func (p Policy) standby(in Input, d *Decision) (startable, idle []Instance) {
	prices := priceIndex(in.Offerings)
	for _, x := range in.Instances {
		if !x.Stopped || x.Leaving || x.Market != provider.MarketOnDemand {
			continue
		}
		k := Key{x.Zone, x.InstanceType, x.Market}
		switch b, blocked := in.memory().Blocked(k); {
		case p.Standby == 0:
			idle = append(idle, x)
		case len(p.Zones) > 0 && !slices.Contains(p.Zones, x.Zone):
			d.Notes = append(d.Notes, fmt.Sprintf("standby %s in %s not started: outside the policy's zones", x.ID, x.Zone))
			idle = append(idle, x)
		case blocked:
			d.Notes = append(d.Notes, fmt.Sprintf("standby %s in %s not started until %s: %s", x.ID, x.Zone, b.Until.UTC().Format(time.RFC3339), b.Why))
			idle = append(idle, x)
		default:
			startable = append(startable, x)
		}
	}
	sort.SliceStable(startable, func(i, j int) bool {
		a, b := startable[i], startable[j]
		pa, pb := price(provider.Offering{PricePerHour: prices[Key{a.Zone, a.InstanceType, a.Market}]}), price(provider.Offering{PricePerHour: prices[Key{b.Zone, b.InstanceType, b.Market}]})
		if pa != pb {
			return pa < pb
		}
		if !a.LaunchedAt.Equal(b.LaunchedAt) {
			return a.LaunchedAt.Before(b.LaunchedAt)
		}
		return a.ID < b.ID
	})
	return startable, idle
}

// pickStandby takes from xs (in the order standby returns) the cheapest,
// then the one whose zone holds the fewest of the pool's live instances,
// then the first.
func pickStandby(xs *[]Instance, byZone map[string]int, prices map[Key]float64) (Instance, bool) {
	best := -1
	for i, x := range *xs {
		if best < 0 {
			best = i
			continue
		}
		b := (*xs)[best]
		px := price(provider.Offering{PricePerHour: prices[Key{x.Zone, x.InstanceType, x.Market}]})
		pb := price(provider.Offering{PricePerHour: prices[Key{b.Zone, b.InstanceType, b.Market}]})
		if px != pb {
			break // sorted by price: the rest are dearer
		}
		if byZone[x.Zone] < byZone[b.Zone] {
			best = i
		}
	}
	if best < 0 {
		return Instance{}, false
	}
	x := (*xs)[best]
	*xs = slices.Delete(*xs, best, best+1)
	return x, true
}

// usable splits the offerings that may take a launch by market, sorted for
// determinism, and notes what was skipped.
func (p Policy) usable(offers []provider.Offering, mem Memory) (spot, od []provider.Offering, notes []string) {
	for _, o := range offers {
		if len(p.Zones) > 0 && !slices.Contains(p.Zones, o.Zone) {
			continue
		}
		if !o.Available {
			notes = append(notes, fmt.Sprintf("skipped %s %s in %s: the provider reports no capacity", o.Market, o.InstanceType, o.Zone))
			continue
		}
		if b, blocked := mem.Blocked(KeyOf(o)); blocked {
			notes = append(notes, fmt.Sprintf("skipped %s %s in %s until %s: %s", o.Market, o.InstanceType, o.Zone,
				b.Until.UTC().Format(time.RFC3339), b.Why))
			continue
		}
		if o.Market == provider.MarketOnDemand {
			od = append(od, o)
		} else {
			spot = append(spot, o)
		}
	}
	sort.Slice(spot, func(i, j int) bool { return keyLess(KeyOf(spot[i]), KeyOf(spot[j])) })
	sort.Slice(od, func(i, j int) bool { return keyLess(KeyOf(od[i]), KeyOf(od[j])) })
	return spot, od, notes
}

// pickSpot: among offerings in zones holding fewer than MaxPerZone (when
// set), one without a recent preemption, then (with CheapFirst) the cheapest, then the
// zone holding the fewest of the pool's spot, then the region holding the
// fewest (the region first with SpreadRegions), then the cheapest, then
// name order (offers are sorted by key).
func pickSpot(offers []provider.Offering, byZone, byRegion map[string]int, preempted map[Key]bool, p Policy) (provider.Offering, bool) {
	best := -1
	for i, o := range offers {
		if p.MaxPerZone > 0 && byZone[o.Zone] >= p.MaxPerZone {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := offers[best]
		if po, pb := preempted[KeyOf(o)], preempted[KeyOf(b)]; po != pb {
			if !po {
				best = i
			}
			continue
		}
		zo, zb := byZone[o.Zone], byZone[b.Zone]
		ro, rb := byRegion[market.RegionOf(o.Zone)], byRegion[market.RegionOf(b.Zone)]
		if p.SpreadRegions {
			zo, zb, ro, rb = ro, rb, zo, zb
		}
		if p.CheapFirst && price(o) != price(b) {
			if price(o) < price(b) {
				best = i
			}
			continue
		}
		if zo != zb {
			if zo < zb {
				best = i
			}
			continue
		}
		if ro != rb {
			if ro < rb {
				best = i
			}
			continue
		}
		if price(o) < price(b) {
			best = i
		}
	}
	if best < 0 {
		return provider.Offering{}, false
	}
	return offers[best], true
}

// pickOnDemand: the cheapest, then the zone holding fewer of the pool's
// instances, then name order.
func pickOnDemand(offers []provider.Offering, byZone map[string]int) (provider.Offering, bool) {
	best := -1
	for i, o := range offers {
		if best < 0 {
			best = i
			continue
		}
		b := offers[best]
		if price(o) != price(b) {
			if price(o) < price(b) {
				best = i
			}
			continue
		}
		if byZone[o.Zone] < byZone[b.Zone] {
			best = i
		}
	}
	if best < 0 {
		return provider.Offering{}, false
	}
	return offers[best], true
}

// worst returns the most live (or ready) spot instances in one domain
// (domain maps a zone to it).
func (c counts) worst(domain func(string) string, ready bool) int {
	m := c.spotByZone
	if ready {
		m = c.spotReadyByZone
	}
	per := map[string]int{}
	v := 0
	for z, n := range m {
		d := domain(z)
		per[d] += n
		v = max(v, per[d])
	}
	return v
}

// price treats an unknown price (0) as dearer than any known one, so that
// placement never prefers an offering because nobody knows what it costs.
func price(o provider.Offering) float64 {
	if o.PricePerHour <= 0 {
		return 1e18
	}
	return o.PricePerHour
}

func priceText(o provider.Offering) string {
	if o.PricePerHour <= 0 {
		return "price unknown"
	}
	src := o.PriceSource
	if src == "" {
		src = "unlabelled"
	}
	cur := o.Currency
	if cur == "" {
		cur = "?"
	}
	return fmt.Sprintf("%.4g %s/h (%s)", o.PricePerHour, cur, src)
}

func launchOf(o provider.Offering, reason string) Launch {
	return Launch{Zone: o.Zone, InstanceType: o.InstanceType, Market: o.Market,
		PricePerHour: o.PricePerHour, PriceSource: o.PriceSource, Reason: reason}
}

func priceIndex(offers []provider.Offering) map[Key]float64 {
	m := make(map[Key]float64, len(offers))
	for _, o := range offers {
		m[KeyOf(o)] = o.PricePerHour
	}
	return m
}

func filter(insts []Instance, keep func(Instance) bool) []Instance {
	var out []Instance
	for _, x := range insts {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// sortRetire orders retirement candidates: not ready first; then (when
// byZone is given) the zone holding the most; then the most expensive; then
// the youngest; then the greater ID.
func sortRetire(xs []Instance, byZone map[string]int, prices map[Key]float64) {
	sort.SliceStable(xs, func(i, j int) bool {
		a, b := xs[i], xs[j]
		if a.Ready != b.Ready {
			return !a.Ready
		}
		if byZone != nil && byZone[a.Zone] != byZone[b.Zone] {
			return byZone[a.Zone] > byZone[b.Zone]
		}
		pa := prices[Key{a.Zone, a.InstanceType, a.Market}]
		pb := prices[Key{b.Zone, b.InstanceType, b.Market}]
		if pa != pb {
			return pa > pb
		}
		if !a.LaunchedAt.Equal(b.LaunchedAt) {
			return a.LaunchedAt.After(b.LaunchedAt)
		}
		return strings.Compare(a.ID, b.ID) > 0
	})
}
