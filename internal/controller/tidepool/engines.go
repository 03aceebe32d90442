package tidepool

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/event"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/gc"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/local"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// ProviderFactory builds the provider a pool's spec asks for. key names the
// provider instance (pools with equal keys share one provider and engine);
// creds holds the Secret's data when the spec references one.
type ProviderFactory func(ctx context.Context, tp *tidev1.TidePool, creds map[string][]byte) (key string, p provider.Provider, err error)

// Engines runs one engine.Manager per provider instance and routes pools to
// them. It is the operator's executor: the reconciler tells it the wanted
// pools and reads their status back.
type Engines struct {
	recorder *events.Recorder
	router   *registrar.Router
	regFP    map[string]string
	registry prometheus.Registerer
	clock    clock.WithTicker
	logger   *slog.Logger
	factory  ProviderFactory
	// existing lists the pool keys that exist in the cluster; a provider
	// that remembers instances (local) adopts those and stops the others.
	existing func(ctx context.Context) (map[string]bool, error)
	onRound  func(pool string)
	costing  *engine.Costing
	signals  engine.Signals

	mu        sync.Mutex
	ctx       context.Context
	managers  map[string]*engine.Manager // by provider key
	providers map[string]provider.Provider
	poolKey   map[string]string // pool → provider key
	woken     map[string]string // pool → the last wake annotation acted on
	closers   []func(context.Context) error
	wg        sync.WaitGroup
	metrics   *engine.Metrics
	// rounds carries a reconcile request for a pool after each of its
	// engine rounds (a controller-runtime channel source).
	rounds chan event.GenericEvent
}

// EnginesOptions configure Engines.
type EnginesOptions struct {
	Recorder  *events.Recorder
	Registrar registrar.Registrar
	Registry  prometheus.Registerer
	Clock     clock.WithTicker
	Logger    *slog.Logger
	Factory   ProviderFactory
	Existing  func(ctx context.Context) (map[string]bool, error)
	// OnRound is called after every round of any pool (must not block).
	OnRound func(pool string)
	// Costing records the pools' instances in the cost ledger.
	Costing *engine.Costing
	// Signals feeds the pools' autoscalers (and their BalancingSignals
	// condition, if it implements engine.SignalHealth); nil: none, and a
	// pool with spec.autoscaling on traffic metrics holds its size.
	Signals engine.Signals
}

// NewEngines returns Engines; Start must run before pools are applied.
func NewEngines(o EnginesOptions) *Engines {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	e := &Engines{rounds: make(chan event.GenericEvent, 1024), recorder: o.Recorder, router: registrar.NewRouter(o.Registrar), regFP: map[string]string{}, registry: o.Registry, clock: o.Clock,
		logger: o.Logger, factory: o.Factory, existing: o.Existing, onRound: o.OnRound, costing: o.Costing, signals: o.Signals,
		managers: map[string]*engine.Manager{}, providers: map[string]provider.Provider{}, poolKey: map[string]string{}, woken: map[string]string{},
		metrics: engine.NewMetrics(o.Registry)}
	user := o.OnRound
	e.onRound = func(pool string) {
		if nn, ok := splitKey(pool); ok {
			obj := &tidev1.TidePool{}
			obj.Namespace, obj.Name = nn.Namespace, nn.Name
			select {
			case e.rounds <- event.GenericEvent{Object: obj}:
			default: // the queue is full of requests already; one more changes nothing
			}
		}
		if user != nil {
			user(pool)
		}
	}
	return e
}

// Start implements manager.Runnable: it keeps the engines running until ctx
// ends. Instances are left running on stop (like cloud instances when a
// controller restarts); the next start adopts them.
func (e *Engines) Start(ctx context.Context) error {
	e.mu.Lock()
	e.ctx = ctx
	e.mu.Unlock()
	<-ctx.Done()
	e.wg.Wait()
	e.mu.Lock()
	closers := e.closers
	e.mu.Unlock()
	for _, c := range closers {
		_ = c(context.Background())
	}
	return nil
}

// NeedLeaderElection: only the leader launches and terminates instances.
func (e *Engines) NeedLeaderElection() bool { return true }

// Apply hands a pool to the engine of its provider, creating that engine
// (and adopting what a previous run left) on first use.
func (e *Engines) Apply(ctx context.Context, pool string, tp *tidev1.TidePool, creds map[string][]byte) error {
	key, prov, err := e.factory(ctx, tp, creds)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx == nil {
		return fmt.Errorf("engines not started yet")
	}
	if old, ok := e.poolKey[pool]; ok && old != key {
		return fmt.Errorf("pool %s moved from provider %s to %s: providers are immutable", pool, old, key)
	}
	m, err := e.managerLocked(ctx, key, prov)
	if err != nil {
		return err
	}
	e.poolKey[pool] = key
	cp := tp.DeepCopy()
	cp.Name = pool
	m.Apply(cp)
	// A gateway holds a request for the pool with no ready instance: its
	// autoscaler evaluates now (once per stamp).
	if at := tp.Annotations[tidev1.WakeAnnotation]; at != "" && at != e.woken[pool] {
		e.woken[pool] = at
		m.Wake(pool)
	}
	return nil
}

func (e *Engines) adoptLocked(ctx context.Context, lp *local.Provider) error {
	existing, err := e.existing(ctx)
	if err != nil {
		return fmt.Errorf("listing pools before adopting local instances: %w", err)
	}
	adopted, stopped, err := lp.Adopt(ctx, func(in provider.Instance) bool { return existing[in.Pool] })
	if err != nil {
		return fmt.Errorf("adopting local instances: %w", err)
	}
	for _, in := range adopted {
		e.recorder.Eventf(events.TypeNormal, "Adopted", in.Pool, in.ID, "adopted %s at %s left by a previous run", in.ID, in.Address)
	}
	for _, in := range stopped {
		e.recorder.Eventf(events.TypeNormal, "Orphan", in.Pool, in.ID, "stopped %s: its pool %s no longer exists", in.ID, in.Pool)
	}
	return nil
}

// SetRegistrar gives a pool its own registrar (such as its Kong) beside the
// default one; nil removes it. fp identifies its configuration.
func (e *Engines) SetRegistrar(pool string, reg registrar.Registrar, fp string) {
	e.mu.Lock()
	if reg == nil {
		delete(e.regFP, pool)
	} else {
		e.regFP[pool] = fp
	}
	e.mu.Unlock()
	e.router.Set(pool, reg)
}

// RegistrarFingerprint returns the configuration id of the pool's own
// registrar ("" for none).
func (e *Engines) RegistrarFingerprint(pool string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.regFP[pool]
}

// managerLocked returns the engine of a provider key, creating it (and
// adopting what a previous run left, for local processes) on first use.
func (e *Engines) managerLocked(ctx context.Context, key string, prov provider.Provider) (*engine.Manager, error) {
	if m, ok := e.managers[key]; ok {
		return m, nil
	}
	if prov == nil {
		return nil, fmt.Errorf("no provider for %s", key)
	}
	lp, isLocal := provider.As[*local.Provider](prov)
	if isLocal {
		if err := e.adoptLocked(ctx, lp); err != nil {
			return nil, err
		}
		e.closers = append(e.closers, func(context.Context) error { lp.Detach(); return nil })
	}
	m, err := engine.NewManager(engine.Options{Provider: prov, Registrar: e.router, Recorder: e.recorder,
		Clock: e.clock, Metrics: e.metrics, Logger: e.logger, OnRound: e.onRound, Costing: e.costing, Signals: e.signals})
	if err != nil {
		return nil, err
	}
	e.managers[key] = m
	e.providers[key] = prov
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		m.Run(e.ctx)
	}()
	// A provider with a loop of its own (the spot-market simulator) runs
	// as long as its engine and shuts down after it.
	if r, ok := provider.As[interface{ Run(context.Context) }](prov); ok {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			r.Run(e.ctx)
		}()
	}
	if s, ok := provider.As[interface{ Shutdown(context.Context) error }](prov); ok {
		e.closers = append(e.closers, s.Shutdown)
	}
	if !isLocal {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.collectGarbage(e.ctx, prov)
		}()
	}
	return m, nil
}

// Cleanup terminates every instance of a pool that no engine runs — one
// deleted before this process applied it, such as right after an operator
// restart — and removes its gateway targets, so a finalizer never lets a
// pool go while its instances live on.
func (e *Engines) Cleanup(ctx context.Context, pool string, tp *tidev1.TidePool, creds map[string][]byte) error {
	key, prov, err := e.factory(ctx, tp, creds)
	if err != nil {
		return err
	}
	e.mu.Lock()
	if e.ctx == nil {
		e.mu.Unlock()
		return fmt.Errorf("engines not started yet")
	}
	_, err = e.managerLocked(ctx, key, prov)
	e.mu.Unlock()
	if err != nil {
		return err
	}
	if err := e.router.Sync(ctx, pool, nil); err != nil {
		return fmt.Errorf("removing gateway targets of %s: %w", pool, err)
	}
	insts, err := prov.List(ctx, pool)
	if err != nil {
		return fmt.Errorf("listing instances of %s: %w", pool, err)
	}
	for _, in := range insts {
		if err := prov.Terminate(ctx, in.ID); err != nil {
			return fmt.Errorf("terminating %s: %w", in.ID, err)
		}
	}
	e.recorder.Eventf(events.TypeNormal, "PoolRemoved", pool, "", "pool %s removed: %d instances terminated", pool, len(insts))
	return nil
}

// Remove stops a pool: its instances are terminated and its targets removed.
func (e *Engines) Remove(ctx context.Context, pool string) error {
	e.mu.Lock()
	key, ok := e.poolKey[pool]
	m := e.managers[key]
	e.mu.Unlock()
	if !ok || m == nil {
		return nil
	}
	if err := m.Remove(ctx, pool); err != nil {
		return err
	}
	e.mu.Lock()
	delete(e.poolKey, pool)
	delete(e.woken, pool)
	delete(e.regFP, pool)
	e.mu.Unlock()
	e.router.Set(pool, nil)
	return nil
}

// Has reports whether the pool runs in an engine.
func (e *Engines) Has(pool string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.poolKey[pool]
	return ok
}

// Status returns the engine's view of a pool.
func (e *Engines) Status(pool string) (engine.PoolView, bool) {
	e.mu.Lock()
	m := e.managers[e.poolKey[pool]]
	e.mu.Unlock()
	if m == nil {
		return engine.PoolView{}, false
	}
	return m.Pool(pool)
}

// Pools lists every pool of every engine (for the admin API).
func (e *Engines) Pools() []engine.PoolView {
	e.mu.Lock()
	ms := make([]*engine.Manager, 0, len(e.managers))
	for _, m := range e.managers {
		ms = append(ms, m)
	}
	e.mu.Unlock()
	var out []engine.PoolView
	for _, m := range ms {
		out = append(out, m.Pools()...)
	}
	return out
}

// Pool returns one pool (for the admin API).
func (e *Engines) Pool(name string) (engine.PoolView, bool) { return e.Status(name) }

// Reclaim simulates a reclaim on a pool's instance (local and sim providers).
func (e *Engines) Reclaim(ctx context.Context, pool, id string, notice time.Duration) error {
	e.mu.Lock()
	m := e.managers[e.poolKey[pool]]
	e.mu.Unlock()
	if m == nil {
		return fmt.Errorf("pool %q: %w", pool, engine.ErrNotFound)
	}
	return m.Reclaim(ctx, pool, id, notice)
}

// Notice records an agent's reclaim notice for a pool's instance.
func (e *Engines) Notice(pool, id string, at time.Time, source string) error {
	e.mu.Lock()
	m := e.managers[e.poolKey[pool]]
	e.mu.Unlock()
	if m == nil {
		return fmt.Errorf("pool %q: %w", pool, engine.ErrNotFound)
	}
	return m.Notice(pool, id, at, source)
}

// GCInterval and GCGrace pace the garbage collection of cloud instances that
// carry our tags but belong to no pool.
const (
	GCInterval = time.Minute
	GCGrace    = 10 * time.Minute
)

// collectGarbage terminates, every GCInterval, the provider's instances of
// pools that do not exist (after GCGrace), until ctx ends.
func (e *Engines) collectGarbage(ctx context.Context, prov provider.Provider) {
	t := e.clock.NewTicker(GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		pools, err := e.existing(ctx)
		if err != nil {
			e.logger.Warn("gc: listing pools", "err", err)
			continue
		}
		done, err := gc.Collect(ctx, prov, pools, e.clock.Now(), GCGrace)
		for _, in := range done {
			e.recorder.Eventf(events.TypeWarning, "GarbageCollected", in.Pool, in.ID,
				"terminated %s: tagged for pool %s, which does not exist", in.ID, in.Pool)
		}
		if err != nil {
			e.logger.Warn("gc", "provider", prov.Name(), "err", err)
		}
	}
}

// SetWeights passes an AIBalancer's weights to a pool's engine.
func (e *Engines) SetWeights(pool string, w map[string]int32) error {
	e.mu.Lock()
	m := e.managers[e.poolKey[pool]]
	e.mu.Unlock()
	if m == nil {
		return fmt.Errorf("pool %q: %w", pool, engine.ErrNotFound)
	}
	return m.SetWeights(pool, w)
}
