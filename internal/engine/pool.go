package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
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

// Pool runs the observe → plan → apply loop of one pool. It is woken by
// Trigger (provider events, readiness, spec changes), by the plan's own
// requeue time, by backoff after errors and by a slow resync.
type Pool struct {
	name string
	deps *deps

	trigger chan struct{}
	done    chan struct{}

	mu         sync.Mutex
	spec       tidev1.TidePoolSpec
	generation int64
	ready      map[string]bool
	drains     map[string]time.Time
	// stopAfterDrain marks on-demand instances retired into standby: once
	// drained they are stopped, not terminated.
	stopAfterDrain map[string]bool
	// startedAt is when the engine last started an instance from standby.
	startedAt map[string]time.Time
	// noStandby: the provider refused a stop as unsupported; standbyWarned:
	// the StandbyUnsupported event was recorded.
	noStandby, standbyWarned bool
	notices                  map[string]time.Time // reclaim notices from agents on the instances
	probing                  map[string]context.CancelFunc
	awaiting                 map[string]provider.Instance // with deps.manualReady: instances waiting for MarkReady
	lost                     map[string]string            // id → why, for the next launch's "replacing" note
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
	holdUntil      time.Time
	offeringsAt    time.Time
	costErr        string
	runCtx         context.Context

	// weights set by a balancer, by instance id
	weights map[string]int32

	// retryTokens keeps the idempotency token of a launch that failed
	// without a definite answer (timeout, throttling, lost response), per
	// offering, so the retry returns the instance the cloud may have made
	// instead of making a second one.
	retryTokens map[string]retryToken

	// placement
	capMem   *placement.CapacityMemory
	offers   []provider.Offering
	offersAt time.Time

	// autoscaling
	scaler      *autoscale.Autoscaler
	scalerCfg   string
	scaledAt    time.Time
	autoDesired int32
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
		name:           name,
		deps:           d,
		trigger:        make(chan struct{}, 1),
		done:           make(chan struct{}),
		ready:          map[string]bool{},
		drains:         map[string]time.Time{},
		stopAfterDrain: map[string]bool{},
		startedAt:      map[string]time.Time{},
		notices:        map[string]time.Time{},
		probing:        map[string]context.CancelFunc{},
		awaiting:       map[string]provider.Instance{},
		lost:           map[string]string{},
	}
}

func (p *Pool) ctx() context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runCtx == nil {
		return context.Background()
	}
	return p.runCtx
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
	p.mu.Lock()
	p.runCtx = ctx
	p.mu.Unlock()
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

// round observes, plans and applies once, and says when to look again.
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

func (p *Pool) reconcile(ctx context.Context) (time.Duration, error) {
	d := p.deps
	insts, err := d.provider.List(ctx, p.name)
	if err != nil {
		msg := fmt.Sprintf("cannot list the pool's instances from provider %s: %v", d.provider.Name(), err)
		p.setCondition(tidev1.ConditionCapacityAvailable, metav1.ConditionUnknown, "ProviderUnreachable", msg)
		p.setCondition(tidev1.ConditionReady, metav1.ConditionFalse, "ProviderUnreachable", msg)
		return 0, fmt.Errorf("listing instances of pool %s: %w", p.name, err)
	}
	now := d.clock.Now()

	p.mu.Lock()
	spec := *p.spec.DeepCopy()
	generation := p.generation
	// What the engine knows of an instance (readiness, drain, notice, a
	// pending stop, its last start) lives as long as it runs: it is
	// forgotten once the instance is gone, and when it is stopped into
	// standby, since once started it must pass its readiness probe again.
	live := map[string]bool{}
	for _, in := range insts {
		live[in.ID] = in.State != provider.StateStopped && in.State != provider.StateStopping
	}
	for id := range p.ready {
		if !live[id] {
			delete(p.ready, id)
		}
	}
	for id := range p.drains {
		if !live[id] {
			delete(p.drains, id)
		}
	}
	for id := range p.notices {
		if !live[id] {
			delete(p.notices, id)
		}
	}
	for id := range p.stopAfterDrain {
		if !live[id] {
			delete(p.stopAfterDrain, id)
		}
	}
	for id := range p.startedAt {
		if !live[id] {
			delete(p.startedAt, id)
		}
	}
	views := make([]View, 0, len(insts))
	for _, in := range insts {
		v := View{Instance: in, Ready: p.ready[in.ID], InFlight: -1, StartedAt: p.startedAt[in.ID]}
		if dl, ok := p.drains[in.ID]; ok {
			dl := dl
			v.DrainDeadline = &dl
		}
		if at, ok := p.notices[in.ID]; ok && (v.InterruptAt == nil || at.Before(*v.InterruptAt)) {
			at := at
			v.InterruptAt = &at
		}
		if rep, ok := d.registrar.(registrar.InFlightReporter); ok {
			v.InFlight = rep.InFlight(in.ID)
		}
		views = append(views, v)
	}
	for id, cancel := range p.probing {
		if !live[id] {
			cancel()
			delete(p.probing, id)
		}
	}
	blocked := p.blocked
	p.mu.Unlock()

	var current, ready int32
	for _, v := range views {
		if v.State != provider.StateTerminating && v.State != provider.StateStopped && v.State != provider.StateStopping &&
			v.InterruptAt == nil && v.DrainDeadline == nil {
			current++
			if v.Ready {
				ready++
			}
		}
	}
	autoDesired, autoRequeue := p.autoscale(&spec, current, ready, now)
	if autoDesired > 0 {
		spec.Replicas = &autoDesired
	}
	if hold := p.recordCost(&spec, insts, now); now.Before(hold) && spec.DesiredReplicas() > spec.Minimum {
		// CapAtMinimum: the budget is spent; hold the pool at its minimum
		// until the next period.
		m := spec.Minimum
		spec.Replicas = &m
	}

	_, placed := StrategyOf(&spec)
	_, offering := d.provider.(provider.OfferingSource)
	plan := Compute(Input{Spec: &spec, Instances: views, Now: now, LaunchBlockedUntil: blocked, ExternalPlacement: placed && offering})
	if placed && offering && !p.place(&spec, views, &plan, now) {
		// No offerings yet: fall back to the plan's own launches.
		plan = Compute(Input{Spec: &spec, Instances: views, Now: now, LaunchBlockedUntil: blocked})
	}
	p.mu.Lock()
	for i := range plan.Targets {
		plan.Targets[i].Weight = int(p.weights[plan.Targets[i].ID])
		plan.Targets[i].Models = spec.Serving.Models
	}
	p.mu.Unlock()

	// 1. The gateway first: nothing dead or leaving stays registered.
	syncErr := d.registrar.Sync(ctx, p.name, plan.Targets)
	if syncErr != nil {
		p.setCondition(tidev1.ConditionGatewaySynced, metav1.ConditionFalse, "SyncFailed", syncErr.Error())
		d.recorder.Eventf(events.TypeWarning, "GatewaySyncFailed", p.name, "", "gateway sync failed: %v", syncErr)
	} else {
		p.setCondition(tidev1.ConditionGatewaySynced, metav1.ConditionTrue, "Synced", fmt.Sprintf("%d targets registered", len(plan.Targets)))
		p.noteTargets(plan.Targets)
	}

	// 2. Drains.
	for _, dr := range plan.Drains {
		p.mu.Lock()
		p.drains[dr.ID] = dr.Deadline
		p.mu.Unlock()
		d.recorder.Eventf(events.TypeNormal, "Draining", p.name, dr.ID, "draining %s until %s: %s", dr.ID, dr.Deadline.Format(time.RFC3339), dr.Reason)
	}

	// 3. Terminations, and stops into standby: a drained instance marked
	// to stop is stopped instead of terminated.
	var errs []error
	p.mu.Lock()
	var terms []Termination
	for _, t := range plan.Terminations {
		if p.stopAfterDrain[t.ID] {
			plan.Stops = append(plan.Stops, Termination{ID: t.ID, Reason: "drained into standby"})
			plan.Phases[t.ID] = tidev1.PhaseStandby
			continue
		}
		terms = append(terms, t)
	}
	p.mu.Unlock()
	plan.Terminations = terms
	for _, st := range plan.Stops {
		if err := p.stop(ctx, st); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range plan.Terminations {
		if err := d.provider.Terminate(ctx, t.ID); err != nil {
			errs = append(errs, fmt.Errorf("terminating %s: %w", t.ID, err))
			d.recorder.Eventf(events.TypeWarning, "TerminateFailed", p.name, t.ID, "terminating %s failed: %v", t.ID, err)
			continue
		}
		d.metrics.terminations.WithLabelValues(p.name).Inc()
		d.recorder.Eventf(events.TypeNormal, "Terminating", p.name, t.ID, "terminating %s: %s", t.ID, t.Reason)
	}

	// 4. Standby starts and launches, concurrently: a replacement must not
	// wait for another.
	started := p.start(ctx, plan.Starts)
	launched := append(p.launch(ctx, &spec, plan.Launches), started...)

	// 5. Readiness probes for running instances not yet ready.
	for _, v := range views {
		if v.State == provider.StateRunning && v.Address != "" && !v.Ready && plan.Phases[v.ID] != tidev1.PhaseTerminating {
			p.startProbe(ctx, v.Instance, spec.Serving.ReadinessPath)
		}
	}
	for _, in := range launched {
		if in.State == provider.StateRunning && in.Address != "" {
			p.startProbe(ctx, in, spec.Serving.ReadinessPath)
		}
	}

	p.noteSignals()
	p.writeStatus(generation, views, launched, plan)
	if syncErr != nil {
		errs = append(errs, fmt.Errorf("syncing gateway: %w", syncErr))
	}
	requeue := plan.Requeue
	if autoRequeue > 0 && (requeue == 0 || autoRequeue < requeue) {
		requeue = autoRequeue
	}
	if _, ok := p.deps.signals.(SignalHealth); ok && (requeue == 0 || AutoscaleEvery < requeue) {
		// The balancing-signal condition follows the gateway's view.
		requeue = AutoscaleEvery
	}
	if spec.Budget != nil && p.deps.costing != nil {
		every := p.deps.costing.BudgetEvery
		if every <= 0 {
			every = 2 * time.Second
		}
		if requeue == 0 || every < requeue {
			requeue = every
		}
	}
	p.mu.Lock()
	steered := p.steered
	p.mu.Unlock()
	if len(launched) > 0 || steered {
		// New instances change the picture, and refused launches go
		// elsewhere: look again soon.
		requeue = time.Millisecond
	}
	if b := p.blockedUntil(); len(plan.Launches) > len(launched) && b.After(now) {
		// Launches failed in this round: try again once the backoff is
		// over (elsewhere, if placement has learnt the offering is full),
		// not only at the next event or resync.
		if wait := b.Sub(now); requeue == 0 || wait < requeue {
			requeue = wait
		}
	}
	if len(errs) > 0 {
		return requeue, errors.Join(errs...)
	}
	return requeue, nil
}

func (p *Pool) noteTargets(ts []registrar.Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastTargets = append(p.lastTargets[:0], ts...)
	p.synced = true
}

// launch performs the plan's launches and returns the accepted instances.
func (p *Pool) launch(ctx context.Context, spec *tidev1.TidePoolSpec, ls []Launch) []provider.Instance {
	p.mu.Lock()
	p.steered = false
	p.mu.Unlock()
	if len(ls) == 0 {
		return nil
	}
	d := p.deps
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		out      []provider.Instance
		failures int
		// steered counts refusals the capacity memory took: the next
		// round places elsewhere, so they hold no launch back.
		steered int
		lastErr error
	)
	p.mu.Lock()
	var replacing []string
	for id := range p.lost {
		replacing = append(replacing, id)
	}
	sort.Strings(replacing)
	p.lost = map[string]string{}
	p.mu.Unlock()
	for i, l := range ls {
		note := ""
		if i < len(replacing) {
			note = " replacing " + replacing[i]
		}
		one := func(l Launch, note string) {
			key := string(l.Market) + "|" + l.Zone + "|" + l.InstanceType
			req := provider.LaunchRequest{Pool: p.name, Spec: spec, Token: p.takeToken(key), Market: l.Market,
				Zone: l.Zone, InstanceType: l.InstanceType}
			in, err := d.provider.Launch(ctx, req)
			p.settleToken(key, req.Token, err)
			p.mu.Lock()
			mem := p.capMem
			p.mu.Unlock()
			remembered := mem != nil && l.Zone != "" &&
				mem.Observe(placement.Key{Zone: l.Zone, InstanceType: l.InstanceType, Market: l.Market}, err)
			mu.Lock()
			defer mu.Unlock()
			if remembered {
				steered++
			}
			if err != nil {
				failures++
				lastErr = err
				d.metrics.launchFailures.WithLabelValues(p.name).Inc()
				d.recorder.Eventf(events.TypeWarning, "LaunchFailed", p.name, "", "launch failed (%s): %v", l.Reason, err)
				return
			}
			d.metrics.launches.WithLabelValues(p.name, string(in.Market)).Inc()
			d.recorder.Eventf(events.TypeNormal, "Launched", p.name, in.ID, "launched %s at %s (%s market)%s: %s", in.ID, orDash(in.Address), in.Market, note, l.Reason)
			out = append(out, in)
		}
		if d.serial {
			one(l, note)
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); one(l, note) }()
	}
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.steered = steered > 0
	if failures > steered {
		p.launchFails++
		p.blocked = d.clock.Now().Add(backoff(p.launchFails))
	}
	if failures > 0 {
		reason := "LaunchFailed"
		if provider.IsInsufficientCapacity(lastErr) {
			reason = "InsufficientCapacity"
		}
		p.setConditionLocked(tidev1.ConditionCapacityAvailable, metav1.ConditionFalse, reason, lastErr.Error())
	} else {
		p.launchFails = 0
		p.blocked = time.Time{}
		p.setConditionLocked(tidev1.ConditionCapacityAvailable, metav1.ConditionTrue, "Launched", "the last launches succeeded")
	}
	return out
}

// retryToken is a launch token kept for a retry.
type retryToken struct {
	token string
	at    time.Time
}

// retryTokenTTL bounds how long a token is reused (EC2 honours one for
// 24 h; a retry comes within seconds or minutes).
const retryTokenTTL = 10 * time.Minute

// takeToken returns the token to launch on an offering with: one kept from
// an unanswered launch there, else a new one.
func (p *Pool) takeToken(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.retryTokens[key]; ok {
		delete(p.retryTokens, key)
		if p.deps.clock.Since(t.at) < retryTokenTTL {
			return t.token
		}
	}
	return newToken()
}

// settleToken keeps the token when the launch failed without a definite
// "no" (a capacity refusal is definite: nothing was made).
func (p *Pool) settleToken(key, token string, err error) {
	if err == nil || provider.IsInsufficientCapacity(err) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.retryTokens == nil {
		p.retryTokens = map[string]retryToken{}
	}
	if _, ok := p.retryTokens[key]; !ok {
		p.retryTokens[key] = retryToken{token: token, at: p.deps.clock.Now()}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startProbe polls the instance's readiness path until it answers 2xx, the
// instance goes away or the pool stops. Probing starts fast (a simulator
// is up in milliseconds) and slows down for slow starters.
func (p *Pool) startProbe(ctx context.Context, in provider.Instance, path string) {
	p.mu.Lock()
	if _, ok := p.probing[in.ID]; ok || p.ready[in.ID] {
		p.mu.Unlock()
		return
	}
	if p.deps.manualReady {
		p.probing[in.ID] = func() {}
		p.awaiting[in.ID] = in
		p.mu.Unlock()
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	p.probing[in.ID] = cancel
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
	delete(p.probing, in.ID)
	p.ready[in.ID] = true
	from, how := in.LaunchedAt, "launch"
	if at, ok := p.startedAt[in.ID]; ok && at.After(from) {
		from, how = at, "warm start"
	}
	p.mu.Unlock()
	took := p.deps.clock.Since(from)
	p.mu.Lock()
	mem := p.capMem
	p.mu.Unlock()
	mem.ObserveStart(took, how == "warm start")
	p.deps.metrics.readySeconds.WithLabelValues(p.name).Observe(took.Seconds())
	p.deps.recorder.Eventf(events.TypeNormal, "Ready", p.name, in.ID, "%s ready at %s %s after its %s", in.ID, in.Address, took.Round(time.Millisecond), how)
	p.Trigger()
}

func (p *Pool) stopProbes() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, cancel := range p.probing {
		cancel()
		delete(p.probing, id)
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
	if old, ok := p.notices[id]; ok && !at.Before(old) {
		p.mu.Unlock()
		return
	}
	p.notices[id] = at
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
		_, draining := p.drains[in.ID]
		wasReady := p.ready[in.ID]
		delete(p.ready, in.ID)
		if cancel, ok := p.probing[in.ID]; ok {
			cancel()
			delete(p.probing, in.ID)
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

func (p *Pool) writeStatus(generation int64, views []View, launched []provider.Instance, plan Plan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := &p.status
	st.ObservedGeneration = generation
	st.Desired = plan.Desired
	st.Ready = plan.Ready
	st.Instances = st.Instances[:0]
	var spot int32
	add := func(in provider.Instance, phase string) {
		if in.Market == provider.MarketSpot {
			spot++
		}
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
		phase := plan.Phases[v.ID]
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
	st.Spot = spot
	st.Standby = plan.Standby + int32(len(plan.Stops)) - int32(len(plan.Starts))
	if st.Standby < 0 {
		st.Standby = 0
	}

	if plan.Ready >= plan.Desired {
		p.setConditionLocked(tidev1.ConditionReady, metav1.ConditionTrue, "Ready", fmt.Sprintf("%d of %d instances ready", plan.Ready, plan.Desired))
		p.setConditionLocked(tidev1.ConditionDegraded, metav1.ConditionFalse, "AsWanted", "the pool holds its wanted size")
	} else {
		p.setConditionLocked(tidev1.ConditionReady, metav1.ConditionFalse, "Scaling", fmt.Sprintf("%d of %d instances ready", plan.Ready, plan.Desired))
		reason := "Replacing"
		if plan.Ready == 0 {
			reason = "NoneReady"
		}
		p.setConditionLocked(tidev1.ConditionDegraded, metav1.ConditionTrue, reason, fmt.Sprintf("%d of %d instances ready", plan.Ready, plan.Desired))
	}
	p.deps.metrics.desired.WithLabelValues(p.name).Set(float64(plan.Desired))
	p.deps.metrics.ready.WithLabelValues(p.name).Set(float64(plan.Ready))
}
