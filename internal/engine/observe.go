package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// observe gathers the round's Snapshot: the pool's instances from the
// provider with what the engine knows of each, the effective spec (after
// the autoscaler and the budget hold, which it runs), the offerings from
// the pool's one cache, the capacity memory, the launch backoff, the
// balancer's weights and the time.
func (p *Pool) observe(ctx context.Context) (Snapshot, error) {
	d := p.deps
	insts, err := d.provider.List(ctx, p.name)
	if err != nil {
		msg := fmt.Sprintf("cannot list the pool's instances from provider %s: %v", d.provider.Name(), err)
		p.setCondition(tidev1.ConditionCapacityAvailable, metav1.ConditionUnknown, "ProviderUnreachable", msg)
		p.setCondition(tidev1.ConditionReady, metav1.ConditionFalse, "ProviderUnreachable", msg)
		return Snapshot{}, fmt.Errorf("listing instances of pool %s: %w", p.name, err)
	}
	s := Snapshot{Now: d.clock.Now(), Instances: make([]View, 0, len(insts))}
	p.mu.Lock()
	spec := *p.spec.DeepCopy()
	s.Generation = p.generation
	p.forget(insts)
	for _, in := range insts {
		s.Instances = append(s.Instances, p.view(in))
	}
	s.LaunchBlockedUntil = p.blocked
	s.Weights = maps.Clone(p.weights)
	s.Lost = slices.Sorted(maps.Keys(p.lost))
	p.mu.Unlock()

	current, ready := counted(s.Instances)
	autoDesired, autoOK, autoRequeue := p.autoscale(&spec, current, ready, s.Now)
	if autoOK {
		spec.Replicas = &autoDesired
	}
	offers, known := p.offerings(ctx, &spec, s.Now)
	if hold := p.recordCost(&spec, insts, s.Now); s.Now.Before(hold) && spec.DesiredReplicas() > spec.Minimum {
		// CapAtMinimum: the budget is spent; hold the pool at its minimum
		// until the next period.
		m := spec.Minimum
		spec.Replicas = &m
	}
	s.Spec = &spec
	if p.placedOn(&spec) {
		s.Placed, s.Offerings = known, offers
		s.StandbyUsable = StandbyFor(&spec, spec.DesiredReplicas()) > 0 && p.standbyUsable(&spec)
		p.mu.Lock()
		s.Memory = p.capMem
		p.mu.Unlock()
	}
	s.Requeue = p.pace(&spec, autoRequeue)
	return s, nil
}

// counted returns the instances that count toward the pool's size (live,
// neither noticed nor draining) and how many of them are ready.
func counted(views []View) (current, ready int32) {
	for _, v := range views {
		if v.State != provider.StateTerminating && v.State != provider.StateStopped && v.State != provider.StateStopping &&
			v.InterruptAt == nil && v.DrainDeadline == nil {
			current++
			if v.Ready {
				ready++
			}
		}
	}
	return current, ready
}

// placedOn says whether placement decides the pool's launches: the spec
// asks for it and the provider reports offerings. It makes the capacity
// memory the first time.
func (p *Pool) placedOn(spec *tidev1.TidePoolSpec) bool {
	_, placed := StrategyOf(spec)
	_, src := provider.As[provider.OfferingSource](p.deps.provider)
	if !placed || !src {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.capMem == nil {
		p.capMem = placement.NewCapacityMemory(p.deps.clock, 0)
		p.capMem.SetLearning(p.deps.learning)
	}
	return true
}

// livePricesEvery paces offering look-ups of a pool that wants them for
// live prices only.
const livePricesEvery = time.Minute

// offerings returns the pool's offerings from its one cache, refreshed
// every offeringsRefresh for a placed pool (every livePricesEvery for one
// that needs them for live prices only), and whether any are known. A
// failed refresh keeps the last ones.
func (p *Pool) offerings(ctx context.Context, spec *tidev1.TidePoolSpec, now time.Time) ([]provider.Offering, bool) {
	src, ok := provider.As[provider.OfferingSource](p.deps.provider)
	_, placed := StrategyOf(spec)
	c := p.deps.costing
	live := c != nil && c.Ledger != nil && c.Live != nil
	if !ok || (!placed && !live) {
		return nil, false
	}
	every := offeringsRefresh
	if !placed {
		every = livePricesEvery
	}
	p.mu.Lock()
	offers, at := p.offers, p.offersAt
	p.mu.Unlock()
	if offers != nil && now.Sub(at) < every {
		return offers, true
	}
	fresh, err := src.Offerings(ctx, spec)
	if err != nil {
		if offers == nil && placed {
			p.deps.logger.Warn("offerings unavailable: placing on the spec's own offering", "pool", p.name, "err", err)
		}
		return offers, offers != nil
	}
	p.mu.Lock()
	p.offers, p.offersAt = fresh, now
	p.mu.Unlock()
	return fresh, true
}

// pace is when the pool must look again for what is outside the decision:
// the autoscaler's next evaluation, the balancing-signal condition (it
// follows the gateway's view), the budget's next evaluation.
func (p *Pool) pace(spec *tidev1.TidePoolSpec, autoRequeue time.Duration) time.Duration {
	requeue := autoRequeue
	sooner := func(d time.Duration) {
		if requeue == 0 || d < requeue {
			requeue = d
		}
	}
	if _, ok := p.deps.signals.(SignalHealth); ok {
		sooner(AutoscaleEvery)
	}
	if spec.Budget != nil && p.deps.costing != nil {
		every := p.deps.costing.BudgetEvery
		if every <= 0 {
			every = 2 * time.Second
		}
		sooner(every)
	}
	return requeue
}
