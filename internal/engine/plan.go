// Package engine keeps pools of instances at their wanted size: a pure
// planner (Plan) decides from the spec, the observed instances and the time
// what to launch, drain, terminate and register; a per-pool loop (Pool)
// observes, plans and applies the plan through a provider.Provider and a
// registrar.Registrar, woken by provider events, readiness and timers, with
// a slow resync as a safety net and exponential backoff on errors. The same
// engine serves `tidegpu up` and the Kubernetes operator.
package engine

import (
	"fmt"
	"sort"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
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

// View is one instance as the planner sees it: what the provider reports
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
}

// since is when the instance's current start began: its launch, or its
// last start from standby.
func (v View) since() time.Time {
	if v.StartedAt.After(v.LaunchedAt) {
		return v.StartedAt
	}
	return v.LaunchedAt
}

// Input is everything a plan depends on.
type Input struct {
	Spec      *tidev1.TidePoolSpec
	Instances []View
	Now       time.Time
	// LaunchBlockedUntil holds launches back after failures (backoff).
	LaunchBlockedUntil time.Time
	// ExternalPlacement: a placement policy decides launches and scale-down
	// (zones, markets, spares); Compute keeps to readiness, drains,
	// terminations and targets.
	ExternalPlacement bool
}

// Drain asks to take an instance out of service gracefully.
type Drain struct {
	ID       string
	Deadline time.Time
	Reason   string
}

// Termination asks the provider to remove an instance.
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
}

// Plan is what to do now. Apply order: Targets first (so that nothing dead
// or leaving stays registered), then Drains, Terminations, Launches.
type Plan struct {
	// Targets is exactly the set the gateway should route this pool to.
	Targets      []registrar.Target
	Drains       []Drain
	Terminations []Termination
	Launches     []Launch
	// Starts are standby instances to start; Stops are instances to stop
	// into standby (already drained or never ready), in place of
	// terminating them.
	Starts []Start
	Stops  []Termination
	// Requeue is when to plan again at the latest (0: only on events).
	Requeue time.Duration
	// Desired, Serving and Ready summarise the pool for status; Standby
	// counts its stopped instances.
	Desired, Serving, Ready, Standby int32
	// Phases gives every live instance's phase for status.
	Phases map[string]string
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

// Compute plans one round for a pool. It is pure: the same input gives the
// same plan.
func Compute(in Input) Plan {
	spec := in.Spec
	now := in.Now
	p := Plan{Desired: spec.DesiredReplicas(), Phases: map[string]string{}}
	startTimeout := StartTimeout(spec)
	requeue := func(d time.Duration) {
		if d <= 0 {
			d = time.Millisecond
		}
		if p.Requeue == 0 || d < p.Requeue {
			p.Requeue = d
		}
	}

	var serving, draining []View
	for _, v := range in.Instances {
		switch {
		case v.State == provider.StateTerminating:
			p.Phases[v.ID] = tidev1.PhaseTerminating
		case v.State == provider.StateStopped || v.State == provider.StateStopping:
			// A warm standby: not serving, not starting, never timed out.
			p.Phases[v.ID] = tidev1.PhaseStandby
			p.Standby++
		case v.InterruptAt != nil || v.DrainDeadline != nil:
			deadline := drainDeadline(v)
			reason := "drain deadline reached"
			if v.InterruptAt != nil {
				reason = "reclaim deadline reached"
			}
			switch {
			case !now.Before(deadline):
				p.Terminations = append(p.Terminations, Termination{ID: v.ID, Reason: reason})
				p.Phases[v.ID] = tidev1.PhaseTerminating
			default:
				draining = append(draining, v)
				p.Phases[v.ID] = tidev1.PhaseDraining
			}
		case !v.Ready && now.Sub(v.since()) >= startTimeout:
			p.Terminations = append(p.Terminations, Termination{ID: v.ID,
				Reason: fmt.Sprintf("not ready %s after launch", startTimeout)})
			p.Phases[v.ID] = tidev1.PhaseTerminating
		default:
			serving = append(serving, v)
		}
	}

	// Scale down: leave the least useful instances first.
	if excess := len(serving) - int(p.Desired); excess > 0 && !in.ExternalPlacement {
		sort.SliceStable(serving, func(i, j int) bool { return lessUseful(serving[i], serving[j]) })
		for _, v := range serving[:excess] {
			if !v.Ready || v.Address == "" {
				p.Terminations = append(p.Terminations, Termination{ID: v.ID, Reason: "scale down (not ready yet)"})
				p.Phases[v.ID] = tidev1.PhaseTerminating
				continue
			}
			d := now.Add(DrainTimeout(spec))
			p.Drains = append(p.Drains, Drain{ID: v.ID, Deadline: d, Reason: fmt.Sprintf("scale down to %d", p.Desired)})
			v.DrainDeadline = &d
			draining = append(draining, v)
			p.Phases[v.ID] = tidev1.PhaseDraining
		}
		serving = serving[excess:]
	}
	sortByID(serving)

	for _, v := range serving {
		if v.Ready && v.Address != "" {
			p.Ready++
			p.Phases[v.ID] = tidev1.PhaseReady
			p.Targets = append(p.Targets, registrar.Target{ID: v.ID, Address: v.Address})
			continue
		}
		requeue(v.since().Add(startTimeout).Sub(now))
		if v.State == provider.StatePending {
			p.Phases[v.ID] = tidev1.PhasePending
		} else {
			p.Phases[v.ID] = tidev1.PhaseStarting
		}
	}
	p.Serving = int32(len(serving))

	// Draining instances. One under a reclaim notice keeps serving until
	// its replacement is Ready or its deadline comes, whichever is first:
	// the pool stays at its wanted size through the replacement's cold
	// start (a notice is 2 minutes; a cold start can be longer). A
	// scale-down drain serves only as a last resort, while nothing else is
	// ready. Otherwise a draining instance is terminated once idle or at
	// its deadline.
	need := int(p.Desired) - int(p.Ready)
	lastResort := p.Ready == 0
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
			p.Targets = append(p.Targets, registrar.Target{ID: v.ID, Address: v.Address})
			requeue(deadline.Sub(now))
			continue
		}
		if v.InFlight == 0 {
			p.Terminations = append(p.Terminations, Termination{ID: v.ID, Reason: "drained"})
			p.Phases[v.ID] = tidev1.PhaseTerminating
			continue
		}
		requeue(deadline.Sub(now))
		if v.InFlight > 0 {
			requeue(drainPoll)
		}
	}

	// Scale up / replace.
	if missing := int(p.Desired) - len(serving); missing > 0 && !in.ExternalPlacement {
		if now.Before(in.LaunchBlockedUntil) {
			requeue(in.LaunchBlockedUntil.Sub(now))
		} else {
			market := provider.MarketFor(spec.InstanceChargeType)
			for i := 0; i < missing; i++ {
				p.Launches = append(p.Launches, Launch{Market: market,
					Reason: fmt.Sprintf("%d of %d serving", len(serving)+i, p.Desired)})
			}
		}
	}
	return p
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
