package engine

import (
	"context"
	"time"

	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// tracked is what the engine knows of one instance beyond what the
// provider reports. It lives as long as the instance runs: forget drops it
// once the instance is gone, and once it is stopped into standby (started
// again, it must pass its readiness probe again).
type tracked struct {
	// ready: its readiness probe passed.
	ready bool
	// drainDeadline is set while the engine drains it.
	drainDeadline *time.Time
	// notice is the reclaim time an agent on the instance reported.
	notice *time.Time
	// stopAfterDrain: an on-demand instance retired into standby; once
	// drained it is stopped, not terminated.
	stopAfterDrain bool
	// startedAt is when the engine last started it from standby.
	startedAt time.Time
	// probe stops its readiness probe (nil: none runs). With
	// deps.manualReady there is no probe: awaiting holds the instance
	// until Driver.MarkReady.
	probe    context.CancelFunc
	awaiting *provider.Instance
}

// rec returns id's record, creating it; p.mu is held.
func (p *Pool) rec(id string) *tracked {
	r := p.tracked[id]
	if r == nil {
		r = &tracked{}
		p.tracked[id] = r
	}
	return r
}

// stopProbe stops r's readiness probe, if one runs; p.mu is held.
func (r *tracked) stopProbe() {
	if r.probe != nil {
		r.probe()
	}
	r.probe, r.awaiting = nil, nil
}

// forget drops the records of the instances that do not run: those not in
// insts, and those stopped or stopping. p.mu is held.
func (p *Pool) forget(insts []provider.Instance) {
	live := map[string]bool{}
	for _, in := range insts {
		live[in.ID] = in.State != provider.StateStopped && in.State != provider.StateStopping
	}
	for id, r := range p.tracked {
		if !live[id] {
			r.stopProbe()
			delete(p.tracked, id)
		}
	}
}

// view is in as the decision sees it, with what the engine knows of it;
// p.mu is held.
func (p *Pool) view(in provider.Instance) View {
	v := View{Instance: in, InFlight: -1}
	if r := p.tracked[in.ID]; r != nil {
		v.Ready, v.StartedAt, v.StopAfterDrain = r.ready, r.startedAt, r.stopAfterDrain
		if r.drainDeadline != nil {
			dl := *r.drainDeadline
			v.DrainDeadline = &dl
		}
		if r.notice != nil && (v.InterruptAt == nil || r.notice.Before(*v.InterruptAt)) {
			at := *r.notice
			v.InterruptAt = &at
		}
	}
	if rep, ok := p.deps.registrar.(registrar.InFlightReporter); ok {
		v.InFlight = rep.InFlight(in.ID)
	}
	return v
}
