package engine

import (
	"context"
	"errors"
	"fmt"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// stop stops an instance into standby. A provider that cannot stop (or
// refuses this instance) gets a termination instead, so that nothing is
// left running that the pool no longer wants.
func (p *Pool) stop(ctx context.Context, st Termination) error {
	d := p.deps
	s, ok := provider.As[provider.Stopper](d.provider)
	var err error
	if ok {
		err = s.Stop(ctx, st.ID)
		if err == nil {
			d.recorder.Eventf(events.TypeNormal, "Stopped", p.name, st.ID, "stopped %s into standby: %s", st.ID, st.Reason)
			return nil
		}
	} else {
		err = provider.ErrNotSupported
	}
	var one *provider.NotStoppableError
	if errors.Is(err, provider.ErrNotSupported) && !errors.As(err, &one) {
		// Not this provider (or not in this mode): no standby from now on.
		// A NotStoppableError is about one instance only.
		p.mu.Lock()
		p.noStandby = true
		p.mu.Unlock()
	}
	d.recorder.Eventf(events.TypeWarning, "StopFailed", p.name, st.ID, "cannot stop %s into standby (%v): terminating it instead", st.ID, err)
	if terr := d.provider.Terminate(ctx, st.ID); terr != nil {
		return fmt.Errorf("terminating %s after a failed stop: %w", st.ID, terr)
	}
	return nil
}

// start starts standby instances, concurrently unless deps.serial, and
// returns those started; a start refused for capacity skips the offering
// for a while, so that the next round launches elsewhere instead.
func (p *Pool) start(ctx context.Context, ss []Start) []provider.Instance {
	if len(ss) == 0 {
		return nil
	}
	s, ok := provider.As[provider.Stopper](p.deps.provider)
	if !ok {
		return nil
	}
	outs := make([]*provider.Instance, len(ss))
	p.each(len(ss), func(i int) { outs[i] = p.startOne(ctx, s, ss[i]) })
	var started []provider.Instance
	for _, in := range outs {
		if in != nil {
			started = append(started, *in)
		}
	}
	return started
}

// startOne starts one standby instance; nil if it did not start.
func (p *Pool) startOne(ctx context.Context, s provider.Stopper, st Start) *provider.Instance {
	d := p.deps
	in, err := s.Start(ctx, st.ID)
	p.mu.Lock()
	mem := p.capMem
	p.mu.Unlock()
	if mem != nil && st.Zone != "" {
		mem.Observe(placement.Key{Zone: st.Zone, InstanceType: st.InstanceType, Market: provider.MarketOnDemand}, err)
	}
	if err != nil {
		d.recorder.Eventf(events.TypeWarning, "StartFailed", p.name, st.ID, "starting standby %s failed: %v", st.ID, err)
		return nil
	}
	d.metrics.launches.WithLabelValues(p.name, string(in.Market)).Inc()
	d.recorder.Eventf(events.TypeNormal, "Started", p.name, in.ID, "started standby %s at %s: %s", in.ID, orDash(in.Address), st.Reason)
	p.mu.Lock()
	p.rec(in.ID).startedAt = d.clock.Now()
	p.mu.Unlock()
	return &in
}

// standbyUsable says whether the pool's provider can keep a warm standby;
// it records once why not when the spec asks for one.
func (p *Pool) standbyUsable(spec *tidev1.TidePoolSpec) bool {
	if StandbyFor(spec, spec.DesiredReplicas()) == 0 {
		return false
	}
	p.mu.Lock()
	no := p.noStandby
	p.mu.Unlock()
	if _, ok := provider.As[provider.Stopper](p.deps.provider); ok && !no {
		return true
	}
	p.mu.Lock()
	warned := p.standbyWarned
	p.standbyWarned = true
	p.mu.Unlock()
	if !warned && spec.Placement.Standby != nil {
		p.deps.recorder.Eventf(events.TypeWarning, "StandbyUnsupported", p.name, "",
			"spec.placement.standby: provider %s cannot stop instances; the pool runs without a warm standby", p.deps.provider.Name())
	}
	return false
}
