package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// apply executes a round's decision, in order: what the engine itself
// keeps (the placement line, the capacity memory, recalls), the gateway's
// targets (nothing dead or leaving stays registered), drains, stops and
// terminations, standby starts and launches, readiness probes, status. It
// decides nothing; it folds the outcomes (failed launches into the
// capacity memory and the launch backoff) and says when to look again.
func (p *Pool) apply(ctx context.Context, s Snapshot, d Decision) (time.Duration, error) {
	p.keep(d)
	syncErr := p.syncTargets(ctx, d.Targets)
	p.drain(d.Drains)
	errs := p.remove(ctx, d.Stops, d.Terminations)
	started := p.start(ctx, d.Starts)
	launched := append(p.launch(ctx, s.Spec, d.Launches, s.Lost), started...)
	path := s.Spec.Serving.ReadinessPath
	for _, in := range d.Probes {
		p.startProbe(ctx, in, path)
	}
	for _, in := range launched {
		if in.State == provider.StateRunning && in.Address != "" {
			p.startProbe(ctx, in, path)
		}
	}
	p.noteSignals()
	p.writeStatus(s.Generation, s.Instances, launched, d)
	if syncErr != nil {
		errs = append(errs, fmt.Errorf("syncing gateway: %w", syncErr))
	}
	return p.requeue(s, d, launched), errors.Join(errs...)
}

// keep applies what the decision changes in the engine's own state: the
// placement line (recorded when it changes), the capacity memory, recalls.
func (p *Pool) keep(d Decision) {
	if d.Policy != "" {
		p.notePolicy(d.Strategy, d.Policy)
	}
	p.mu.Lock()
	for _, u := range d.Memory {
		p.capMem.Accrue(u.Held)
	}
	for _, r := range d.Recalls {
		if t := p.tracked[r.ID]; t != nil {
			t.stopAfterDrain, t.drainDeadline = false, nil
		}
	}
	p.mu.Unlock()
	for _, r := range d.Recalls {
		p.deps.recorder.Eventf(events.TypeNormal, "Recalled", p.name, r.ID, "%s serves again instead of going into standby: %s", r.ID, r.Reason)
	}
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

// syncTargets makes the gateway route the pool to exactly ts.
func (p *Pool) syncTargets(ctx context.Context, ts []registrar.Target) error {
	err := p.deps.registrar.Sync(ctx, p.name, ts)
	if err != nil {
		p.setCondition(tidev1.ConditionGatewaySynced, metav1.ConditionFalse, "SyncFailed", err.Error())
		p.deps.recorder.Eventf(events.TypeWarning, "GatewaySyncFailed", p.name, "", "gateway sync failed: %v", err)
		return err
	}
	p.setCondition(tidev1.ConditionGatewaySynced, metav1.ConditionTrue, "Synced", fmt.Sprintf("%d targets registered", len(ts)))
	p.mu.Lock()
	p.lastTargets = append(p.lastTargets[:0], ts...)
	p.synced = true
	p.mu.Unlock()
	return nil
}

// drain starts drains: the instances are terminated (or stopped into
// standby) once idle or at their deadline.
func (p *Pool) drain(ds []Drain) {
	for _, dr := range ds {
		p.mu.Lock()
		r := p.rec(dr.ID)
		dl := dr.Deadline
		r.drainDeadline = &dl
		if dr.IntoStandby {
			r.stopAfterDrain = true
		}
		p.mu.Unlock()
		p.deps.recorder.Eventf(events.TypeNormal, "Draining", p.name, dr.ID, "draining %s until %s: %s", dr.ID, dr.Deadline.Format(time.RFC3339), dr.Reason)
	}
}

// remove stops instances into standby and terminates others; a failure is
// retried by a later round, which sees the instance still there.
func (p *Pool) remove(ctx context.Context, stops, terms []Termination) []error {
	var errs []error
	for _, st := range stops {
		if err := p.stop(ctx, st); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range terms {
		if err := p.deps.provider.Terminate(ctx, t.ID); err != nil {
			errs = append(errs, fmt.Errorf("terminating %s: %w", t.ID, err))
			p.deps.recorder.Eventf(events.TypeWarning, "TerminateFailed", p.name, t.ID, "terminating %s failed: %v", t.ID, err)
			continue
		}
		p.deps.metrics.terminations.WithLabelValues(p.name).Inc()
		p.deps.recorder.Eventf(events.TypeNormal, "Terminating", p.name, t.ID, "terminating %s: %s", t.ID, t.Reason)
	}
	return errs
}

// each runs f for 0..n-1: concurrently (a replacement must not wait for
// another), or one after another in order with deps.serial (replays).
func (p *Pool) each(n int, f func(i int)) {
	if p.deps.serial {
		for i := range n {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); f(i) }()
	}
	wg.Wait()
}

// requeue is when to run the next round: the decision's requeue, soon
// after launches (new instances change the picture, and refused launches
// go elsewhere), and once the backoff of failed launches is over.
func (p *Pool) requeue(s Snapshot, d Decision, launched []provider.Instance) time.Duration {
	requeue := d.Requeue
	p.mu.Lock()
	steered, blocked := p.steered, p.blocked
	p.mu.Unlock()
	if len(launched) > 0 || steered {
		requeue = time.Millisecond
	}
	if len(d.Launches) > len(launched) && blocked.After(s.Now) {
		// Launches failed in this round: try again once the backoff is
		// over (elsewhere, if placement has learnt the offering is full),
		// not only at the next event or resync.
		if wait := blocked.Sub(s.Now); requeue == 0 || wait < requeue {
			requeue = wait
		}
	}
	return requeue
}

// writeStatus is the pool's status after the round.
func (p *Pool) writeStatus(generation int64, views []View, launched []provider.Instance, d Decision) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := &p.status
	st.ObservedGeneration = generation
	st.Desired = d.Desired
	st.Ready = d.Ready
	st.Instances = st.Instances[:0]
	add := func(in provider.Instance, phase string) {
		st.Instances = append(st.Instances, tidev1.InstanceStatus{
			ID: in.ID, Address: in.Address, Zone: in.Zone, Market: string(in.Market),
			PrivateIP: in.PrivateIP, PublicIP: in.PublicIP, Phase: phase,
			LaunchedAt: metav1.NewTime(in.LaunchedAt), Weight: p.weights[in.ID],
		})
	}
	fresh := map[string]bool{}
	for _, in := range launched {
		fresh[in.ID] = true
	}
	for _, v := range views {
		if fresh[v.ID] {
			continue // a standby started this round: shown as launched below
		}
		phase := d.Phases[v.ID]
		if phase == "" {
			phase = tidev1.PhaseStarting
		}
		add(v.Instance, phase)
	}
	for _, in := range launched {
		phase := tidev1.PhaseStarting
		if in.State == provider.StatePending {
			phase = tidev1.PhasePending
		}
		add(in, phase)
	}
	sort.Slice(st.Instances, func(i, j int) bool { return st.Instances[i].ID < st.Instances[j].ID })
	st.Spot = 0
	for _, in := range st.Instances {
		if in.Market == string(provider.MarketSpot) {
			st.Spot++
		}
	}
	st.Standby = max(0, d.Standby+int32(len(d.Stops))-int32(len(d.Starts)))
	p.readyConditionsLocked(d)
	p.deps.metrics.desired.WithLabelValues(p.name).Set(float64(d.Desired))
	p.deps.metrics.ready.WithLabelValues(p.name).Set(float64(d.Ready))
}

// readyConditionsLocked sets Ready and Degraded; p.mu is held.
func (p *Pool) readyConditionsLocked(d Decision) {
	msg := fmt.Sprintf("%d of %d instances ready", d.Ready, d.Desired)
	if d.Ready >= d.Desired {
		p.setConditionLocked(tidev1.ConditionReady, metav1.ConditionTrue, "Ready", msg)
		p.setConditionLocked(tidev1.ConditionDegraded, metav1.ConditionFalse, "AsWanted", "the pool holds its wanted size")
		return
	}
	p.setConditionLocked(tidev1.ConditionReady, metav1.ConditionFalse, "Scaling", msg)
	reason := "Replacing"
	if d.Ready == 0 {
		reason = "NoneReady"
	}
	p.setConditionLocked(tidev1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
}
