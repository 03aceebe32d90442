package gateway

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// noBackend is the pool and backend label of requests that no backend
// answered. (The pool a client asked for is not used as a label: it is
// client input, and would make the series count unbounded.)
const noBackend = "none"

// codeLabels caches the status code label values.
var codeLabels = func() (l [600]string) {
	for i := range l {
		l[i] = strconv.Itoa(i)
	}
	return l
}()

func codeLabel(code int) string {
	if code >= 0 && code < len(codeLabels) {
		return codeLabels[code]
	}
	return strconv.Itoa(code)
}

// metrics is the gateway's Prometheus instrumentation. A nil *metrics (no
// Options.Registry) records nothing.
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector
	// traffic holds only requests and duration, for RequestMetrics.
	traffic *prometheus.Registry

	requests *prometheus.CounterVec
	// counters caches the requests counter of each series seen, so that
	// a request does not hash its labels and look them up in the vector:
	// copied on write under countersMu, dropped by forget.
	counters   atomic.Pointer[map[requestSeries]prometheus.Counter]
	countersMu sync.Mutex

	duration  prometheus.Histogram
	retries   *prometheus.CounterVec
	aborts    prometheus.Counter
	ejections prometheus.Counter
	wakes     prometheus.Counter
	shed      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, g *Gateway) (*metrics, error) {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidegpu_gateway_requests_total",
			Help: "Requests answered by the gateway, by the pool and backend that answered (\"none\" if none did) and status code (499: the client went away first).",
		}, []string{"pool", "backend", "code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tidegpu_gateway_request_duration_seconds",
			Help:    "Time from receiving a request to the end of its response, streams included.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidegpu_gateway_retries_total",
			Help: "Attempts made on another backend after a failed one, by the failure: connect, transport (reset, EOF before headers, timeout), down (backend declared dead by the probe while the attempt waited), status (a 502 or 503 answer).",
		}, []string{"reason"}),
		aborts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidegpu_gateway_stream_aborts_total",
			Help: "Responses cut off because their backend failed after the first byte had been sent to the client.",
		}),
		ejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidegpu_gateway_ejections_total",
			Help: "Passive ejections of backends after consecutive failures.",
		}),
		wakes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidegpu_gateway_activator_requests_total",
			Help: "Requests the activator held because their pool had no ready instance and could grow (a pool at zero).",
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidegpu_gateway_queue_shed_total",
			Help: "Requests answered 429 by the fair queue of a saturated pool (\"any\": requests naming no pool), by tenant (empty without API keys) and reason: full (the queue was full of requests that go first), displaced (a request that goes first took its place), wait (it waited --backend-queue-wait).",
		}, []string{"pool", "tenant", "reason"}),
	}
	// The event loop's counters are the process's (h1.LoopStats): one
	// gateway per registry in every binary.
	loopStreams := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "tidegpu_gateway_stream_loop_streams_total",
		Help: "Streams carried by an event loop (both sockets out of the runtime's poller while the stream lasts). Streams it cannot take, such as those of HTTP/1.0 clients or with a known body length, are copied on their handler's goroutine instead.",
	}, func() float64 { n, _ := h1.LoopStats(); return float64(n) })
	loopHolds := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "tidegpu_gateway_stream_loop_holds_total",
		Help: "Times an event loop held a stream's bytes for a client slower than its backend (its backend is not read until the client takes them).",
	}, func() float64 { _, n := h1.LoopStats(); return float64(n) })
	m.collectors = []prometheus.Collector{m.requests, m.duration, m.retries, m.aborts, m.ejections, m.wakes, m.shed, &stateCollector{g: g}, loopStreams, loopHolds}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	m.traffic = prometheus.NewRegistry()
	m.traffic.MustRegister(m.requests, m.duration)
	return m, nil
}

// RequestMetrics returns a Gatherer of the gateway's request counter and
// request-duration histogram only (tidegpu_gateway_requests_total,
// tidegpu_gateway_request_duration_seconds, the same collectors as in
// Options.Registry), or nil without Options.Registry. It is what the
// dashboard's traffic sampler reads every few seconds: gathering the whole
// registry instead runs every collector in it (the process collector reads
// /proc), which cost an idle gateway a fifth of its CPU (BENCHMARKS.md,
// "Idle cost").
func (g *Gateway) RequestMetrics() prometheus.Gatherer {
	if g.metrics == nil {
		return nil // an untyped nil: no *Registry inside
	}
	return g.metrics.traffic
}

func (m *metrics) unregister() {
	if m == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

func (m *metrics) request(pool, backend string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.requestCounter(requestSeries{pool, backend, code}).Inc()
	m.duration.Observe(d.Seconds())
}

// requestSeries names one series of tidegpu_gateway_requests_total.
type requestSeries struct {
	pool, backend string
	code          int
}

// maxCachedSeries bounds the request counters cached; the series beyond
// are looked up in the vector every time.
const maxCachedSeries = 1024

// requestCounter returns the counter of s, from the cache if it is there.
func (m *metrics) requestCounter(s requestSeries) prometheus.Counter {
	if p := m.counters.Load(); p != nil {
		if c, ok := (*p)[s]; ok {
			return c
		}
	}
	// Under countersMu, so that forget cannot delete the series between
	// the lookup and the caching.
	m.countersMu.Lock()
	defer m.countersMu.Unlock()
	c := m.requests.WithLabelValues(s.pool, s.backend, codeLabel(s.code))
	var old map[requestSeries]prometheus.Counter
	if p := m.counters.Load(); p != nil {
		old = *p
	}
	if len(old) < maxCachedSeries {
		next := make(map[requestSeries]prometheus.Counter, len(old)+1)
		for k, v := range old {
			next[k] = v
		}
		next[s] = c
		m.counters.Store(&next)
	}
	return c
}

func (m *metrics) retry(reason string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(reason).Inc()
}

func (m *metrics) aborted() {
	if m == nil {
		return
	}
	m.aborts.Inc()
}

func (m *metrics) activated() {
	if m == nil {
		return
	}
	m.wakes.Inc()
}

func (m *metrics) shedRequest(pool, tenant, reason string) {
	if m == nil {
		return
	}
	m.shed.WithLabelValues(pool, tenant, reason).Inc()
}

func (m *metrics) ejected() {
	if m == nil {
		return
	}
	m.ejections.Inc()
}

// forget deletes the series of a backend that is gone.
func (m *metrics) forget(backend string) {
	if m == nil {
		return
	}
	m.countersMu.Lock()
	defer m.countersMu.Unlock()
	m.requests.DeletePartialMatch(prometheus.Labels{"backend": backend})
	m.counters.Store(nil)
}

var (
	inFlightDesc = prometheus.NewDesc("tidegpu_gateway_backend_in_flight",
		"Requests in flight on a backend, including one draining or removed from its pool.",
		[]string{"pool", "backend"}, nil)
	healthyDesc = prometheus.NewDesc("tidegpu_gateway_backend_healthy",
		"1 if the backend passes its probe and is not passively ejected, else 0.",
		[]string{"pool", "backend"}, nil)
	heldDesc = prometheus.NewDesc("tidegpu_gateway_activator_held",
		"Requests the activator holds for a pool with no ready instance, waiting for one to start.",
		[]string{"pool"}, nil)
	queuedDesc = prometheus.NewDesc("tidegpu_gateway_queued_requests",
		"Requests waiting in a saturated pool's fair queue for a backend below --backend-max-inflight, by pool (\"any\": requests naming no pool) and tenant (empty without API keys).",
		[]string{"pool", "tenant"}, nil)
	metricsFreshDesc = prometheus.NewDesc("tidegpu_gateway_backend_metrics_fresh",
		"1 if the backend's own metrics (queue depth and the rest) were read from the metrics source (label source) within the max age, else 0: the gateway balances it on its own measurements. source is \"gateway\" when no metrics source is set.",
		[]string{"pool", "backend", "source"}, nil)
)

// stateCollector reports the per-backend gauges from the gateway's live
// state at scrape time, so a backend that is gone has no series left.
type stateCollector struct{ g *Gateway }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inFlightDesc
	ch <- healthyDesc
	ch <- heldDesc
	ch <- queuedDesc
	ch <- metricsFreshDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	at := c.g.clock.Now()
	now := at.UnixNano()
	source := SignalGateway
	if c.g.metricsSrc != nil {
		source = c.g.metricsSrc.Name()
	}
	seen := make(map[[2]string]bool)
	for _, u := range c.g.upstreams() {
		key := [2]string{u.pool, u.id}
		if seen[key] {
			continue // a retired twin of a published backend: one series
		}
		seen[key] = true
		in := float64(c.g.InFlight(u.id))
		healthy := 0.0
		if u.healthy.Load() && !u.ejected(now) {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, in, u.pool, u.id)
		ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, healthy, u.pool, u.id)
		fresh := 0.0
		if loadFresh(u.ext.Load(), at, c.g.metricsMaxAge) {
			fresh = 1
		}
		src := source
		if u.noMetrics.Load() {
			src = SignalGateway // its pool reads none of its metrics
		}
		ch <- prometheus.MustNewConstMetric(metricsFreshDesc, prometheus.GaugeValue, fresh, u.pool, u.id, src)
	}
	c.g.act.mu.Lock()
	for pool, n := range c.g.act.held {
		ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(n), pool)
	}
	c.g.act.mu.Unlock()
	if c.g.fair != nil {
		for key, byTenant := range c.g.fair.waiting() {
			if key == "" {
				key = anyPool
			}
			for tenant, n := range byTenant {
				ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(n), key, tenant)
			}
		}
	}
}
