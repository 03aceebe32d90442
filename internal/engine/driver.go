package engine

import (
	"context"
	"fmt"
	"sort"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// Driver runs one pool's rounds on the caller's goroutine, with no loop,
// timers or readiness probes of its own: the caller moves the clock,
// delivers the provider's events and says when an instance's server is
// ready. It is the same round a Manager's loop runs (observe → decide →
// apply), for a replay on a fake clock (internal/replay) and for tests;
// launches and starts are applied one after another, in the order decided,
// so that a replay is deterministic.
type Driver struct {
	m *Manager
	p *Pool
}

// NewDriver checks opts and returns a Driver of pool.
func NewDriver(opts Options, pool *tidev1.TidePool) (*Driver, error) {
	if pool == nil || pool.Name == "" {
		return nil, fmt.Errorf("engine: NewDriver needs a named pool")
	}
	m, err := NewManager(opts)
	if err != nil {
		return nil, err
	}
	m.deps.manualReady = true
	m.deps.serial = true
	m.Apply(pool)
	return &Driver{m: m, p: m.pools[pool.Name]}, nil
}

// Round runs one round now and returns when the pool wants the next one
// at the latest (its requeue, backoff or resync).
func (d *Driver) Round(ctx context.Context) time.Duration {
	// Drain the coalesced trigger: the caller decides when rounds run.
	select {
	case <-d.p.trigger:
	default:
	}
	return d.p.round(ctx)
}

// Event folds a provider event into the pool, as the Manager does.
func (d *Driver) Event(ev provider.Event) {
	if ev.Instance.Pool == d.p.name {
		d.p.handleEvent(ev)
	}
}

// Awaiting returns the instances whose readiness the pool waits for, by
// ID: those a Manager would be probing now.
func (d *Driver) Awaiting() []provider.Instance {
	p := d.p
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []provider.Instance
	for _, r := range p.tracked {
		if r.awaiting != nil && r.probe != nil {
			out = append(out, *r.awaiting)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// MarkReady says that an awaited instance's server answers, as a passing
// readiness probe does; it reports whether the pool was waiting for it.
func (d *Driver) MarkReady(id string) bool {
	p := d.p
	p.mu.Lock()
	r := p.tracked[id]
	var in provider.Instance
	ok := r != nil && r.awaiting != nil && r.probe != nil
	if ok {
		in = *r.awaiting
	}
	p.mu.Unlock()
	if !ok {
		return false
	}
	p.markReady(in)
	return true
}

// Status returns the pool's status after the last round.
func (d *Driver) Status() tidev1.TidePoolStatus { return d.p.Status() }
