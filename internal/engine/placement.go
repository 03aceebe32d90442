package engine

import (
	"strconv"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// StrategyOf returns the pool's placement strategy (Adaptive unless
// spec.placement.strategy says otherwise) and whether the pool is placed
// at all (spec.placement set).
func StrategyOf(spec *tidev1.TidePoolSpec) (placement.Strategy, bool) {
	if spec.Placement == nil {
		return "", false
	}
	if s := spec.Placement.Strategy; s != "" {
		return placement.Strategy(s), true
	}
	return placement.Adaptive, true
}

// StandbyFor is the warm standby size the spec asks for with want
// instances: spec.placement.standby, else one per spot instance for the
// Adaptive strategy (none for the others).
func StandbyFor(spec *tidev1.TidePoolSpec, want int32) int {
	pl := spec.Placement
	if pl == nil {
		return 0
	}
	if pl.Standby != nil {
		return int(*pl.Standby)
	}
	if s, _ := StrategyOf(spec); s == placement.Adaptive {
		return int(max(0, want-min(want, pl.OnDemandBase)))
	}
	return 0
}

// TargetOf is spec.placement.availabilityTarget as a fraction.
func TargetOf(spec *tidev1.TidePoolSpec) float64 {
	t := tidev1.DefaultAvailabilityTarget
	if spec.Placement != nil && spec.Placement.AvailabilityTarget != "" {
		t = spec.Placement.AvailabilityTarget
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || v > 100 {
		v, _ = strconv.ParseFloat(tidev1.DefaultAvailabilityTarget, 64)
	}
	return v / 100
}

// timingOf is what the pool plans with: what it measured, else the
// provider's documented notice and assumed starts.
func timingOf(spec *tidev1.TidePoolSpec, mem *placement.CapacityMemory) placement.Timing {
	t := placement.DefaultTiming(spec.Provider)
	if spec.Provider == tidev1.ProviderSim && spec.Sim != nil && spec.Sim.NoticeSeconds != nil {
		t.Notice = time.Duration(*spec.Sim.NoticeSeconds) * time.Second
	}
	return t.Merge(mem.Timing())
}

// offeringsRefresh paces offering look-ups for placement.
const offeringsRefresh = 15 * time.Second

// place lets the pool's placement policy decide launches (zone, type,
// market) and retirements, replacing the plan's own. It reports whether a
// policy decided.
func (p *Pool) place(spec *tidev1.TidePoolSpec, views []View, plan *Plan, now time.Time) bool {
	strategy, ok := StrategyOf(spec)
	if !ok {
		return false
	}
	src, ok := p.deps.provider.(provider.OfferingSource)
	if !ok {
		return false
	}
	standby := StandbyFor(spec, plan.Desired)
	if standby > 0 && !p.standbyUsable(spec) {
		standby = 0
	}
	p.mu.Lock()
	if p.capMem == nil {
		p.capMem = placement.NewCapacityMemory(p.deps.clock, 0)
		p.capMem.SetLearning(p.deps.learning)
	}
	offers, at := p.offers, p.offersAt
	p.mu.Unlock()
	if offers == nil || now.Sub(at) >= offeringsRefresh {
		if fresh, err := src.Offerings(p.ctx(), spec); err == nil {
			offers = fresh
			p.mu.Lock()
			p.offers, p.offersAt = fresh, now
			p.mu.Unlock()
		} else if offers == nil {
			p.deps.logger.Warn("offerings unavailable: placing on the spec's own offering", "pool", p.name, "err", err)
			return false
		}
	}
	leaving := map[string]bool{}
	for _, t := range plan.Terminations {
		leaving[t.ID] = true
	}
	for _, d := range plan.Drains {
		leaving[d.ID] = true
	}
	p.mu.Lock()
	toStandby := map[string]bool{}
	for id := range p.stopAfterDrain {
		toStandby[id] = true
	}
	p.mu.Unlock()
	insts := make([]placement.Instance, 0, len(views))
	for _, v := range views {
		in := placement.Instance{ID: v.ID, Zone: v.Zone, InstanceType: v.InstanceType, Market: v.Market,
			Ready: v.Ready, LaunchedAt: v.LaunchedAt, Stopped: v.State == provider.StateStopped || v.State == provider.StateStopping,
			Leaving: leaving[v.ID] || v.State == provider.StateTerminating || v.InterruptAt != nil || v.DrainDeadline != nil}
		if toStandby[v.ID] && !in.Stopped && v.State != provider.StateTerminating {
			// Draining on its way into standby: it is standby already (a
			// start recalls it).
			in.Stopped, in.Leaving, in.Ready = true, false, false
		}
		insts = append(insts, in)
	}
	if b := p.blockedUntil(); now.Before(b) {
		// Launches wait for the backoff, retirements too; look again then.
		if d := b.Sub(now); plan.Requeue == 0 || d < plan.Requeue {
			plan.Requeue = d
		}
		return true
	}
	held := map[placement.Key]int{}
	for _, x := range insts {
		if !x.Leaving && !x.Stopped && x.Market != provider.MarketOnDemand {
			held[placement.Key{Zone: x.Zone, InstanceType: x.InstanceType, Market: x.Market}]++
		}
	}
	p.capMem.Accrue(held)
	pin := placement.Input{Want: int(plan.Desired), Instances: insts, Offerings: offers, Memory: p.capMem}
	pol, why := strategy.Resolve(placement.Env{Want: int(plan.Desired), OnDemandBase: int(spec.Placement.OnDemandBase),
		Zones: spec.Placement.AvailabilityZones, Standby: standby, Target: TargetOf(spec), Timing: timingOf(spec, p.capMem)}, pin)
	p.notePolicy(strategy, why)
	dec := pol.Decide(pin)
	for _, l := range dec.Launches {
		plan.Launches = append(plan.Launches, Launch{Market: l.Market, Zone: l.Zone, InstanceType: l.InstanceType, Reason: l.Reason})
	}
	byID := map[string]View{}
	for _, v := range views {
		byID[v.ID] = v
	}
	for _, st := range dec.Starts {
		v := byID[st.ID]
		switch {
		case v.State == provider.StateStopped:
			plan.Starts = append(plan.Starts, Start{ID: st.ID, Zone: v.Zone, InstanceType: v.InstanceType, Reason: st.Reason})
			plan.Phases[st.ID] = tidev1.PhasePending
		case v.State == provider.StateStopping:
			// It must be stopped before it can start: look again soon.
			if plan.Requeue == 0 || time.Second < plan.Requeue {
				plan.Requeue = time.Second
			}
		default:
			// Still draining on its way into standby: recall it.
			p.mu.Lock()
			delete(p.stopAfterDrain, st.ID)
			delete(p.drains, st.ID)
			p.mu.Unlock()
			p.deps.recorder.Eventf(events.TypeNormal, "Recalled", p.name, st.ID, "%s serves again instead of going into standby: %s", st.ID, st.Reason)
			plan.Requeue = time.Millisecond
		}
	}
	retired := map[string]bool{}
	for _, r := range dec.Retires {
		v := byID[r.ID]
		retired[r.ID] = true
		if r.Stop && pol.Standby > 0 {
			if v.Ready && v.Address != "" {
				p.mu.Lock()
				p.stopAfterDrain[r.ID] = true
				p.mu.Unlock()
				plan.Drains = append(plan.Drains, Drain{ID: r.ID, Deadline: now.Add(DrainTimeout(spec)), Reason: r.Reason + " (then stopped into standby)"})
				plan.Phases[r.ID] = tidev1.PhaseDraining
			} else {
				plan.Stops = append(plan.Stops, Termination{ID: r.ID, Reason: r.Reason})
				plan.Phases[r.ID] = tidev1.PhaseStandby
			}
			continue
		}
		if v.Ready && v.Address != "" {
			plan.Drains = append(plan.Drains, Drain{ID: r.ID, Deadline: now.Add(DrainTimeout(spec)), Reason: r.Reason})
			plan.Phases[r.ID] = tidev1.PhaseDraining
		} else {
			plan.Terminations = append(plan.Terminations, Termination{ID: r.ID, Reason: r.Reason})
			plan.Phases[r.ID] = tidev1.PhaseTerminating
		}
	}
	if len(plan.Drains) > 0 && (plan.Requeue == 0 || plan.Requeue > drainPoll) {
		// Follow the drains just decided: they end once idle or at their
		// deadline, which only a round notices.
		plan.Requeue = drainPoll
	}
	if len(retired) > 0 {
		kept := plan.Targets[:0]
		for _, t := range plan.Targets {
			if !retired[t.ID] {
				kept = append(kept, t)
			}
		}
		plan.Targets = append([]registrar.Target(nil), kept...)
	}
	return true
}

// notePolicy records what the strategy resolved to when it changes.
func (p *Pool) notePolicy(s placement.Strategy, why string) {
	p.mu.Lock()
	same := p.policyWhy == why
	p.policyWhy = why
	p.mu.Unlock()
	if !same {
		p.deps.recorder.Eventf(events.TypeNormal, "Placement", p.name, "", "%s: %s", s, why)
	}
}

func (p *Pool) blockedUntil() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blocked
}
