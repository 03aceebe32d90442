package gateway

import (
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
)

// errBackendDown is the cancellation cause of attempts that were waiting for
// response headers on a backend the active probe declared dead.
var errBackendDown = errors.New("gateway: backend declared down by probe")

// Upstream is the gateway's live view of one backend: its identity, its
// weight and draining flag, its load and its health. Policies read it through
// its methods; all of them are safe for concurrent use.
//
// ID, pool and address never change; a backend whose address or pool changes
// under the same ID gets a new Upstream.
type Upstream struct {
	id      string
	pool    string
	address string
	// idHeader is the value of BackendHeader on responses from this
	// backend, shared by all of them (net/http only reads it).
	idHeader []string

	weight   atomic.Int64
	draining atomic.Bool
	removed  atomic.Bool // no longer in any pool's set
	healthy  atomic.Bool // according to the active probe
	inflight atomic.Int64

	requests     atomic.Uint64 // attempts sent
	failures     atomic.Uint64 // attempts that failed (passive health)
	ejectedUntil atomic.Int64  // unix nanoseconds on Options.Clock; 0 = not ejected
	consecutive  atomic.Int32  // consecutive passive failures
	ewmaBits     atomic.Uint64 // math.Float64bits of the EWMA of time to headers, in seconds
	errBits      atomic.Uint64 // math.Float64bits of the EWMA of failed attempts (0 or 1 each)

	// meta is what the pool controller published about the backend besides
	// its address: the models it serves and its version. SetBackends
	// replaces it.
	meta atomic.Pointer[backendMeta]

	// Peak EWMAs of the time to response headers (see PeakLatency): of
	// streamed responses (whose headers come with the first token: the
	// time to first token) and of complete ones (headers at the end).
	ttft  peakEWMA
	whole peakEWMA

	// ext is the latest snapshot of the backend's own metrics from
	// Options.Metrics; nil until the first one.
	ext atomic.Pointer[loadmetrics.BackendMetrics]
	// extErr is why the last read of Options.Metrics had nothing for this
	// backend; nil if it had.
	extErr atomic.Pointer[string]
	// family is the metric names of the backend (nil: the source's);
	// noMetrics leaves it out of the metrics reads.
	family    atomic.Pointer[loadmetrics.Family]
	queries   atomic.Pointer[loadmetrics.Queries] // nil: none of its own
	noMetrics atomic.Bool
	// concBits is math.Float64bits of the latest concurrency estimate from
	// the metrics (see concurrencyEstimate); 0 if none yet.
	concBits atomic.Uint64

	// waiting are the attempts waiting for the backend's response
	// headers, which the probe declaring it down cancels.
	waiting waitList

	mu         sync.Mutex // serializes passive and active health transitions
	ejections  int        // ejections since the last success (exponent of the backoff)
	probeFails int        // consecutive failed probes
	lastErr    string     // last failure, for the admin view

	// blocks are the prefix blocks the prefix-aware policy sent here.
	blocks blockIndex

	// rrCurrent is the smooth weighted round-robin state, guarded by the
	// RoundRobin policy's mutex.
	rrCurrent int64
}

// waitList is a backend's attempts waiting for response headers. When the
// probe declares the backend down, abandon cancels each of them, and every
// attempt added after, with errBackendDown, until revive. An attempt is
// listed through a node of its exchange, so listing it allocates nothing
// (a context.AfterFunc per attempt on a per-backend context cost three
// allocations and a map entry).
type waitList struct {
	mu   sync.Mutex
	head *headerWait
	down bool
}

// headerWait is one attempt's node in a waitList.
type headerWait struct {
	prev, next *headerWait
	attempt    *attemptCtx
	listed     bool
}

// add lists w, for attempt a; if the backend is down, it ends the attempt
// at once instead.
func (l *waitList) add(w *headerWait, a *attemptCtx) {
	l.mu.Lock()
	if l.down {
		l.mu.Unlock()
		a.cancel(errBackendDown)
		return
	}
	w.attempt, w.prev, w.next, w.listed = a, nil, l.head, true
	if l.head != nil {
		l.head.prev = w
	}
	l.head = w
	l.mu.Unlock()
}

// remove takes w off the list. It returns false if w's attempt was
// cancelled with errBackendDown instead (by add or abandon), in which
// case the cancellation has happened when remove returns.
func (l *waitList) remove(w *headerWait) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !w.listed {
		return false
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	*w = headerWait{}
	return true
}

// abandon marks the backend down and cancels the listed attempts with
// errBackendDown.
func (l *waitList) abandon() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
	for w := l.head; w != nil; {
		next := w.next
		w.attempt.cancel(errBackendDown)
		*w = headerWait{}
		w = next
	}
	l.head = nil
}

// revive ends abandon's effect on attempts added from now on.
func (l *waitList) revive() {
	l.mu.Lock()
	l.down = false
	l.mu.Unlock()
}

// backendMeta is the published description of a backend that can change
// under the same ID.
type backendMeta struct {
	models  []string // empty: any model
	version string
}

var noMeta = &backendMeta{}

// setMeta publishes the backend's models and version, keeping the current
// value (and its identity) if nothing changed.
// setMetricsFamily stores the backend's metric names (see
// Backend.MetricsFamily).
func (u *Upstream) setMetricsFamily(f loadmetrics.Family, q loadmetrics.Queries, off bool) {
	u.noMetrics.Store(off)
	if cur := u.queries.Load(); q == (loadmetrics.Queries{}) {
		u.queries.Store(nil)
	} else if cur == nil || *cur != q {
		u.queries.Store(&q)
	}
	if f.Queue == "" {
		u.family.Store(nil)
		return
	}
	if cur := u.family.Load(); cur == nil || cur.Name != f.Name || cur.Queue != f.Queue || cur.Running != f.Running ||
		!slices.Equal(cur.KVCache, f.KVCache) || cur.KVCacheScale != f.KVCacheScale || cur.TTFT != f.TTFT {
		u.family.Store(&f)
	}
}

func (u *Upstream) setMeta(models []string, version string) {
	cur := u.meta.Load()
	if cur.version == version && slices.Equal(cur.models, models) {
		return
	}
	if len(models) == 0 && version == "" {
		u.meta.Store(noMeta)
		return
	}
	u.meta.Store(&backendMeta{models: slices.Clone(models), version: version})
}

func newUpstream(id, pool, address string, weight int64, healthy bool) *Upstream {
	u := &Upstream{id: id, pool: pool, address: address, idHeader: []string{id}}
	u.weight.Store(weight)
	u.healthy.Store(healthy)
	u.meta.Store(noMeta)
	return u
}

// Models returns the models the backend serves as published; empty means
// any model.
func (u *Upstream) Models() []string { return u.meta.Load().models }

// Version returns the backend's model version as published ("" if none).
func (u *Upstream) Version() string { return u.meta.Load().version }

// serves reports whether the backend serves model: it publishes no models
// (any), or one of its models is model, where a name without a tag and the
// same name with ":latest" are the same model (as in Ollama).
func (u *Upstream) serves(model string) bool {
	ms := u.meta.Load().models
	if len(ms) == 0 {
		return true
	}
	for _, m := range ms {
		if sameModel(m, model) {
			return true
		}
	}
	return false
}

// ID returns the backend's instance ID.
func (u *Upstream) ID() string { return u.id }

// Pool returns the name of the pool the backend belongs to.
func (u *Upstream) Pool() string { return u.pool }

// Address returns the backend's host:port.
func (u *Upstream) Address() string { return u.address }

// Weight returns the backend's weight (always > 0).
func (u *Upstream) Weight() int64 { return u.weight.Load() }

// InFlight returns the number of requests currently being served by the
// backend: from the moment it was picked until its response was fully copied
// (or the attempt was abandoned).
func (u *Upstream) InFlight() int64 { return u.inflight.Load() }

// ejected reports whether the backend is passively ejected at now (unix ns).
func (u *Upstream) ejected(now int64) bool {
	until := u.ejectedUntil.Load()
	return until != 0 && now < until
}

// ErrorRate returns the exponentially weighted moving average of failed
// attempts (each attempt counts 1 if it failed, 0 if it got an answer), with
// the newest attempt weighing errAlpha: 0 for a backend that never failed.
func (u *Upstream) ErrorRate() float64 { return math.Float64frombits(u.errBits.Load()) }

// errAlpha is the weight of the newest attempt in the error-rate EWMA.
const errAlpha = 0.1

func (u *Upstream) observeOutcome(failed bool) {
	s := 0.0
	if failed {
		s = 1
	}
	for {
		old := u.errBits.Load()
		if old == 0 && !failed {
			// A healthy backend's rate stays 0: no write, so that the
			// requests of every processor do not pass the line around.
			return
		}
		v := errAlpha*s + (1-errAlpha)*math.Float64frombits(old)
		if v < 1e-9 {
			v = 0
		}
		if u.errBits.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// PeakLatency returns the peak EWMA (see peakEWMA) at now of the time to
// response headers of complete (not streamed) responses: their whole
// generation. 0 means no sample yet. decay is Options.LatencyDecay.
func (u *Upstream) PeakLatency(now time.Time, decay time.Duration) time.Duration {
	return u.whole.value(now, decay)
}

// PeakTTFT returns the peak EWMA at now of the time to response headers of
// streamed responses (NDJSON, Server-Sent Events), which an inference
// server sends with the first token: the time to first token, queueing
// included. 0 means no sample yet.
func (u *Upstream) PeakTTFT(now time.Time, decay time.Duration) time.Duration {
	return u.ttft.value(now, decay)
}

// Metrics returns the latest metrics the gateway's metrics source reported
// for the backend, and whether there are any (fresh or not: see
// loadmetrics.BackendMetrics.Fresh).
func (u *Upstream) Metrics() (loadmetrics.BackendMetrics, bool) {
	if m := u.ext.Load(); m != nil {
		return *m, true
	}
	return loadmetrics.BackendMetrics{}, false
}

// EWMA returns the exponentially weighted moving average of the time from
// sending a request to receiving the response headers.
func (u *Upstream) EWMA() time.Duration {
	return time.Duration(math.Float64frombits(u.ewmaBits.Load()) * float64(time.Second))
}

// ewmaAlpha is the weight of the newest sample in the latency EWMA.
const ewmaAlpha = 0.3

func (u *Upstream) observeLatency(d time.Duration) {
	s := d.Seconds()
	for {
		old := u.ewmaBits.Load()
		v := s
		if old != 0 {
			v = ewmaAlpha*s + (1-ewmaAlpha)*math.Float64frombits(old)
		}
		if u.ewmaBits.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}
