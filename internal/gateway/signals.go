package gateway

import (
	"context"
	"errors"
	"math"
	"time"

	"k8s.io/utils/clock"

	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
)

// Defaults of the load signals.
const (
	// DefaultMetricsInterval is how often Options.Metrics is read.
	DefaultMetricsInterval = 500 * time.Millisecond
	// DefaultMetricsMaxAge is the age beyond which a backend's metrics are
	// stale when Options.MetricsInterval is left at its default (4
	// intervals: a scrape or two may fail before balancing gives up on
	// them).
	DefaultMetricsMaxAge = 4 * DefaultMetricsInterval
	// DefaultLatencyDecay is the peak-EWMA time constant. Finagle and
	// Linkerd use 10 s for RPC services; an inference backend's pace
	// changes within one generation (a batch fills, a queue forms), and
	// ten seconds of memory of one slow answer would keep a fast backend
	// looking slow long after it is not.
	DefaultLatencyDecay = time.Second
	// SignalGateway is SignalState.Source when a pool is balanced on the
	// gateway's own signals only.
	SignalGateway = "gateway"
)

// errorPenalty scales the error rate in the score: a backend failing every
// attempt costs 1+errorPenalty times as much as a healthy one.
const errorPenalty = 4

// fullBatchSlowdown is how much slower each sequence of a full batch runs
// than one alone, as a fraction: the Score of a request that joins a batch
// of I running sequences out of B is 1 + fullBatchSlowdown·I/B of the
// backend's pace. 0.35 is the slowdown of the simulated backends of the
// routing benchmark's pool of issue 13 (5 % per extra sequence, batches of
// 8: 1 + 0.05 × 7), the one pool it was set on; decoding on a GPU is
// memory-bound, so a batch costs each of its sequences a fraction of what
// queueing would. It was 1 before (a full batch counted as twice an idle
// backend), which let an idle backend twice as slow look as cheap as a fast
// one with a third of its batch busy.
const fullBatchSlowdown = 0.35

// Load is what the p2c policy knows about one backend when it picks.
type Load struct {
	// InFlight counts requests in flight on the backend through this
	// gateway; always current.
	InFlight int64
	// Weight is the backend's relative capacity (Backend.Weight, > 0).
	Weight int64
	// TTFT is the peak-EWMA time to response headers of streamed responses
	// (an inference server sends them with the first token, so this is
	// the time to first token, queueing included); 0 means no sample yet.
	TTFT time.Duration
	// Latency is the same of complete (not streamed) responses, whose
	// headers come at the end of the generation; 0 means no sample yet.
	Latency time.Duration
	// ErrorRate is the EWMA of failed attempts, 0..1.
	ErrorRate float64
	// Queue is the number of requests waiting for a batch slot as the
	// backend reports it (vllm:num_requests_waiting), from every client,
	// not only this gateway; meaningful only if Fresh.
	Queue float64
	// Concurrency is how many requests the backend runs at once before it
	// queues, estimated from its metrics (see concurrencyEstimate); 0 if
	// unknown. It is a capacity, not a load: the last estimate is kept
	// while the metrics are stale or the source is down.
	Concurrency float64
	// Fresh says the backend's metrics came from the metrics source no
	// longer than MetricsMaxAge ago.
	Fresh bool
}

// Load returns the backend's load signals at now: metrics older than
// maxAge count as absent, and the latency estimate decays with decay.
func (u *Upstream) Load(now time.Time, maxAge, decay time.Duration) Load {
	l := Load{
		InFlight:  u.inflight.Load(),
		Weight:    u.weight.Load(),
		TTFT:      u.PeakTTFT(now, decay),
		Latency:   u.PeakLatency(now, decay),
		ErrorRate: u.ErrorRate(),
	}
	if m := u.ext.Load(); m != nil && m.Has&loadmetrics.FieldQueueDepth != 0 && m.Fresh(now, maxAge) {
		l.Queue, l.Fresh = m.QueueDepth, true
	}
	l.Concurrency = math.Float64frombits(u.concBits.Load())
	return l
}

// concurrencyEstimate estimates from one snapshot how many sequences a
// backend runs at once when full: its running sequences divided by the
// fraction of its KV cache they hold (vLLM admits sequences while KV-cache
// blocks are free, so this is the number of sequences like the current ones
// that fit; the simulator reports running/MaxBatch as its KV usage, which
// gives MaxBatch exactly). At least 1; false when the snapshot cannot tell
// (nothing running, or no KV-cache usage). Pure.
func concurrencyEstimate(m loadmetrics.BackendMetrics) (float64, bool) {
	const need = loadmetrics.FieldRunning | loadmetrics.FieldKVCacheUsage
	if m.Has&need != need || m.Running < 1 || !(m.KVCacheUsage > 0) {
		return 0, false
	}
	return max(1, m.Running/m.KVCacheUsage), true
}

// Basis says which signals a comparison of two backends uses: those both
// have (see Compare).
type Basis struct {
	// TTFT or else Latency is the pace L of the score; neither: L = 1.
	TTFT, Latency bool
	// Metrics: the queue depth from fresh metrics.
	Metrics bool
	// Concurrency: the batch size estimated from metrics.
	Concurrency bool
}

// Score is the cost of sending one more request to a backend with load l;
// lower is better:
//
//	score = L × work / W × (1 + 4·E)
//
//	work = 1 + I + Q                             batch size B unknown
//	work = 1 + s·min(I,B)/B + max(Q, I+1-B, 0)   B known
//	s = fullBatchSlowdown with a pace L, else 1
//
// where I is l.InFlight, Q is l.Queue if basis.Metrics (else 0), B is
// l.Concurrency if basis.Concurrency, W is l.Weight (a backend of weight
// 200 takes twice the requests of one of 100 at the same cost), E is
// l.ErrorRate, and L is l.TTFT in seconds if basis.TTFT, else l.Latency if
// basis.Latency, else 1.
//
// Without metrics — a backend that never published any, such as Ollama —
// this is the peak-EWMA cost of Finagle and Linkerd, L × (I+1): the
// expected wait grows with the work already there, paced by how slow the
// backend has recently been, so a backend three times slower gets a third
// of the concurrency.
//
// An inference server batches: up to B sequences decode together at nearly
// the speed of one, and only beyond B do requests wait for a slot. So with
// B known, the score estimates the time the request takes there, in units
// of the backend's pace: the requests running in the batch slow it down by
// s/B each (s = fullBatchSlowdown: a full batch runs each sequence 1+s
// times slower than an idle backend; the term also spreads load evenly over
// equal backends), and each request the new one
// would wait behind costs a whole unit: roughly the wait for a slot, which
// in a server of B slots frees every S/B (S the service time, about B × L
// for the models and batch sizes we run). That number is known at once from
// the gateway's own count, I+1-B, without waiting for the next metrics
// read; Q adds what the gateway cannot see (requests other clients, e.g.
// other gateway replicas, queued there) while the metrics are fresh. B is a
// capacity, not a load, so it keeps counting when the metrics go stale: a
// metrics outage loses Q, not the knowledge of batch sizes. E keeps a
// backend that fails fast (and so looks quick) from attracting traffic
// between passive ejections.
//
// The slowdown is a time: without a pace (no latency compared, L = 1) the
// score counts work, and a full batch counts as one unit (s = 1), as it
// did before the slowdown was modelled. The prefix-aware policy bounds the
// load of a prefix's backend on that count (twice the least loaded), and
// its benchmark is tuned on it. Pure.
func Score(l Load, basis Basis) float64 {
	w := float64(l.Weight)
	if w <= 0 {
		w = DefaultWeight
	}
	in := float64(l.InFlight)
	var q float64
	if basis.Metrics {
		q = max(l.Queue, 0)
	}
	lat, s := 1.0, 1.0
	switch {
	case basis.TTFT:
		lat, s = l.TTFT.Seconds(), fullBatchSlowdown
	case basis.Latency:
		lat, s = l.Latency.Seconds(), fullBatchSlowdown
	}
	work := 1 + in + q
	if basis.Concurrency && l.Concurrency > 0 {
		b := max(l.Concurrency, 1)
		work = 1 + s*min(in, b)/b + max(q, in+1-b)
	}
	e := min(max(l.ErrorRate, 0), 1)
	return lat * work / w * (1 + errorPenalty*e)
}

// Compare compares the scores of two backends: negative if a is the better
// choice, positive if b is, 0 if they tie. A signal counts only if both
// have it — TTFT if both have streamed, else whole-response latency if both
// have answered without streaming (the two are not comparable with each
// other), queue depth if both have fresh metrics, batch size if both have
// an estimate — so a backend whose metrics are stale or missing is neither
// favoured (as an idle one would be) nor shunned: the pair is compared on
// what is known of both, down to in-flight requests alone. Pure.
func Compare(a, b Load) int {
	basis := Basis{
		TTFT:        a.TTFT > 0 && b.TTFT > 0,
		Latency:     a.Latency > 0 && b.Latency > 0,
		Metrics:     a.Fresh && b.Fresh,
		Concurrency: a.Concurrency > 0 && b.Concurrency > 0,
	}
	sa, sb := Score(a, basis), Score(b, basis)
	switch {
	case sa < sb:
		return -1
	case sa > sb:
		return 1
	}
	return 0
}

// SignalState says what a pool is balanced on.
type SignalState struct {
	// Source is the metrics source's name while at least one of the pool's
	// backends has fresh metrics from it, else SignalGateway: balancing on
	// in-flight requests, latency and errors measured by the gateway.
	Source string `json:"source"`
	// Fresh is the number of the pool's backends with fresh metrics.
	Fresh int `json:"fresh"`
	// Backends is the number of the pool's published backends.
	Backends int `json:"backends"`
	// Err is the metrics source's error at its last read, if it failed
	// (for some backends or all).
	Err string `json:"error,omitempty"`
}

// SignalStatus returns, for every pool with published backends, which
// signals balance it. A pool on SignalGateway while Options.Metrics is set
// has lost its metrics (e.g. Prometheus is down): balancing goes on with the
// gateway's own signals.
func (g *Gateway) SignalStatus() map[string]SignalState {
	t := g.table.Load()
	now := g.clock.Now()
	var errText string
	if p := g.metricsErr.Load(); p != nil {
		errText = *p
	}
	out := make(map[string]SignalState, len(t.pools))
	for pool, ups := range t.pools {
		s := SignalState{Source: SignalGateway, Backends: len(ups), Err: errText}
		for _, u := range ups {
			if loadFresh(u.ext.Load(), now, g.metricsMaxAge) {
				s.Fresh++
			}
		}
		if s.Fresh > 0 && g.metricsSrc != nil {
			s.Source = g.metricsSrc.Name()
		}
		out[pool] = s
	}
	return out
}

// metricsLoop reads Options.Metrics until Close: the backends that are
// due (see readDue: one that idles with the same values is read less and
// less often, up to DefaultMetricsMaxInterval, and at the base interval
// again as soon as a request goes to it). It sleeps until the next read is
// due, and wakes early when the backends change or a request starts on one
// while it sleeps longer than MetricsInterval (see idle.go).
func (g *Gateway) metricsLoop() {
	defer close(g.metricsDone)
	sched := map[*Upstream]readState{}
	for {
		changed := g.changeCh()
		// Set before the backends are looked at: a request that starts
		// after the look wakes the loop.
		g.readWake.asleep.Store(true)
		g.refreshDue(g.ctx, sched)
		wait, ok := sleepFor(g.readsDue(sched), g.clock.Now())
		if ok && wait <= g.metricsInterval {
			g.readWake.asleep.Store(false) // back within base anyway
		}
		var tc <-chan time.Time
		var t clock.Timer
		if ok {
			t = g.clock.NewTimer(wait)
			tc = t.C()
		}
		select {
		case <-g.ctx.Done():
		case <-tc:
		case <-changed:
		case <-g.readWake.ch:
		}
		if t != nil {
			t.Stop()
		}
		if g.ctx.Err() != nil {
			return
		}
	}
}

// readsDue returns when each published backend that reads metrics is next
// due, as of now (readNext).
func (g *Gateway) readsDue(sched map[*Upstream]readState) []time.Time {
	t := g.table.Load()
	due := make([]time.Time, 0, len(t.all))
	for _, u := range t.all {
		if u.noMetrics.Load() {
			continue
		}
		v := readView{inFlight: u.inflight.Load(), requests: u.requests.Load()}
		due = append(due, readNext(sched[u], v, g.metricsInterval))
	}
	return due
}

// metricsMaxInterval is the cap of the metrics read back-off.
func (g *Gateway) metricsMaxInterval() time.Duration {
	return max(g.metricsInterval, DefaultMetricsMaxInterval)
}

// refreshMetrics reads every published backend's metrics now, due or not.
func (g *Gateway) refreshMetrics(ctx context.Context) { g.refreshDue(ctx, nil) }

// refreshDue takes one snapshot of the published backends' metrics — of
// those due per sched, or of all if sched is nil — and stores each
// backend's on its Upstream, where policies read it atomically. A backend
// the snapshot leaves out keeps its previous metrics, which go stale with
// time (from the end of their hold, if the reads of it backed off).
// sched belongs to the caller's goroutine.
func (g *Gateway) refreshDue(ctx context.Context, sched map[*Upstream]readState) {
	t := g.table.Load()
	for u := range sched {
		if t.byID[u.id] != u {
			delete(sched, u)
		}
	}
	if len(t.all) == 0 {
		return
	}
	now := g.clock.Now()
	targets := make([]loadmetrics.Target, 0, len(t.all))
	asked := make([]*Upstream, 0, len(t.all))
	views := make(map[*Upstream]readView, len(t.all))
	for _, u := range t.all {
		if u.noMetrics.Load() {
			continue
		}
		v := readView{inFlight: u.inflight.Load(), requests: u.requests.Load()}
		if sched != nil && !readDue(sched[u], v, now, g.metricsInterval) {
			continue
		}
		views[u] = v
		tg := loadmetrics.Target{ID: u.id, Address: u.address}
		if f := u.family.Load(); f != nil {
			tg.Family = *f
		}
		if q := u.queries.Load(); q != nil {
			tg.Queries = *q
		}
		targets = append(targets, tg)
		asked = append(asked, u)
	}
	if len(targets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, g.metricsTimeout)
	snap, err := g.metricsSrc.Snapshot(ctx, targets)
	cancel()
	if g.ctx.Err() != nil {
		return // closing: the error is ours
	}
	var te *loadmetrics.TargetError
	perTarget := errors.As(err, &te)
	for _, u := range asked {
		switch {
		case perTarget && te.Failed[u.id] != nil:
			msg := te.Failed[u.id].Error()
			u.extErr.Store(&msg)
		case err != nil && !perTarget && snap[u.id].Has == 0:
			msg := err.Error()
			u.extErr.Store(&msg)
		default:
			u.extErr.Store(nil)
		}
		m, ok := snap[u.id]
		every := g.metricsInterval
		if sched != nil {
			st := readDone(sched[u], views[u], now, m, ok, g.metricsInterval, g.metricsMaxInterval())
			sched[u] = st
			every = st.every
		}
		if !ok {
			if cur := u.ext.Load(); cur != nil && !cur.HeldUntil.IsZero() {
				c := unheld(*cur)
				u.ext.Store(&c)
			}
			continue
		}
		if m.Has&loadmetrics.FieldLoaded != 0 && !g.loadedSeen.Load() {
			g.loadedSeen.Store(true)
		}
		m = held(m, every, g.metricsInterval)
		u.ext.Store(&m)
		if c, ok := concurrencyEstimate(m); ok {
			// Kept while the backend idles (nothing running to
			// estimate from) and while the metrics are down.
			u.concBits.Store(math.Float64bits(c))
		}
	}
	prev := g.metricsErr.Load()
	if err == nil {
		// A read of some backends clears the error only if no other
		// backend's last read failed.
		if prev != nil && !anyReadFailed(t.all) {
			g.metricsErr.Store(nil)
			g.log.Info("gateway: metrics source recovered", "source", g.metricsSrc.Name())
		}
		return
	}
	msg := err.Error()
	g.metricsErr.Store(&msg)
	if prev == nil {
		g.log.Warn("gateway: metrics source failing; backends without fresh metrics are balanced on the gateway's own signals",
			"source", g.metricsSrc.Name(), "err", msg)
	}
}

// anyReadFailed reports whether the last metrics read of one of ups (that
// reads metrics) failed.
func anyReadFailed(ups []*Upstream) bool {
	for _, u := range ups {
		if !u.noMetrics.Load() && u.extErr.Load() != nil {
			return true
		}
	}
	return false
}

// LocalMetrics returns the gateway's own measurements of its backends as a
// loadmetrics.Source (named "gateway"): in-flight requests, peak-EWMA latency
// and error rate, observed now. It is the source for backends that publish
// no metrics (Ollama), e.g. for an AIBalancer's weights or an autoscaler.
// Targets the gateway does not know are left out.
func (g *Gateway) LocalMetrics() loadmetrics.Source { return localSource{g} }

type localSource struct{ g *Gateway }

func (s localSource) Name() string { return SignalGateway }

func (s localSource) Close() {}

func (s localSource) Snapshot(ctx context.Context, targets []loadmetrics.Target) (map[string]loadmetrics.BackendMetrics, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t := s.g.table.Load()
	now := s.g.clock.Now()
	out := make(map[string]loadmetrics.BackendMetrics, len(targets))
	for _, tg := range targets {
		u := t.byID[tg.ID]
		if u == nil {
			continue
		}
		m := loadmetrics.BackendMetrics{
			InFlight:   float64(s.g.InFlight(tg.ID)),
			ErrorRate:  u.ErrorRate(),
			Has:        loadmetrics.FieldInFlight | loadmetrics.FieldErrorRate,
			ObservedAt: now,
		}
		lat := u.PeakLatency(now, s.g.latencyDecay)
		if lat == 0 {
			lat = u.PeakTTFT(now, s.g.latencyDecay)
		}
		if lat > 0 {
			m.Latency = lat
			m.Has |= loadmetrics.FieldLatency
		}
		out[tg.ID] = m
	}
	return out, nil
}

// BackendSignals are the signals of one backend's own metrics as the
// gateway last read them (GET /api/v1/backends, tidegpu status). A value
// is nil when it was not read: the server does not publish it, or its
// metrics could not be read (Error says why).
type BackendSignals struct {
	// Source is the metrics source ("scrape", "prometheus"), or "gateway"
	// when the gateway has none (the backend is balanced on the gateway's
	// own measurements).
	Source string `json:"source"`
	// Family is the server family whose metric names were read.
	Family string `json:"family,omitempty"`
	// Queue, Running: requests waiting and running; KVCache and GPUUtil
	// fractions 0..1; TTFTP99 the 99th percentile of the time to first
	// token, in seconds.
	Queue   *float64 `json:"queue,omitempty"`
	Running *float64 `json:"running,omitempty"`
	KVCache *float64 `json:"kvCache,omitempty"`
	TTFTP99 *float64 `json:"ttftP99,omitempty"`
	GPUUtil *float64 `json:"gpuUtil,omitempty"`
	// ObservedAt is when the values were measured; Age how long before
	// the status, in seconds.
	ObservedAt time.Time `json:"observedAt,omitzero"`
	Age        float64   `json:"age,omitempty"`
	// Fresh: with a queue depth younger than the gateway's metrics max
	// age, so balancing uses them.
	Fresh bool `json:"fresh"`
	// Loaded are the models an Ollama backend has in memory (/api/ps), as
	// last read within the max age.
	Loaded []string `json:"loaded,omitempty"`
	// Missing names the signals above that have no value (queue,
	// running, kvCache, ttftP99, gpuUtil).
	Missing []string `json:"missing,omitempty"`
	// Error is why the last read had nothing for this backend.
	Error string `json:"error,omitempty"`
}

// loadFresh reports whether m carries a queue depth (the backend's own load)
// observed within maxAge of now. An Ollama reading (loaded models only)
// is not one.
func loadFresh(m *loadmetrics.BackendMetrics, now time.Time, maxAge time.Duration) bool {
	return m != nil && m.Has&loadmetrics.FieldQueueDepth != 0 && m.Fresh(now, maxAge)
}

// backendSignals describes u's last metrics at now. Pure but for the
// atomic loads.
func (g *Gateway) backendSignals(u *Upstream, now time.Time) *BackendSignals {
	s := &BackendSignals{Source: SignalGateway}
	if g.metricsSrc != nil && !u.noMetrics.Load() {
		s.Source = g.metricsSrc.Name()
	}
	if p := u.extErr.Load(); p != nil {
		s.Error = *p
	}
	m := u.ext.Load()
	if m == nil {
		m = &loadmetrics.BackendMetrics{}
	}
	s.Family = m.Family
	if !m.ObservedAt.IsZero() {
		s.ObservedAt = m.ObservedAt
		// A read that landed after now (Status takes now once, before
		// it loads each backend's metrics) is no age at all, not a
		// negative one.
		s.Age = max(now.Sub(m.ObservedAt).Seconds(), 0)
	}
	s.Fresh = loadFresh(m, now, g.metricsMaxAge)
	if m.Has&loadmetrics.FieldLoaded != 0 && m.Fresh(now, g.metricsMaxAge) {
		s.Loaded = m.Loaded
	}
	for _, f := range []struct {
		name  string
		field loadmetrics.Field
		v     float64
		dst   **float64
	}{
		{"queue", loadmetrics.FieldQueueDepth, m.QueueDepth, &s.Queue},
		{"running", loadmetrics.FieldRunning, m.Running, &s.Running},
		{"kvCache", loadmetrics.FieldKVCacheUsage, m.KVCacheUsage, &s.KVCache},
		{"ttftP99", loadmetrics.FieldTTFT, m.TTFTP99.Seconds(), &s.TTFTP99},
		{"gpuUtil", loadmetrics.FieldGPUUtil, m.GPUUtil, &s.GPUUtil},
	} {
		if m.Has&f.field == 0 {
			s.Missing = append(s.Missing, f.name)
			continue
		}
		v := f.v
		*f.dst = &v
	}
	return s
}
