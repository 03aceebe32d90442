// Package engine keeps pools of instances at their wanted size. Each pool's
// round is observe → decide → apply: observe (Pool.observe) lists the
// pool's instances from the provider and gathers everything else the round
// depends on into a Snapshot (what the engine knows of each instance, the
// offerings from one cache, the capacity memory as a read-only view, the
// effective spec after autoscaling and the budget hold, the clock); Decide,
// a pure function, turns the Snapshot into a Decision holding every
// command of the round with its reason (targets, drains, terminations,
// stops, starts, launches, recalls, capacity memory updates, probes,
// requeue), placement included; apply (Pool.apply) only executes it
// through a provider.Provider and a registrar.Registrar and folds the
// outcomes (failed launches into the capacity memory and the launch
// backoff). A per-pool loop (Pool) runs rounds when woken by provider
// events, readiness and timers, with a slow resync as a safety net and
// exponential backoff on errors; a Driver runs the same round on the
// caller's goroutine. The same engine serves `tidegpu up` and the
// Kubernetes operator.
package engine

import (
	"fmt"
	"sort"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// Default timings.
const (
	// DefaultDrain bounds a scale-down drain when spec.drainSeconds is unset.
	DefaultDrain = 30 * time.Second
	// DefaultLocalStartTimeout bounds a local instance's start.
	DefaultLocalStartTimeout = 60 * time.Second
	// DefaultCloudStartTimeout bounds a cloud instance's boot and start.
	DefaultCloudStartTimeout = 15 * time.Minute
)

// View is one instance as the decision sees it: what the provider reports
// plus what the engine knows of it.
type View struct {
	provider.Instance
	// Ready: its readiness probe has passed.
	Ready bool
	// DrainDeadline is set when the engine decided to drain it (scale-down);
	// the instance is terminated at the deadline or once idle.
	DrainDeadline *time.Time
	// InFlight is the number of requests it still serves, -1 when unknown.
	InFlight int
	// StartedAt is when the engine last started it from standby (zero:
	// never). Providers may keep the first launch time in LaunchedAt (CVM's
	// CreatedTime does), so the start timeout counts from the later one.
	StartedAt time.Time
	// StopAfterDrain: it drains on its way into standby; once drained it
	// is stopped, not terminated, and placement counts it as standby.
	StopAfterDrain bool
}

// since is when the instance's current start began: its launch, or its
// last start from standby.
func (v View) since() time.Time {
	if v.StartedAt.After(v.LaunchedAt) {
		return v.StartedAt
	}
	return v.LaunchedAt
}

// Memory is the capacity memory as a decision reads it: read only, able
// to preview the Accrue the decision asks for (*placement.CapacityMemory).
type Memory interface {
	placement.Memory
	// Accrued reads as the memory will once Accrue(held) is applied now.
	Accrued(held map[placement.Key]int) placement.Memory
}

var _ Memory = (*placement.CapacityMemory)(nil)

// Snapshot is everything a round's decision depends on, observed at Now.
type Snapshot struct {
	// Spec is the effective spec: the pool's, with the autoscaler's size
	// and the budget's hold at the minimum.
	Spec       *tidev1.TidePoolSpec
	Generation int64
	Instances  []View
	Now        time.Time
	// LaunchBlockedUntil holds launches (and placement's retirements)
	// back after failed launches (backoff).
	LaunchBlockedUntil time.Time
	// Placed: the pool is placed (spec.placement on a provider that
	// reports offerings) and its offerings are known; placement then
	// decides launches and scale-down. Otherwise the pool launches on the
	// spec's own offering.
	Placed    bool
	Offerings []provider.Offering
	// Memory is the capacity memory (set when Placed).
	Memory Memory
	// StandbyUsable: the provider can keep the warm standby the spec asks
	// for.
	StandbyUsable bool
	// Weights are the balancer's weights by instance ID.
	Weights map[string]int32
	// Lost are instances lost without notice since the last launches, by
	// ID, for the launches' "replacing" notes.
	Lost []string
	// Requeue is when to look again at the latest for what is outside the
	// decision (the autoscaler's pace, the balancing-signal condition, the
	// budget's pace); 0: none.
	Requeue time.Duration
}

// Drain asks to take an instance out of service gracefully.
type Drain struct {
	ID       string
	Deadline time.Time
	Reason   string
	// IntoStandby: once drained, the instance is stopped into standby.
	IntoStandby bool
}

// Termination asks the provider to remove an instance (or, in
// Decision.Stops, to stop it into standby).
type Termination struct {
	ID     string
	Reason string
}

// Start asks the provider to start a stopped standby instance (in place of
// an on-demand launch).
type Start struct {
	ID string
	// Zone and InstanceType are the instance's, for the capacity memory.
	Zone, InstanceType string
	Reason             string
}

// Launch asks the provider for one more instance.
type Launch struct {
	Market provider.Market
	// Zone and InstanceType choose the offering; empty means the spec's.
	Zone, InstanceType string
	Reason             string
	// Replacing names an instance lost without notice that this launch
	// replaces (for its event only).
	Replacing string
}

// Recall asks an instance draining on its way into standby to serve
// again: its drain ends and it is not stopped.
type Recall struct {
	ID     string
	Reason string
}

// MemoryUpdate asks to change the capacity memory.
type MemoryUpdate struct {
	// Held is the live spot the pool holds per offering: its exposure
	// since the last update is accrued (CapacityMemory.Accrue).
	Held   map[placement.Key]int
	Reason string
}

// Decision is every command of a round, as plain data. Apply order:
// Targets first (so that nothing dead or leaving stays registered), then
// Drains, Stops and Terminations, Starts and Launches, Probes.
type Decision struct {
	// Targets is exactly the set the gateway should route this pool to.
	Targets      []registrar.Target
	Drains       []Drain
	Terminations []Termination
	// Stops are instances to stop into standby (drained, or never
	// ready), in place of terminating them; Starts are standby instances
	// to start.
	Stops    []Termination
	Starts   []Start
	Launches []Launch
	Recalls  []Recall
	Memory   []MemoryUpdate
	// Probes are running instances whose readiness to probe.
	Probes []provider.Instance
	// Requeue is when to decide again at the latest (0: only on events).
	Requeue time.Duration
	// Desired, Serving and Ready summarise the pool for status; Standby
	// counts its stopped instances as observed.
	Desired, Serving, Ready, Standby int32
	// Phases gives every live instance's phase for status.
	Phases map[string]string
	// Strategy and Policy are the placement strategy and the line it
	// resolved to, for the "Placement" event (empty: not placed).
	Strategy placement.Strategy
	Policy   string
}

// StartTimeout is how long an instance of spec may take to become ready.
func StartTimeout(spec *tidev1.TidePoolSpec) time.Duration {
	if spec.Local != nil && spec.Local.StartTimeoutSeconds != nil {
		return time.Duration(*spec.Local.StartTimeoutSeconds) * time.Second
	}
	if spec.Provider == tidev1.ProviderLocal || spec.Provider == tidev1.ProviderSim {
		return DefaultLocalStartTimeout
	}
	return DefaultCloudStartTimeout
}

// DrainTimeout is how long a scale-down drain may last.
func DrainTimeout(spec *tidev1.TidePoolSpec) time.Duration {
	if spec.DrainSeconds != nil {
		return time.Duration(*spec.DrainSeconds) * time.Second
	}
	return DefaultDrain
}

// drainPoll is how often a pool with busy draining instances looks again.
const drainPoll = 200 * time.Millisecond

// Decide decides one round for a pool. It is pure: the same snapshot
// gives the same decision, and it changes nothing it reads (the capacity
// memory's changes come back as Decision.Memory).
func Decide(s Snapshot) Decision {
	d := &decision{s: s, Decision: Decision{Desired: s.Spec.DesiredReplicas(), Phases: map[string]string{}}}
	serving, draining := d.classify()
	var pl placed
	if s.Placed {
		pl = d.place()
	} else {
		serving, draining = d.scaleDown(serving, draining)
	}
	sortByID(serving)
	d.serve(serving, pl.retired)
	d.serveDraining(draining, pl.retired)
	if s.Placed {
		d.translate(pl)
	} else {
		d.launchMissing(len(serving))
	}
	d.settle()
	return d.Decision
}

// decision is a Decision being assembled from its snapshot.
type decision struct {
	s Snapshot
	Decision
}

// requeue asks to decide again within after at the latest.
func (d *decision) requeue(after time.Duration) {
	if after <= 0 {
		after = time.Millisecond
	}
	if d.Requeue == 0 || after < d.Requeue {
		d.Requeue = after
	}
}

func (d *decision) terminate(id, reason string) {
	d.Terminations = append(d.Terminations, Termination{ID: id, Reason: reason})
	d.Phases[id] = tidev1.PhaseTerminating
}

// classify gives every instance its phase, terminates those past their
// drain or reclaim deadline and those not ready within the start timeout,
// and returns those that serve (or start) and those that drain.
func (d *decision) classify() (serving, draining []View) {
	now, startTimeout := d.s.Now, StartTimeout(d.s.Spec)
	for _, v := range d.s.Instances {
		switch {
		case v.State == provider.StateTerminating:
			d.Phases[v.ID] = tidev1.PhaseTerminating
		case v.State == provider.StateStopped || v.State == provider.StateStopping:
			// A warm standby: not serving, not starting, never timed out.
			d.Phases[v.ID] = tidev1.PhaseStandby
			d.Standby++
		case v.InterruptAt != nil || v.DrainDeadline != nil:
			if now.Before(drainDeadline(v)) {
				draining = append(draining, v)
				d.Phases[v.ID] = tidev1.PhaseDraining
				continue
			}
			reason := "drain deadline reached"
			if v.InterruptAt != nil {
				reason = "reclaim deadline reached"
			}
			d.terminate(v.ID, reason)
		case !v.Ready && now.Sub(v.since()) >= startTimeout:
			d.terminate(v.ID, fmt.Sprintf("not ready %s after launch", startTimeout))
		default:
			serving = append(serving, v)
		}
	}
	return serving, draining
}

// scaleDown (an unplaced pool) takes the least useful instances beyond the
// wanted size out: not ready ones are terminated, ready ones drained.
func (d *decision) scaleDown(serving, draining []View) ([]View, []View) {
	excess := len(serving) - int(d.Desired)
	if excess <= 0 {
		return serving, draining
	}
	sort.SliceStable(serving, func(i, j int) bool { return lessUseful(serving[i], serving[j]) })
	for _, v := range serving[:excess] {
		if !v.Ready || v.Address == "" {
			d.terminate(v.ID, "scale down (not ready yet)")
			continue
		}
		dl := d.s.Now.Add(DrainTimeout(d.s.Spec))
		d.Drains = append(d.Drains, Drain{ID: v.ID, Deadline: dl, Reason: fmt.Sprintf("scale down to %d", d.Desired)})
		v.DrainDeadline = &dl
		draining = append(draining, v)
		d.Phases[v.ID] = tidev1.PhaseDraining
	}
	return serving[excess:], draining
}

// serve makes the ready serving instances targets (but those placement
// retires) and waits for the others' start timeout.
func (d *decision) serve(serving []View, retired map[string]bool) {
	startTimeout := StartTimeout(d.s.Spec)
	for _, v := range serving {
		if v.Ready && v.Address != "" {
			d.Ready++
			d.Phases[v.ID] = tidev1.PhaseReady
			if !retired[v.ID] {
				d.Targets = append(d.Targets, registrar.Target{ID: v.ID, Address: v.Address})
			}
			continue
		}
		d.requeue(v.since().Add(startTimeout).Sub(d.s.Now))
		if v.State == provider.StatePending {
			d.Phases[v.ID] = tidev1.PhasePending
		} else {
			d.Phases[v.ID] = tidev1.PhaseStarting
		}
	}
	d.Serving = int32(len(serving))
}

// serveDraining decides the draining instances. One under a reclaim
// notice keeps serving until its replacement is Ready or its deadline
// comes, whichever is first: the pool stays at its wanted size through the
// replacement's cold start (a notice is 2 minutes; a cold start can be
// longer). A scale-down drain serves only as a last resort, while nothing
// else is ready. Otherwise a draining instance is terminated once idle or
// at its deadline.
func (d *decision) serveDraining(draining []View, retired map[string]bool) {
	need := int(d.Desired) - int(d.Ready)
	lastResort := d.Ready == 0
	sort.SliceStable(draining, func(i, j int) bool {
		di, dj := drainDeadline(draining[i]), drainDeadline(draining[j])
		if !di.Equal(dj) {
			return di.After(dj) // the one that stays longest serves first
		}
		return draining[i].ID < draining[j].ID
	})
	for _, v := range draining {
		deadline := drainDeadline(v)
		if need > 0 && v.Ready && v.Address != "" && (v.InterruptAt != nil || lastResort) {
			need--
			if !retired[v.ID] {
				d.Targets = append(d.Targets, registrar.Target{ID: v.ID, Address: v.Address})
			}
			d.requeue(deadline.Sub(d.s.Now))
			continue
		}
		if v.InFlight == 0 {
			d.terminate(v.ID, "drained")
			continue
		}
		d.requeue(deadline.Sub(d.s.Now))
		if v.InFlight > 0 {
			d.requeue(drainPoll)
		}
	}
}

// launchMissing (an unplaced pool) launches on the spec's own offering
// what the pool lacks, unless launches are backed off.
func (d *decision) launchMissing(serving int) {
	missing := int(d.Desired) - serving
	if missing <= 0 {
		return
	}
	if d.s.Now.Before(d.s.LaunchBlockedUntil) {
		d.requeue(d.s.LaunchBlockedUntil.Sub(d.s.Now))
		return
	}
	market := provider.MarketFor(d.s.Spec.InstanceChargeType)
	for i := 0; i < missing; i++ {
		d.Launches = append(d.Launches, Launch{Market: market,
			Reason: fmt.Sprintf("%d of %d serving", serving+i, d.Desired)})
	}
}

// settle finishes the decision: a drained instance on its way into
// standby is stopped, not terminated, and one recalled this round is
// neither (it serves again); the targets carry their weights and
// models; the outside requeue counts; the launches name whom they replace;
// running instances not ready are probed.
func (d *decision) settle() {
	var terms []Termination
	for _, t := range d.Terminations {
		if d.recalled(t.ID) {
			d.Phases[t.ID] = tidev1.PhaseDraining
			continue
		}
		if d.intoStandby(t.ID) {
			d.Stops = append(d.Stops, Termination{ID: t.ID, Reason: "drained into standby"})
			d.Phases[t.ID] = tidev1.PhaseStandby
			continue
		}
		terms = append(terms, t)
	}
	d.Terminations = terms
	if d.s.Requeue > 0 {
		d.requeue(d.s.Requeue)
	}
	for i := range d.Targets {
		d.Targets[i].Weight = int(d.s.Weights[d.Targets[i].ID])
		d.Targets[i].Models = d.s.Spec.Serving.Models
		d.Targets[i].Metrics = d.s.Spec.Serving.Metrics
	}
	for i := range d.Launches {
		if i < len(d.s.Lost) {
			d.Launches[i].Replacing = d.s.Lost[i]
		}
	}
	for _, v := range d.s.Instances {
		if v.State == provider.StateRunning && v.Address != "" && !v.Ready && d.Phases[v.ID] != tidev1.PhaseTerminating {
			d.Probes = append(d.Probes, v.Instance)
		}
	}
}

// recalled says whether this round recalls id into service.
func (d *decision) recalled(id string) bool {
	for _, r := range d.Recalls {
		if r.ID == id {
			return true
		}
	}
	return false
}

// intoStandby says whether id, once drained, goes into standby: it was on
// its way there and is not recalled, or this round retires it there.
func (d *decision) intoStandby(id string) bool {
	if d.recalled(id) {
		return false
	}
	for _, dr := range d.Drains {
		if dr.ID == id && dr.IntoStandby {
			return true
		}
	}
	for _, v := range d.s.Instances {
		if v.ID == id {
			return v.StopAfterDrain
		}
	}
	return false
}

func drainDeadline(v View) time.Time {
	switch {
	case v.InterruptAt != nil && v.DrainDeadline != nil:
		if v.InterruptAt.Before(*v.DrainDeadline) {
			return *v.InterruptAt
		}
		return *v.DrainDeadline
	case v.InterruptAt != nil:
		return *v.InterruptAt
	default:
		return *v.DrainDeadline
	}
}

// lessUseful orders instances for scale-down: not ready before ready,
// on-demand before spot (it costs more), then the youngest first (the
// oldest has proved itself and holds warm caches).
func lessUseful(a, b View) bool {
	if a.Ready != b.Ready {
		return !a.Ready
	}
	if (a.Market == provider.MarketOnDemand) != (b.Market == provider.MarketOnDemand) {
		return a.Market == provider.MarketOnDemand
	}
	if !a.LaunchedAt.Equal(b.LaunchedAt) {
		return a.LaunchedAt.After(b.LaunchedAt)
	}
	return a.ID > b.ID
}

func sortByID(vs []View) {
	sort.Slice(vs, func(i, j int) bool { return vs[i].ID < vs[j].ID })
}
