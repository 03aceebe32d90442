package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/poolview"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// Options configure a Manager.
type Options struct {
	// Provider runs the instances (required).
	Provider provider.Provider
	// Registrar keeps the gateway equal to the pools (required).
	Registrar registrar.Registrar
	// Recorder receives events (required).
	Recorder *events.Recorder
	// Clock is injected for tests; default real.
	Clock clock.WithTicker
	// Registry receives the engine's metrics; nil for none. Ignored when
	// Metrics is set.
	Registry prometheus.Registerer
	// Metrics shares one set of series between Managers.
	Metrics *Metrics
	// Resync is the safety-net period between rounds with no event; default 30s.
	Resync time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// OnRound, if set, is called with the pool's name after every round,
	// once its status is written (the operator writes it to the CR then).
	// It must not block.
	OnRound func(pool string)
	// Costing, if set, records instances in the cost ledger and enforces
	// budgets.
	Costing *Costing
	// Signals feeds pools' autoscalers (spec.autoscaling); nil means no
	// observations, so autoscalers hold their size.
	Signals Signals
	// Learning sets how each pool's capacity memory learns its market
	// (zero: the defaults); for experiments, not a user's setting.
	Learning placement.Learning
}

// Manager runs one Pool loop per pool and routes provider events to them.
type Manager struct {
	deps *deps

	mu     sync.Mutex
	ctx    context.Context
	pools  map[string]*Pool
	cancel map[string]context.CancelFunc
	wg     sync.WaitGroup
}

// NewManager checks opts and returns a Manager; call Run to start it.
func NewManager(opts Options) (*Manager, error) {
	if opts.Provider == nil {
		return nil, errors.New("engine: Options.Provider is required")
	}
	if opts.Registrar == nil {
		return nil, errors.New("engine: Options.Registrar is required")
	}
	if opts.Recorder == nil {
		return nil, errors.New("engine: Options.Recorder is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Resync <= 0 {
		opts.Resync = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(opts.Registry)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	return &Manager{
		deps: &deps{
			provider: opts.Provider, registrar: opts.Registrar, recorder: opts.Recorder,
			clock: opts.Clock, metrics: opts.Metrics, logger: opts.Logger,
			resync: opts.Resync, client: &http.Client{Transport: tr}, onRound: opts.OnRound, costing: opts.Costing, signals: opts.Signals, learning: opts.Learning,
		},
		pools:  map[string]*Pool{},
		cancel: map[string]context.CancelFunc{},
	}, nil
}

// Run starts the pools applied so far and those applied later, routes
// provider events until ctx ends, then waits for every pool loop to stop.
// It does not terminate instances: that is the caller's choice on shutdown.
func (m *Manager) Run(ctx context.Context) {
	m.mu.Lock()
	m.ctx = ctx
	for name, p := range m.pools {
		m.startLocked(name, p)
	}
	m.mu.Unlock()

	var evs <-chan provider.Event
	if src, ok := provider.As[provider.EventSource](m.deps.provider); ok {
		evs = src.Events()
	}
	for {
		select {
		case <-ctx.Done():
			m.wg.Wait()
			return
		case ev, ok := <-evs:
			if !ok {
				evs = nil
				continue
			}
			m.mu.Lock()
			p := m.pools[ev.Instance.Pool]
			m.mu.Unlock()
			if p != nil {
				p.handleEvent(ev)
			}
		}
	}
}

func (m *Manager) startLocked(name string, p *Pool) {
	if m.ctx == nil || m.cancel[name] != nil {
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	m.cancel[name] = cancel
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		p.run(ctx)
	}()
}

// Apply adds a pool or updates its spec; the pool's loop reacts at once.
func (m *Manager) Apply(tp *tidev1.TidePool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pools[tp.Name]
	if !ok {
		p = newPool(tp.Name, m.deps)
		m.pools[tp.Name] = p
		m.deps.recorder.Eventf(events.TypeNormal, "PoolAdded", tp.Name, "", "pool %s: want %d instances (min %d, max %d) on %s",
			tp.Name, tp.Spec.DesiredReplicas(), tp.Spec.Minimum, tp.Spec.Maximum, tp.Spec.Provider)
	}
	p.setSpec(*tp.Spec.DeepCopy(), tp.Generation)
	m.startLocked(tp.Name, p)
}

// Remove stops a pool's loop, deregisters its targets and terminates its
// instances, so that nothing of it is left.
func (m *Manager) Remove(ctx context.Context, name string) error {
	m.mu.Lock()
	p := m.pools[name]
	cancel := m.cancel[name]
	delete(m.pools, name)
	delete(m.cancel, name)
	m.mu.Unlock()
	if p == nil {
		return nil
	}
	if cancel != nil {
		cancel()
		<-p.done
	}
	var errs []error
	if err := m.deps.registrar.Sync(ctx, name, nil); err != nil {
		errs = append(errs, fmt.Errorf("removing gateway targets of %s: %w", name, err))
	}
	insts, err := m.deps.provider.List(ctx, name)
	if err != nil {
		errs = append(errs, fmt.Errorf("listing instances of %s: %w", name, err))
	}
	for _, in := range insts {
		if err := m.deps.provider.Terminate(ctx, in.ID); err != nil {
			errs = append(errs, fmt.Errorf("terminating %s: %w", in.ID, err))
		}
	}
	m.deps.metrics.forget(name)
	m.deps.recorder.Eventf(events.TypeNormal, "PoolRemoved", name, "", "pool %s removed: %d instances terminated", name, len(insts))
	return errors.Join(errs...)
}

// PoolView is a pool as the admin API shows it.
type PoolView = poolview.Pool

// Pools returns every pool, sorted by name.
func (m *Manager) Pools() []PoolView {
	m.mu.Lock()
	ps := make([]*Pool, 0, len(m.pools))
	for _, p := range m.pools {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	sort.Slice(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
	out := make([]PoolView, 0, len(ps))
	for _, p := range ps {
		out = append(out, PoolView{Name: p.name, Spec: p.Spec(), Status: p.Status()})
	}
	return out
}

// Pool returns one pool.
func (m *Manager) Pool(name string) (PoolView, bool) {
	m.mu.Lock()
	p := m.pools[name]
	m.mu.Unlock()
	if p == nil {
		return PoolView{}, false
	}
	return PoolView{Name: p.name, Spec: p.Spec(), Status: p.Status()}, true
}

// ErrNotFound is returned for an unknown pool or instance.
var ErrNotFound = errors.New("not found")

// ErrNotSupported is returned when the provider cannot simulate a reclaim.
var ErrNotSupported = provider.ErrNotSupported

// Reclaim plays the cloud's part in a spot reclaim of one instance (only
// simulated providers can): with notice > 0 the instance is drained and
// replaced at once and dies when the notice runs out; with 0 it dies now.
func (m *Manager) Reclaim(ctx context.Context, pool, id string, notice time.Duration) error {
	m.mu.Lock()
	p := m.pools[pool]
	m.mu.Unlock()
	if p == nil {
		return fmt.Errorf("pool %q: %w", pool, ErrNotFound)
	}
	r, ok := provider.As[provider.Reclaimer](m.deps.provider)
	if !ok {
		return fmt.Errorf("reclaim on provider %s: %w", m.deps.provider.Name(), ErrNotSupported)
	}
	insts, err := m.deps.provider.List(ctx, pool)
	if err != nil {
		return err
	}
	found := false
	for _, in := range insts {
		found = found || in.ID == id
	}
	if !found {
		return fmt.Errorf("instance %q of pool %q: %w", id, pool, ErrNotFound)
	}
	m.deps.recorder.Eventf(events.TypeNormal, "ReclaimRequested", pool, id, "reclaim of %s requested with %s notice", id, notice)
	return r.Reclaim(ctx, id, notice)
}

// Notice records a reclaim notice for an instance of a pool, as reported by
// the agent on the instance (an interruption notice read from the cloud's
// metadata service): the instance drains at once, its replacement launches
// at once, and it is terminated once idle or at the reclaim time.
func (m *Manager) Notice(pool, id string, at time.Time, source string) error {
	m.mu.Lock()
	p := m.pools[pool]
	m.mu.Unlock()
	if p == nil {
		return fmt.Errorf("pool %q: %w", pool, ErrNotFound)
	}
	p.notice(id, at, source)
	return nil
}

// SetWeights gives a pool's instances their balancer weights (by instance
// id; 0 or missing: the gateway's default). The pool re-syncs its gateways
// at once when they change.
func (m *Manager) SetWeights(pool string, w map[string]int32) error {
	m.mu.Lock()
	p := m.pools[pool]
	m.mu.Unlock()
	if p == nil {
		return fmt.Errorf("pool %q: %w", pool, ErrNotFound)
	}
	cp := make(map[string]int32, len(w))
	for k, v := range w {
		cp[k] = v
	}
	p.setWeights(cp)
	return nil
}

// Trigger wakes a pool for a round at once (a cloud event about one of its
// instances, such as a state change to shutting-down).
func (m *Manager) Trigger(pool string) error {
	m.mu.Lock()
	p := m.pools[pool]
	m.mu.Unlock()
	if p == nil {
		return fmt.Errorf("pool %q: %w", pool, ErrNotFound)
	}
	p.Trigger()
	return nil
}

// Wake asks a pool's autoscaler to evaluate now (see Pool.Wake); false
// when the pool is unknown or cannot grow.
func (m *Manager) Wake(pool string) bool {
	m.mu.Lock()
	p := m.pools[pool]
	m.mu.Unlock()
	return p != nil && p.Wake()
}
