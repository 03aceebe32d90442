package engine

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/autoscale"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// Backoff bounds for failed rounds and failed launches.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 5 * time.Minute
)

// Pool runs the observe → decide → apply loop of one pool. It is woken by
// Trigger (provider events, readiness, spec changes), by the decision's
// own requeue time, by backoff after errors and by a slow resync.
type Pool struct {
	name string
	deps *deps

	trigger chan struct{}
	done    chan struct{}

	mu         sync.Mutex
	spec       tidev1.TidePoolSpec
	generation int64
	// tracked is what the engine knows of each running instance, by ID.
	tracked map[string]*tracked
	// noStandby: the provider refused a stop as unsupported; standbyWarned:
	// the StandbyUnsupported event was recorded.
	noStandby, standbyWarned bool
	lost                     map[string]string // id → why, for the next launch's "replacing" note
	status                   tidev1.TidePoolStatus
	failures                 int // consecutive failed rounds
	launchFails              int // consecutive failed launches
	blocked                  time.Time
	lastTargets              []registrar.Target
	// policyWhy is what the placement strategy last resolved to.
	policyWhy string
	// steered: the last launches had refusals the capacity memory took;
	// the next round, at once, places them elsewhere.
	steered bool
	synced  bool

	// cost
	budgetAt       time.Time
	budgetExceeded bool
	// alertsSent are the budget alerts said (cost.Alert keys).
	alertsSent   map[string]bool
	holdUntil    time.Time
	livePricesAt time.Time
	costErr      string

	// weights set by a balancer, by instance id
	weights map[string]int32

	// retryTokens keeps the idempotency token of a launch that failed
	// without a definite answer (timeout, throttling, lost response), per
	// offering, so the retry returns the instance the cloud may have made
	// instead of making a second one.
	retryTokens map[string]retryToken

	// placement: the capacity memory, and the one cache of offerings
	// (placement and live prices)
	capMem   *placement.CapacityMemory
	offers   []provider.Offering
	offersAt time.Time

	// autoscaling
	scaler      *autoscale.Autoscaler
	scalerCfg   string
	scaledAt    time.Time
	autoDesired int32
	// autoKnown: autoDesired holds a decision of the current autoscaler
	// (zero is a size, not "none yet"); woken: evaluate it at the next
	// round (Wake).
	autoKnown bool
	woken     bool
}

type deps struct {
	provider  provider.Provider
	registrar registrar.Registrar
	recorder  *events.Recorder
	clock     clock.WithTicker
	metrics   *Metrics
	client    *http.Client
	logger    *slog.Logger
	resync    time.Duration
	onRound   func(pool string)
	costing   *Costing
	signals   Signals
	learning  placement.Learning
	// manualReady: no readiness probes; the instances that would be
	// probed wait in Pool.awaiting until Driver.MarkReady (replays).
	manualReady bool
	// serial applies launches and starts one after another (replays).
	serial bool
}

func newPool(name string, d *deps) *Pool {
	return &Pool{
		name:    name,
		deps:    d,
		trigger: make(chan struct{}, 1),
		done:    make(chan struct{}),
		tracked: map[string]*tracked{},
		lost:    map[string]string{},
	}
}

// Name is the pool's name.
func (p *Pool) Name() string { return p.name }

// Trigger asks the loop to run a round soon; calls coalesce.
func (p *Pool) Trigger() {
	select {
	case p.trigger <- struct{}{}:
	default:
	}
}

func (p *Pool) setSpec(spec tidev1.TidePoolSpec, generation int64) {
	p.mu.Lock()
	p.spec = spec
	p.generation = generation
	p.mu.Unlock()
	p.Trigger()
}

// Spec returns a copy of the pool's spec.
func (p *Pool) Spec() tidev1.TidePoolSpec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return *p.spec.DeepCopy()
}

// Status returns a copy of the pool's last status.
func (p *Pool) Status() tidev1.TidePoolStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return *p.status.DeepCopy()
}

// run is the pool's loop; it returns when ctx ends.
func (p *Pool) run(ctx context.Context) {
	defer close(p.done)
	timer := p.deps.clock.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			p.stopProbes()
			return
		case <-p.trigger:
		case <-timer.C():
		}
		next := p.round(ctx)
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		timer.Reset(next)
	}
}

// round observes, decides and applies once, and says when to look again.
func (p *Pool) round(ctx context.Context) time.Duration {
	start := p.deps.clock.Now()
	requeue, err := p.reconcile(ctx)
	p.deps.metrics.reconcileDuration.WithLabelValues(p.name).Observe(p.deps.clock.Since(start).Seconds())
	if p.deps.onRound != nil {
		p.deps.onRound(p.name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return p.deps.resync
		}
		p.deps.metrics.reconcileErrors.WithLabelValues(p.name).Inc()
		p.failures++
		d := backoff(p.failures)
		p.deps.logger.Warn("pool round failed", "pool", p.name, "err", err, "retryIn", d)
		return d
	}
	p.failures = 0
	if requeue > 0 && requeue < p.deps.resync {
		return requeue
	}
	return p.deps.resync
}

func backoff(failures int) time.Duration {
	d := minBackoff
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	if d > maxBackoff {
		d = maxBackoff
	}
	return d
}

// reconcile is one round: observe, decide, apply.
func (p *Pool) reconcile(ctx context.Context) (time.Duration, error) {
	s, err := p.observe(ctx)
	if err != nil {
		return 0, err
	}
	return p.apply(ctx, s, Decide(s))
}

// startProbe polls the instance's readiness path until it answers 2xx, the
// instance goes away or the pool stops. Probing starts fast (a simulator
// is up in milliseconds) and slows down for slow starters.
func (p *Pool) startProbe(ctx context.Context, in provider.Instance, path string) {
	p.mu.Lock()
	r := p.rec(in.ID)
	if r.probe != nil || r.ready {
		p.mu.Unlock()
		return
	}
	if p.deps.manualReady {
		r.probe, r.awaiting = func() {}, &in
		p.mu.Unlock()
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	r.probe = cancel
	p.mu.Unlock()
	if path == "" {
		path = "/"
	}
	url := "http://" + in.Address + path
	go func() {
		defer cancel()
		interval := 20 * time.Millisecond
		for {
			if probeOnce(pctx, p.deps.client, url, in.ID) {
				p.markReady(in)
				return
			}
			select {
			case <-pctx.Done():
				return
			case <-p.deps.clock.After(interval):
			}
			if interval < 500*time.Millisecond {
				interval = interval * 3 / 2
			}
		}
	}()
}

// instanceHeader names the instance that answered (the simulator and
// tidegpu-aware servers set it): a probe answered by another process that
// took the port is not this instance's readiness.
const instanceHeader = "X-Tidegpu-Instance"

func probeOnce(ctx context.Context, c *http.Client, url, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	if who := resp.Header.Get(instanceHeader); who != "" && who != id {
		return false
	}
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

func (p *Pool) markReady(in provider.Instance) {
	p.mu.Lock()
	r := p.rec(in.ID)
	r.probe, r.awaiting = nil, nil // the probe ends on its own
	r.ready = true
	from, how := in.LaunchedAt, "launch"
	if r.startedAt.After(from) {
		from, how = r.startedAt, "warm start"
	}
	mem := p.capMem
	p.mu.Unlock()
	took := p.deps.clock.Since(from)
	mem.ObserveStart(took, how == "warm start")
	p.deps.metrics.readySeconds.WithLabelValues(p.name).Observe(took.Seconds())
	p.deps.recorder.Eventf(events.TypeNormal, "Ready", p.name, in.ID, "%s ready at %s %s after its %s", in.ID, in.Address, took.Round(time.Millisecond), how)
	p.Trigger()
}

func (p *Pool) stopProbes() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.tracked {
		r.stopProbe()
	}
}

// recordPreemption tells the placement memory that the instance's offering
// lost capacity, so new spot goes elsewhere for a while.
func (p *Pool) recordPreemption(in provider.Instance) {
	p.mu.Lock()
	mem := p.capMem
	p.mu.Unlock()
	if mem != nil && in.Market == provider.MarketSpot && in.Zone != "" {
		mem.RecordPreemption(placement.Key{Zone: in.Zone, InstanceType: in.InstanceType, Market: in.Market})
	}
}

// setWeights replaces the balancer's weights and wakes the loop if they
// changed.
func (p *Pool) setWeights(w map[string]int32) {
	p.mu.Lock()
	same := len(w) == len(p.weights)
	for id, v := range w {
		same = same && p.weights[id] == v
	}
	if !same {
		p.weights = w
	}
	p.mu.Unlock()
	if !same {
		p.Trigger()
	}
}

// notice records a reclaim notice for an instance (from the agent on it)
// and wakes the loop: the instance drains and its replacement launches.
func (p *Pool) notice(id string, at time.Time, source string) {
	p.mu.Lock()
	r := p.rec(id)
	if r.notice != nil && !at.Before(*r.notice) {
		p.mu.Unlock()
		return
	}
	r.notice = &at
	p.mu.Unlock()
	p.deps.metrics.interruptions.WithLabelValues(p.name).Inc()
	p.deps.recorder.Eventf(events.TypeWarning, "ReclaimNotice", p.name, id, "%s will be reclaimed at %s (notice from %s): draining and launching a replacement",
		id, at.Format(time.RFC3339), source)
	p.Trigger()
}

// handleEvent folds a provider event into the pool and wakes the loop.
func (p *Pool) handleEvent(ev provider.Event) {
	in := ev.Instance
	switch ev.Type {
	case provider.EventGone:
		p.mu.Lock()
		var draining, wasReady bool
		if r := p.tracked[in.ID]; r != nil {
			draining, wasReady = r.drainDeadline != nil, r.ready
			r.ready = false
			r.stopProbe()
		}
		expected := draining || in.State == provider.StateTerminating || in.InterruptAt != nil
		if !expected {
			p.lost[in.ID] = ev.Message
		}
		p.mu.Unlock()
		if expected {
			p.deps.recorder.Eventf(events.TypeNormal, "Terminated", p.name, in.ID, "%s gone: %s", in.ID, ev.Message)
		} else {
			p.deps.metrics.lost.WithLabelValues(p.name).Inc()
			p.deps.recorder.Eventf(events.TypeWarning, "InstanceLost", p.name, in.ID, "%s lost (was ready: %t): %s", in.ID, wasReady, ev.Message)
		}
	case provider.EventInterruption:
		p.recordPreemption(in)
		if in.InterruptAt != nil {
			p.mu.Lock()
			mem := p.capMem
			p.mu.Unlock()
			mem.ObserveNotice(in.InterruptAt.Sub(p.deps.clock.Now()))
		}
		at := "now"
		if in.InterruptAt != nil {
			at = in.InterruptAt.Format(time.RFC3339)
		}
		p.deps.metrics.interruptions.WithLabelValues(p.name).Inc()
		p.deps.recorder.Eventf(events.TypeWarning, "ReclaimNotice", p.name, in.ID, "%s will be reclaimed at %s: draining and launching a replacement", in.ID, at)
	}
	p.Trigger()
}

func (p *Pool) setCondition(typ string, status metav1.ConditionStatus, reason, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setConditionLocked(typ, status, reason, msg)
}

func (p *Pool) setConditionLocked(typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&p.status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: p.generation,
		LastTransitionTime: metav1.NewTime(p.deps.clock.Now()),
	})
}
