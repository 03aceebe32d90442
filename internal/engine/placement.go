package engine

import (
	"strconv"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
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
// Adaptive strategy (none for the others); a pool at zero that may scale
// to zero keeps one under Adaptive.
func StandbyFor(spec *tidev1.TidePoolSpec, want int32) int {
	pl := spec.Placement
	if pl == nil {
		return 0
	}
	if pl.Standby != nil {
		return int(*pl.Standby)
	}
	if s, _ := StrategyOf(spec); s == placement.Adaptive {
		n := int(max(0, want-min(want, pl.OnDemandBase)))
		if want == 0 && spec.Minimum == 0 && spec.Autoscaling != nil {
			// A pool at zero keeps one stopped instance: its wake-up is a
			// warm start.
			n = 1
		}
		return n
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
func timingOf(spec *tidev1.TidePoolSpec, mem placement.Memory) placement.Timing {
	t := placement.DefaultTiming(spec.Provider)
	if spec.Provider == tidev1.ProviderSim && spec.Sim != nil && spec.Sim.NoticeSeconds != nil {
		t.Notice = time.Duration(*spec.Sim.NoticeSeconds) * time.Second
	}
	if mem == nil {
		return t
	}
	return t.Merge(mem.Timing())
}

// offeringsRefresh paces offering look-ups for placement.
const offeringsRefresh = 15 * time.Second

// placed is the placement part of a round's decision: the policy the
// strategy resolved to and what it decided (zero while launches are backed
// off: nothing is placed or retired then).
type placed struct {
	policy  placement.Policy
	dec     placement.Decision
	retired map[string]bool
	decided bool
}

// place lets the pool's strategy resolve a policy and the policy decide
// launches (zone, type, market), standby starts and retirements, over the
// instances as classified so far. It asks to accrue the round's spot
// exposure into the capacity memory, and plans with it accrued.
func (d *decision) place() placed {
	s := d.s
	insts := placementInstances(s.Instances, d.Terminations)
	if s.Now.Before(s.LaunchBlockedUntil) {
		// Launches wait for the backoff, retirements too; look again then.
		d.requeue(s.LaunchBlockedUntil.Sub(s.Now))
		return placed{}
	}
	held := heldSpot(insts)
	d.Memory = append(d.Memory, MemoryUpdate{Held: held, Reason: "spot exposure held this round"})
	var mem placement.Memory
	if s.Memory != nil {
		mem = s.Memory.Accrued(held)
	}
	standby := 0
	if s.StandbyUsable {
		standby = StandbyFor(s.Spec, d.Desired)
	}
	strategy, _ := StrategyOf(s.Spec)
	pl := s.Spec.Placement
	in := placement.Input{Want: int(d.Desired), Instances: insts, Offerings: s.Offerings, Memory: mem}
	pol, why := strategy.Resolve(placement.Env{Want: int(d.Desired), OnDemandBase: int(pl.OnDemandBase),
		Zones: pl.AvailabilityZones, Standby: standby, Target: TargetOf(s.Spec), Timing: timingOf(s.Spec, mem)}, in)
	d.Strategy, d.Policy = strategy, why
	dec := pol.Decide(in)
	retired := map[string]bool{}
	for _, r := range dec.Retires {
		retired[r.ID] = true
	}
	return placed{policy: pol, dec: dec, retired: retired, decided: true}
}

// placementInstances is the pool as placement sees it. An instance
// leaving (terminated this round, terminating, noticed, draining) counts
// for nothing; one draining on its way into standby is standby already (a
// start recalls it).
func placementInstances(views []View, leaving []Termination) []placement.Instance {
	gone := map[string]bool{}
	for _, t := range leaving {
		gone[t.ID] = true
	}
	out := make([]placement.Instance, 0, len(views))
	for _, v := range views {
		in := placement.Instance{ID: v.ID, Zone: v.Zone, InstanceType: v.InstanceType, Market: v.Market,
			Ready: v.Ready, LaunchedAt: v.LaunchedAt, Stopped: v.State == provider.StateStopped || v.State == provider.StateStopping,
			Leaving: gone[v.ID] || v.State == provider.StateTerminating || v.InterruptAt != nil || v.DrainDeadline != nil}
		if v.StopAfterDrain && !in.Stopped && v.State != provider.StateTerminating {
			in.Stopped, in.Leaving, in.Ready = true, false, false
		}
		out = append(out, in)
	}
	return out
}

// heldSpot counts the live spot instances per offering.
func heldSpot(insts []placement.Instance) map[placement.Key]int {
	held := map[placement.Key]int{}
	for _, x := range insts {
		if !x.Leaving && !x.Stopped && x.Market != provider.MarketOnDemand {
			held[placement.Key{Zone: x.Zone, InstanceType: x.InstanceType, Market: x.Market}]++
		}
	}
	return held
}

// translate turns placement's decision into the round's commands.
func (d *decision) translate(pl placed) {
	if !pl.decided {
		return
	}
	for _, l := range pl.dec.Launches {
		d.Launches = append(d.Launches, Launch{Market: l.Market, Zone: l.Zone, InstanceType: l.InstanceType, Reason: l.Reason})
	}
	d.startStandby(pl.dec.Starts)
	d.retire(pl.dec.Retires, pl.policy.Standby > 0)
	if len(d.Drains) > 0 {
		// Follow the drains just decided: they end once idle or at their
		// deadline, which only a round notices.
		d.requeue(drainPoll)
	}
}

// startStandby starts the stopped standby instances placement chose,
// waits for those still stopping, and recalls those still draining on
// their way into standby.
func (d *decision) startStandby(starts []placement.Start) {
	for _, st := range starts {
		v := d.byID(st.ID)
		switch v.State {
		case provider.StateStopped:
			d.Starts = append(d.Starts, Start{ID: st.ID, Zone: v.Zone, InstanceType: v.InstanceType, Reason: st.Reason})
			d.Phases[st.ID] = tidev1.PhasePending
		case provider.StateStopping:
			// It must be stopped before it can start: look again soon.
			d.requeue(time.Second)
		default:
			d.Recalls = append(d.Recalls, Recall{ID: st.ID, Reason: st.Reason})
			// Look again at once: it serves again.
			d.Requeue = time.Millisecond
		}
	}
}

// retire takes out the instances placement retires: a ready one drains
// (then is stopped into standby when placement says so and the pool keeps
// one), one not ready is stopped or terminated at once.
func (d *decision) retire(retires []placement.Retire, standby bool) {
	for _, r := range retires {
		v := d.byID(r.ID)
		serves := v.Ready && v.Address != ""
		dl := d.s.Now.Add(DrainTimeout(d.s.Spec))
		switch {
		case r.Stop && standby && serves:
			d.Drains = append(d.Drains, Drain{ID: r.ID, Deadline: dl, Reason: r.Reason + " (then stopped into standby)", IntoStandby: true})
			d.Phases[r.ID] = tidev1.PhaseDraining
		case r.Stop && standby:
			d.Stops = append(d.Stops, Termination{ID: r.ID, Reason: r.Reason})
			d.Phases[r.ID] = tidev1.PhaseStandby
		case serves:
			d.Drains = append(d.Drains, Drain{ID: r.ID, Deadline: dl, Reason: r.Reason})
			d.Phases[r.ID] = tidev1.PhaseDraining
		default:
			d.terminate(r.ID, r.Reason)
		}
	}
}

// byID returns the snapshot's view of id (zero if unknown).
func (d *decision) byID(id string) View {
	for _, v := range d.s.Instances {
		if v.ID == id {
			return v
		}
	}
	return View{}
}
