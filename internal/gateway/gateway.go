package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/cors"
	"k8s.io/utils/clock"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
)

// Header names used by the gateway.
const (
	// PoolHeader, on a request, restricts the candidate backends to one pool.
	PoolHeader = "X-Tidegpu-Pool"
	// BackendHeader, on a response, names the backend that produced it.
	BackendHeader = "X-Tidegpu-Backend"
)

// Defaults applied by New to zero-valued Options fields.
const (
	DefaultMaxRetries     = 3
	DefaultMaxBodyBytes   = 8 << 20
	DefaultProbeInterval  = time.Second
	DefaultProbePath      = "/"
	DefaultProbeTimeout   = time.Second
	DefaultProbeFailures  = 2
	DefaultEjectAfter     = 3
	DefaultEjectFor       = 10 * time.Second
	DefaultMaxEjectFor    = 2 * time.Minute
	DefaultWaitForBackend = 2 * time.Second
	DefaultDialTimeout    = time.Second
	DefaultWeight         = 100
)

// Backend is one inference instance as published by the pool controller.
type Backend struct {
	ID       string // instance id, unique across pools
	Pool     string // pool name
	Address  string // host:port, plain HTTP
	Weight   int    // relative capacity, > 0; 0 (or less) means DefaultWeight
	Draining bool   // gets no new requests; in-flight ones continue
	// Models are the model names the backend serves, for model-aware
	// routing; empty means any model. See SetVersionSplit.
	Models []string
	// Version is the version of the model(s) the backend serves, for a
	// version split (SetVersionSplit); "" if none.
	Version string
	// MetricsFamily, if set, is the metric names the backend serves (its
	// pool's spec.serving.metrics) instead of the metrics source's;
	// NoMetrics reads none of its metrics (Ollama); MetricsQueries are its
	// pool's own PromQL queries, for a Prometheus metrics source.
	MetricsFamily  loadmetrics.Family
	NoMetrics      bool
	MetricsQueries loadmetrics.Queries
}

// Options configures a Gateway. The zero value is valid: every zero field
// takes its default.
type Options struct {
	// Policy is "prefix-aware" (the default), "least-cost", "p2c",
	// "least-request", "round-robin" or "weighted"; see PolicyNames.
	Policy string
	// CustomPolicy, if non-nil, is used instead of the one named by Policy.
	CustomPolicy Policy
	// MaxRetries is how many further attempts, each on a backend not yet
	// tried by the request, follow a failed one. 0 means DefaultMaxRetries;
	// negative disables retries.
	MaxRetries int
	// MaxBodyBytes bounds the request body, which is buffered so that it can
	// be replayed; a larger body is answered 413. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// WaitForBackend is how long a request waits, in total, for a candidate
	// backend to appear when there is none (none published, all draining or
	// down, or all tried) before it is answered. 0 means
	// DefaultWaitForBackend; negative means do not wait.
	WaitForBackend time.Duration

	// Waker, if set, wakes a pool that has no ready instance when a
	// request for it arrives; while the pool can grow the request is held
	// (see the activator) instead of answered 503 after WaitForBackend.
	Waker Waker
	// ActivatorQueue bounds the requests held per pool; more are answered
	// 429. 0 means DefaultActivatorQueue.
	ActivatorQueue int
	// ActivatorWait bounds how long a held request waits for an instance
	// before it is answered 503. 0 means DefaultActivatorWait.
	ActivatorWait time.Duration
	// KeepAliveEvery paces the keep-alive bytes sent to held streaming
	// clients. 0 means DefaultKeepAliveEvery.
	KeepAliveEvery time.Duration

	// BackendMaxInFlight, if positive, caps the requests in flight on each
	// backend; when every eligible backend of a request's pool is at the
	// cap, the request waits in the pool's fair queue (fairshare.go). 0:
	// no cap, nothing waits for a busy backend.
	BackendMaxInFlight int
	// BackendQueue bounds the requests waiting per pool; 0 means
	// DefaultBackendQueue.
	BackendQueue int
	// BackendQueueWait bounds how long a request waits for a slot before
	// it is answered 429; 0 means DefaultBackendQueueWait.
	BackendQueueWait time.Duration

	// ProbeInterval is the period of the active probe. 0 means
	// DefaultProbeInterval; negative disables probing.
	ProbeInterval time.Duration
	// ProbePath is the path probed with GET on every backend. A probe
	// succeeds on any status from 200 to 499: the probe asks whether the
	// server answers, and "/" answers 200 on Ollama and 404 on vLLM, so the
	// default works on all backend kinds. 0 means DefaultProbePath ("/");
	// use "/health" to probe vLLM's engine health.
	ProbePath string
	// ProbeTimeout bounds one probe. 0 means DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// ProbeFailures is how many consecutive failed probes mark a backend
	// unhealthy. A probe that cannot connect at all (refused, unreachable,
	// dial timeout) marks it unhealthy at once. 0 means
	// DefaultProbeFailures.
	ProbeFailures int
	// ProbeBeforeAdmit makes new backends wait for their first successful
	// probe before they get requests. By default they are eligible at once:
	// the pool controller only publishes Ready instances.
	ProbeBeforeAdmit bool

	// EjectAfter is how many consecutive failed attempts (transport errors
	// and 5xx answers) eject a backend from selection for EjectFor. A
	// failure to connect ejects at once. 0 means DefaultEjectAfter;
	// negative disables passive ejection.
	EjectAfter int
	// EjectFor is the first ejection's length; each further ejection without
	// a success in between doubles it, up to MaxEjectFor. 0 means
	// DefaultEjectFor.
	EjectFor time.Duration
	// MaxEjectFor caps the ejection length. 0 means DefaultMaxEjectFor.
	MaxEjectFor time.Duration

	// DialTimeout bounds connecting to a backend, so that a vanished host
	// does not hang a request. Used only when Transport is nil. 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a backend's response
	// headers. Used only when Transport is nil. 0 means no limit: Ollama
	// answers a non-streaming request only when the whole generation is
	// done.
	ResponseHeaderTimeout time.Duration
	// StreamIdleTimeout bounds the silence of a backend once its answer
	// has begun: when no byte of the body arrives for this long, the
	// attempt is cancelled and the client connection aborted (the answer
	// is committed, so it cannot be retried). It catches a backend that
	// hangs mid-stream without closing its connection. 0 means no limit.
	StreamIdleTimeout time.Duration
	// CORS, if non-nil, makes the gateway answer CORS preflights itself
	// (204, without a backend) and add the Access-Control-* headers to
	// every answer; see CORS. nil: requests, preflights included, pass to
	// the backends unchanged.
	CORS *CORS

	// Transport carries requests and probes to the backends. nil means a
	// transport owned by the gateway, tuned for many keep-alive connections
	// per backend.
	Transport http.RoundTripper

	// Metrics, if non-nil, is read every MetricsInterval in the background
	// for the backends' own load (queue depth above all), which the p2c
	// policy adds to the gateway's signals while it is fresh. The gateway
	// does not Close it. nil: the gateway's own signals only.
	Metrics loadmetrics.Source
	// MetricsInterval is the period of reading Metrics. 0 means
	// DefaultMetricsInterval.
	MetricsInterval time.Duration
	// MetricsMaxAge is the age beyond which a backend's metrics are stale
	// and ignored. 0 means four MetricsIntervals.
	MetricsMaxAge time.Duration
	// PrefixIndexBlocks is how many prefix blocks (of
	// DefaultPrefixBlockBytes, about 16 tokens) the prefix-aware policy
	// remembers per backend: size it like one backend's prefix cache
	// (tokens / 16). It takes 8 bytes a block per backend, made when the
	// backend's first prompt is recorded (256 KiB at the default). 0 means
	// DefaultPrefixIndexBlocks; ignored by other policies and by a
	// CustomPolicy that sets its own.
	PrefixIndexBlocks int
	// LatencyDecay is the time constant of the peak-EWMA latency estimate
	// (see Upstream.PeakLatency). 0 means DefaultLatencyDecay.
	LatencyDecay time.Duration

	// Clock drives probes, ejections, waits, metric ages and latency
	// decay. nil means the real clock. Latency samples are always measured
	// in real time.
	Clock clock.Clock
	// Registry, if non-nil, gets the gateway's metrics.
	Registry prometheus.Registerer
	// Logger gets health transitions. nil means no logging.
	Logger *slog.Logger

	// OnUsage, if non-nil, is given the token counts of OpenAI-style
	// streams whose client did not ask for them: on a streamed POST
	// /v1/chat/completions or /v1/completions without
	// stream_options.include_usage, the gateway sets it on the request to
	// the backend, removes the usage chunk from the client's stream and
	// calls OnUsage with it as soon as it arrives, before the rest of the
	// stream reaches the client (concurrently for concurrent requests). The client's other chunks carry "usage": null,
	// as the OpenAI API sends them with include_usage. nil: requests and
	// streams pass unchanged.
	OnUsage UsageFunc
}

// Gateway is the data plane: an http.Handler that proxies each request to
// one backend, retrying failed attempts on others. Its methods are safe for
// concurrent use.
type Gateway struct {
	workers       serveWorkers // serveApart's goroutines
	policy        Policy
	prefix        *PrefixAware // g.policy, if it is one: it gets the prompt
	transport     http.RoundTripper
	ownTransport  *http.Transport
	h1            *h1.Client // the proxied requests' client (backend.go); nil: transport
	probeOnce     sync.Once
	probeRT       http.RoundTripper
	clock         clock.Clock
	log           *slog.Logger
	metrics       *metrics
	maxRetries    int
	maxBody       int64
	waitFor       time.Duration
	waker         Waker
	act           *activator
	probeInterval time.Duration
	probePath     string
	probeTimeout  time.Duration
	probeFailures int
	probeAdmit    bool
	ejectAfter    int
	ejectFor      time.Duration
	maxEjectFor   time.Duration

	metricsSrc loadmetrics.Source // nil: none
	// loadedSeen: some backend's metrics listed its loaded models
	// (Ollama's /api/ps), so requests' models are read to prefer them.
	loadedSeen      atomic.Bool
	metricsInterval time.Duration
	metricsMaxAge   time.Duration
	metricsTimeout  time.Duration
	metricsErr      atomic.Pointer[string] // the source's last error; nil if it worked
	metricsDone     chan struct{}
	latencyDecay    time.Duration
	onUsage         UsageFunc // nil: streams' usage is not asked for
	streamIdle      time.Duration
	cors            *cors.Cors // nil: CORS passes through

	fair   *fairShare // nil: no Options.BackendMaxInFlight
	table  atomic.Pointer[table]
	splits atomic.Pointer[map[string][]VersionWeight] // nil: no version split

	mu      sync.Mutex    // serializes SetBackends and guards the fields below
	retired []*Upstream   // removed from their pool, requests still in flight
	changed chan struct{} // closed and replaced on every change that may add a candidate

	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	kick      chan struct{} // asks the prober for a round now
	probeDone chan struct{}
	closeOnce sync.Once

	readWake, probeWake *wakeup // a request wakes the sleeping loops (idle.go)
}

// table is an immutable snapshot of the published backends.
type table struct {
	pools map[string][]*Upstream
	all   []*Upstream
	byID  map[string]*Upstream
	// modelAware: some backend publishes its models, so requests' models
	// are read.
	modelAware bool
	// known is every pool ever published, with backends or without (a
	// pool at zero): the pools a request that names none may wake.
	known []string
}

var emptyTable = &table{pools: map[string][]*Upstream{}, byID: map[string]*Upstream{}}

// New validates opts, applies defaults and returns a Gateway with no
// backends. Its probes run until Close.
func New(opts Options) (*Gateway, error) {
	policy := opts.CustomPolicy
	if policy == nil {
		var err error
		if policy, err = NewPolicy(opts.Policy); err != nil {
			return nil, fmt.Errorf("gateway: Options.Policy: %w", err)
		}
	}
	g := &Gateway{
		workers:         serveWorkers{max: 256},
		policy:          policy,
		transport:       opts.Transport,
		clock:           opts.Clock,
		log:             opts.Logger,
		maxRetries:      opts.MaxRetries,
		maxBody:         opts.MaxBodyBytes,
		waitFor:         opts.WaitForBackend,
		waker:           opts.Waker,
		probeInterval:   opts.ProbeInterval,
		probePath:       opts.ProbePath,
		probeTimeout:    opts.ProbeTimeout,
		probeFailures:   opts.ProbeFailures,
		probeAdmit:      opts.ProbeBeforeAdmit,
		ejectAfter:      opts.EjectAfter,
		ejectFor:        opts.EjectFor,
		maxEjectFor:     opts.MaxEjectFor,
		metricsSrc:      opts.Metrics,
		metricsInterval: opts.MetricsInterval,
		metricsMaxAge:   opts.MetricsMaxAge,
		latencyDecay:    opts.LatencyDecay,
		onUsage:         opts.OnUsage,
		streamIdle:      opts.StreamIdleTimeout,
		changed:         make(chan struct{}),
		kick:            make(chan struct{}, 1),
		readWake:        newWakeup(),
		probeWake:       newWakeup(),
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("gateway: Options.%s: "+format, append([]any{field}, args...)...))
	}
	switch {
	case g.maxRetries == 0:
		g.maxRetries = DefaultMaxRetries
	case g.maxRetries < 0:
		g.maxRetries = 0
	}
	switch {
	case g.maxBody == 0:
		g.maxBody = DefaultMaxBodyBytes
	case g.maxBody < 0:
		bad("MaxBodyBytes", "must not be negative, got %d", g.maxBody)
	}
	actQueue, actWait, keepAlive := opts.ActivatorQueue, opts.ActivatorWait, opts.KeepAliveEvery
	if actQueue == 0 {
		actQueue = DefaultActivatorQueue
	}
	if actWait == 0 {
		actWait = DefaultActivatorWait
	}
	if keepAlive == 0 {
		keepAlive = DefaultKeepAliveEvery
	}
	switch {
	case actQueue < 0:
		bad("ActivatorQueue", "must not be negative, got %d", actQueue)
	case actWait < 0:
		bad("ActivatorWait", "must not be negative, got %v", actWait)
	case keepAlive < 0:
		bad("KeepAliveEvery", "must not be negative, got %v", keepAlive)
	}
	g.act = newActivator(actQueue, actWait, keepAlive)
	g.fair = newFairShare(opts, bad)
	switch {
	case g.waitFor == 0:
		g.waitFor = DefaultWaitForBackend
	case g.waitFor < 0:
		g.waitFor = 0
	}
	if g.probeInterval == 0 {
		g.probeInterval = DefaultProbeInterval
	}
	switch {
	case g.probePath == "":
		g.probePath = DefaultProbePath
	case !strings.HasPrefix(g.probePath, "/"):
		bad("ProbePath", "must start with /, got %q", g.probePath)
	}
	switch {
	case g.probeTimeout == 0:
		g.probeTimeout = DefaultProbeTimeout
	case g.probeTimeout < 0:
		bad("ProbeTimeout", "must not be negative, got %v", g.probeTimeout)
	}
	switch {
	case g.probeFailures == 0:
		g.probeFailures = DefaultProbeFailures
	case g.probeFailures < 0:
		bad("ProbeFailures", "must not be negative, got %d", g.probeFailures)
	}
	if g.probeAdmit && g.probeInterval < 0 {
		bad("ProbeBeforeAdmit", "needs probing, but ProbeInterval is %v (disabled)", g.probeInterval)
	}
	if g.ejectAfter == 0 {
		g.ejectAfter = DefaultEjectAfter
	}
	switch {
	case g.ejectFor == 0:
		g.ejectFor = DefaultEjectFor
	case g.ejectFor < 0:
		bad("EjectFor", "must not be negative, got %v", g.ejectFor)
	}
	switch {
	case g.maxEjectFor == 0:
		g.maxEjectFor = max(DefaultMaxEjectFor, g.ejectFor)
	case g.maxEjectFor < g.ejectFor:
		bad("MaxEjectFor", "must be at least EjectFor (%v), got %v", g.ejectFor, g.maxEjectFor)
	}
	if opts.DialTimeout < 0 {
		bad("DialTimeout", "must not be negative, got %v", opts.DialTimeout)
	}
	if opts.ResponseHeaderTimeout < 0 {
		bad("ResponseHeaderTimeout", "must not be negative, got %v", opts.ResponseHeaderTimeout)
	}
	if opts.StreamIdleTimeout < 0 {
		bad("StreamIdleTimeout", "must not be negative, got %v", opts.StreamIdleTimeout)
	}
	if opts.CORS != nil {
		if err := opts.CORS.validate("gateway: Options.CORS."); err != nil {
			errs = append(errs, err)
		} else {
			g.cors = newCORS(opts.CORS)
		}
	}
	switch {
	case g.metricsInterval == 0:
		g.metricsInterval = DefaultMetricsInterval
	case g.metricsInterval < 0:
		bad("MetricsInterval", "must not be negative, got %v", g.metricsInterval)
	}
	switch {
	case g.metricsMaxAge == 0:
		g.metricsMaxAge = 4 * g.metricsInterval
	case g.metricsMaxAge < 0:
		bad("MetricsMaxAge", "must not be negative, got %v", g.metricsMaxAge)
	}
	switch {
	case g.latencyDecay == 0:
		g.latencyDecay = DefaultLatencyDecay
	case g.latencyDecay < 0:
		bad("LatencyDecay", "must not be negative, got %v", g.latencyDecay)
	}
	// A snapshot may take up to half the max age, so that one slow read
	// does not by itself make the metrics stale.
	g.metricsTimeout = max(g.metricsMaxAge/2, g.metricsInterval)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if g.clock == nil {
		g.clock = clock.RealClock{}
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	var pa *PrefixAware
	switch p := g.policy.(type) {
	case *PrefixAware:
		pa = p
	case *LeastCost:
		pa = &p.PrefixAware
	}
	if pa != nil {
		if pa.IndexBlocks == 0 {
			pa.IndexBlocks = opts.PrefixIndexBlocks
		}
		if pa.Clock == nil {
			pa.Clock = g.clock
		}
		if pa.MaxAge == 0 {
			pa.MaxAge = g.metricsMaxAge
		}
		if pa.Decay == 0 {
			pa.Decay = g.latencyDecay
		}
	}
	if p, ok := g.policy.(*PrefixAware); ok {
		g.prefix = p
	}
	if p, ok := g.policy.(*P2C); ok {
		if p.Clock == nil {
			p.Clock = g.clock
		}
		if p.MaxAge == 0 {
			p.MaxAge = g.metricsMaxAge
		}
		if p.Decay == 0 {
			p.Decay = g.latencyDecay
		}
	}
	if g.transport == nil {
		g.ownTransport = newTransport(cmp(opts.DialTimeout, DefaultDialTimeout), opts.ResponseHeaderTimeout)
		g.transport = g.ownTransport
		switch backendClient {
		case "h1":
			g.h1 = newBackendClient(cmp(opts.DialTimeout, DefaultDialTimeout), opts.ResponseHeaderTimeout)
			g.transport = g.h1
		case "transport":
		default:
			return nil, fmt.Errorf("gateway: the build's backendClient is %q: want \"h1\" or \"transport\" (-ldflags -X .../internal/gateway.backendClient=)", backendClient)
		}
	}
	g.table.Store(emptyTable)
	if opts.Registry != nil {
		m, err := newMetrics(opts.Registry, g)
		if err != nil {
			return nil, fmt.Errorf("gateway: Options.Registry: %w", err)
		}
		g.metrics = m
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.probeDone = make(chan struct{})
	if g.probeInterval > 0 {
		go g.probeLoop()
	} else {
		close(g.probeDone)
	}
	g.metricsDone = make(chan struct{})
	if g.metricsSrc != nil {
		go g.metricsLoop()
	} else {
		close(g.metricsDone)
	}
	return g, nil
}

func cmp(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// transportBufferSize is the read and the write buffer of each backend
// connection.
const transportBufferSize = 4 << 10

// newTransport returns the shared transport: plain HTTP/1.1, no proxy from
// the environment, no transparent decompression (Accept-Encoding and the
// encoded body pass through), many idle keep-alive connections per backend
// (every in-flight stream holds one) and a short dial timeout.
func newTransport(dialTimeout, headerTimeout time.Duration) *http.Transport {
	d := &net.Dialer{
		Timeout: dialTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3,
		},
	}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		MaxIdleConns:          0, // no global limit; per host below
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		// Each backend connection keeps these for its life, and a stream
		// holds its connection for minutes: 4 KiB (the standard library's
		// default) instead of 32 KiB each, with 4 KiB copy buffers for
		// streams, cut the gateway's heap per open stream from about 118 KB
		// to 29 KB (BENCHMARKS.md, "Long streams"). Larger
		// bodies are not slowed down: bufio passes a read or write at least
		// its size straight through, and commit reads fixed-length bodies
		// 32 KiB at a time.
		WriteBufferSize: transportBufferSize,
		ReadBufferSize:  transportBufferSize,
	}
}

// Close stops the probes and the reading of Options.Metrics (without
// closing that source), unregisters the metrics and closes idle
// connections. In-flight requests continue. Close is idempotent.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		g.cancel()
		<-g.probeDone
		<-g.metricsDone
		g.metrics.unregister()
		if g.ownTransport != nil {
			g.ownTransport.CloseIdleConnections()
		}
		if g.h1 != nil {
			g.h1.Close()
		}
		g.workers.close()
	})
}

// SetBackends atomically replaces the set of backends of pool (an empty or
// nil bs removes the pool). It is in force when SetBackends returns: the
// next request sees the new set, a backend now marked draining or left out
// gets no new request, and requests in flight on it continue. Backends whose
// ID is already known keep their load, health and statistics. Entries
// without ID or Address, and repeated IDs, are ignored.
func (g *Gateway) SetBackends(pool string, bs []Backend) {
	g.mu.Lock()
	defer g.mu.Unlock()

	old := g.table.Load()
	next := &table{
		pools: make(map[string][]*Upstream, len(old.pools)+1),
		byID:  make(map[string]*Upstream, len(old.byID)+len(bs)),
	}
	for name, ups := range old.pools {
		if name != pool {
			next.pools[name] = ups
		}
	}
	next.known = old.known
	if !slices.Contains(next.known, pool) {
		next.known = append(slices.Clone(old.known), pool)
		slices.Sort(next.known)
	}
	keep := make(map[*Upstream]bool, len(bs))
	seen := make(map[string]bool, len(bs))
	list := make([]*Upstream, 0, len(bs))
	added := false
	for _, b := range bs {
		if b.ID == "" || b.Address == "" {
			g.log.Warn("gateway: ignoring backend without ID or address", "pool", pool, "id", b.ID, "address", b.Address)
			continue
		}
		w := int64(b.Weight)
		if w <= 0 {
			w = DefaultWeight
		}
		if seen[b.ID] {
			g.log.Warn("gateway: ignoring repeated backend ID", "pool", pool, "id", b.ID)
			continue
		}
		seen[b.ID] = true
		u := old.byID[b.ID]
		if u != nil && (u.pool != pool || u.address != b.Address) {
			// Same ID, new identity: the old one leaves (below or from its
			// other pool here), a fresh Upstream takes its place.
			if u.pool != pool {
				next.pools[u.pool] = slices.DeleteFunc(slices.Clone(next.pools[u.pool]), func(x *Upstream) bool { return x == u })
				if len(next.pools[u.pool]) == 0 {
					delete(next.pools, u.pool)
				}
				g.retireLocked(u)
			}
			u = nil
		}
		if u == nil {
			u = g.reviveLocked(b.ID, pool, b.Address)
		}
		if u == nil {
			u = newUpstream(b.ID, pool, b.Address, w, !g.probeAdmit)
			added = true
		}
		u.weight.Store(w)
		u.draining.Store(b.Draining)
		u.setMeta(b.Models, b.Version)
		u.setMetricsFamily(b.MetricsFamily, b.MetricsQueries, b.NoMetrics)
		keep[u] = true
		list = append(list, u)
	}
	for _, u := range old.pools[pool] {
		if !keep[u] {
			g.retireLocked(u)
		}
	}
	if len(list) > 0 {
		next.pools[pool] = list
	}
	// all in a stable order (pools by name, then as published), so that
	// round-robin and tie breaking do not depend on map iteration.
	names := slices.Sorted(maps.Keys(next.pools))
	for _, name := range names {
		for _, u := range next.pools[name] {
			next.all = append(next.all, u)
			next.byID[u.id] = u
			if len(u.Models()) > 0 {
				next.modelAware = true
			}
		}
	}
	g.table.Store(next)
	g.reapLocked()
	g.notifyLocked()
	if added && g.probeAdmit {
		select {
		case g.kick <- struct{}{}:
		default:
		}
	}
}

// retireLocked takes u out of selection; it stays visible to InFlight, the
// probes and the admin view until its last request finishes.
func (g *Gateway) retireLocked(u *Upstream) {
	u.removed.Store(true)
	if !slices.Contains(g.retired, u) {
		g.retired = append(g.retired, u)
	}
}

// reviveLocked brings back a retired Upstream with the same identity.
func (g *Gateway) reviveLocked(id, pool, address string) *Upstream {
	for i, u := range g.retired {
		if u.id == id && u.pool == pool && u.address == address {
			g.retired = slices.Delete(g.retired, i, i+1)
			u.removed.Store(false)
			return u
		}
	}
	return nil
}

// reapLocked forgets retired Upstreams whose last request has finished, and
// their metric series. Requests record their metrics before they release
// their backend, so nothing re-creates the series afterwards.
func (g *Gateway) reapLocked() {
	t := g.table.Load()
	g.retired = slices.DeleteFunc(g.retired, func(u *Upstream) bool {
		if u.inflight.Load() > 0 {
			return false
		}
		if _, back := t.byID[u.id]; !back {
			g.metrics.forget(u.id)
		}
		return true
	})
}

func (g *Gateway) reap() {
	g.mu.Lock()
	g.reapLocked()
	g.mu.Unlock()
}

// notifyLocked wakes the requests waiting for a candidate.
func (g *Gateway) notifyLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *Gateway) notify() {
	g.mu.Lock()
	g.notifyLocked()
	g.mu.Unlock()
}

func (g *Gateway) changeCh() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// upstreams returns every Upstream the gateway knows: published and retired.
func (g *Gateway) upstreams() []*Upstream {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.table.Load()
	return append(slices.Clip(t.all), g.retired...)
}

// InFlight returns the number of requests in flight on the backend with that
// ID, including after it was marked draining or removed from its pool, until
// they finish; 0 for an unknown ID. Once it has returned 0 for a backend that
// SetBackends had already marked draining or removed, no request will start
// on that backend (unless it is published again as not draining), so the
// instance can be terminated.
func (g *Gateway) InFlight(id string) int {
	var n int64
	if u := g.table.Load().byID[id]; u != nil {
		n += u.inflight.Load()
	}
	g.mu.Lock()
	for _, u := range g.retired {
		if u.id == id {
			n += u.inflight.Load()
		}
	}
	g.mu.Unlock()
	return int(n)
}

// BackendStatus is one backend's state, for the admin API and dashboard.
type BackendStatus struct {
	ID       string `json:"id"`
	Pool     string `json:"pool"`
	Address  string `json:"address"`
	Weight   int    `json:"weight"`
	Draining bool   `json:"draining"`
	// Removed: no longer published, still serving in-flight requests.
	Removed bool `json:"removed,omitempty"`
	// Healthy according to the active probe.
	Healthy bool `json:"healthy"`
	// Ejected by passive health checking, until EjectedUntil.
	Ejected      bool      `json:"ejected"`
	EjectedUntil time.Time `json:"ejectedUntil,omitzero"`
	// Eligible: would get new requests now (not draining, healthy, not
	// ejected, not removed).
	Eligible bool `json:"eligible"`
	InFlight int  `json:"inFlight"`
	// Requests counts attempts sent; Failures the failed ones.
	Requests            uint64 `json:"requests"`
	Failures            uint64 `json:"failures"`
	ConsecutiveFailures int    `json:"consecutiveFailures"`
	// EWMALatency: moving average of the time to response headers.
	EWMALatency time.Duration `json:"ewmaLatencyNs"`
	LastError   string        `json:"lastError,omitempty"`
	// Models and Version as published.
	Models  []string `json:"models,omitempty"`
	Version string   `json:"version,omitempty"`
	// PeakTTFT and PeakLatency: peak EWMAs of the time to response headers
	// of streamed and of complete responses, as p2c sees them now;
	// ErrorRate: EWMA of failed attempts.
	PeakTTFT    time.Duration `json:"peakTTFTNs"`
	PeakLatency time.Duration `json:"peakLatencyNs"`
	ErrorRate   float64       `json:"errorRate"`
	// QueueDepth: requests waiting on the backend per Options.Metrics, if
	// MetricsFresh.
	QueueDepth   float64 `json:"queueDepth,omitempty"`
	MetricsFresh bool    `json:"metricsFresh"`
	// MetricsFamily: the server family whose metric names were read
	// ("vllm", "sglang", "tgi", "llamacpp"), if MetricsFresh and the source
	// says.
	MetricsFamily string `json:"metricsFamily,omitempty"`
	// Concurrency: the requests the backend runs at once before queueing,
	// as estimated from its metrics; 0 if unknown.
	Concurrency float64 `json:"concurrency,omitempty"`
	// Signals are the backend's own metrics as last read, with their
	// source and age, and what is missing.
	Signals *BackendSignals `json:"signals"`
}

// Backends returns the state of every backend, published or still draining
// in-flight requests after removal, sorted by pool and ID.
func (g *Gateway) Backends() []BackendStatus {
	now := g.clock.Now()
	ups := g.upstreams()
	out := make([]BackendStatus, 0, len(ups))
	for _, u := range ups {
		until := u.ejectedUntil.Load()
		ejected := u.ejected(now.UnixNano())
		u.mu.Lock()
		lastErr := u.lastErr
		u.mu.Unlock()
		s := BackendStatus{
			ID:                  u.id,
			Pool:                u.pool,
			Address:             u.address,
			Weight:              int(u.weight.Load()),
			Draining:            u.draining.Load(),
			Removed:             u.removed.Load(),
			Healthy:             u.healthy.Load(),
			Ejected:             ejected,
			InFlight:            int(u.inflight.Load()),
			Requests:            u.requests.Load(),
			Failures:            u.failures.Load(),
			ConsecutiveFailures: int(u.consecutive.Load()),
			EWMALatency:         u.EWMA(),
			LastError:           lastErr,
			Models:              u.Models(),
			Version:             u.Version(),
			PeakTTFT:            u.PeakTTFT(now, g.latencyDecay),
			PeakLatency:         u.PeakLatency(now, g.latencyDecay),
			ErrorRate:           u.ErrorRate(),
			Concurrency:         math.Float64frombits(u.concBits.Load()),
			Signals:             g.backendSignals(u, now),
		}
		if m := u.ext.Load(); loadFresh(m, now, g.metricsMaxAge) {
			s.MetricsFresh = true
			s.MetricsFamily = m.Family
			if m.Has&loadmetrics.FieldQueueDepth != 0 {
				s.QueueDepth = m.QueueDepth
			}
		}
		if ejected {
			s.EjectedUntil = time.Unix(0, until)
		}
		s.Eligible = !s.Draining && !s.Removed && s.Healthy && !s.Ejected
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b BackendStatus) int {
		if c := strings.Compare(a.Pool, b.Pool); c != 0 {
			return c
		}
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		// A retired twin after the published one.
		switch {
		case a.Removed == b.Removed:
			return 0
		case b.Removed:
			return -1
		}
		return 1
	})
	return out
}
