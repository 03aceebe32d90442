package gateway

import (
	"math"
	"slices"
	"time"

	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
)

// The gateway's background reads of its backends — the active probe and
// the metrics source — back off while a backend is idle and its answers do
// not change, so that an idle gateway costs next to nothing however many
// backends it has (BENCHMARKS.md, "Idle cost"). Each read's interval
// doubles after a read that found the backend as before, with no request
// on it, up to a cap, and snaps back to the base interval on anything
// else: a failure, a changed answer, a request sent to it, a request in
// flight on it. The decisions are the pure functions below; the loops in
// health.go and signals.go apply them.

// Caps of the back-off.
const (
	// DefaultProbeMaxInterval caps the probe interval of a backend that
	// stays healthy, unchanged and without traffic (ProbeInterval if that
	// is longer). A backend that dies while idle is marked unhealthy
	// within this (the first request to it fails over at once: a refused
	// connection ejects it and the request is retried elsewhere).
	DefaultProbeMaxInterval = 30 * time.Second
	// DefaultMetricsMaxInterval caps the metrics read interval of a
	// backend that stays idle with the same values (MetricsInterval if
	// that is longer). Load that reaches it from elsewhere (another
	// gateway replica) is seen within this.
	DefaultMetricsMaxInterval = 5 * time.Second
)

// backoff returns the interval after a read that was steady (the backend
// as before, idle) or not, given the previous interval: doubled up to
// maxEvery if steady, else base. Pure.
func backoff(prev time.Duration, steady bool, base, maxEvery time.Duration) time.Duration {
	if !steady || prev < base {
		return base
	}
	return max(min(prev*2, maxEvery), base)
}

// probeView is what the prober sees of a backend when it plans a round.
type probeView struct {
	healthy  bool      // healthy per the probe and not ejected
	inFlight int64     // requests in flight on it
	failures uint64    // failed attempts so far (passive health)
	lastOK   time.Time // when a request last got an answer; zero: never
}

// probeState is the prober's memory of one backend.
type probeState struct {
	probed   bool
	at       time.Time     // the last probe
	every    time.Duration // the interval after it
	answer   uint64        // the last answer (status and body, FNV-1a)
	failures uint64        // probeView.failures at the last probe
}

// probeDue reports whether a backend is due for a probe at now. A request
// that got an answer is as good a sign of life as a probe, so the interval
// runs from the later of the two while the backend is healthy. While it
// is unhealthy or ejected, has requests in flight (a hung backend must be
// caught so they are retried) or failed a request since the last probe,
// the interval is base. Pure.
func probeDue(st probeState, v probeView, now time.Time, base time.Duration) bool {
	if !st.probed {
		return true
	}
	every, from := st.every, st.at
	if !v.healthy || v.inFlight > 0 || v.failures != st.failures {
		every = base
	}
	if v.healthy && v.lastOK.After(from) {
		from = v.lastOK
	}
	return !now.Before(from.Add(every))
}

// probed returns the state after a probe at now that found the backend
// in view v (as planned) and answered ok with answer. Pure.
func probed(st probeState, v probeView, now time.Time, ok bool, answer uint64, base, maxEvery time.Duration) probeState {
	steady := ok && st.probed && answer == st.answer && v.healthy && v.inFlight == 0 && v.failures == st.failures
	return probeState{
		probed:   true,
		at:       now,
		every:    backoff(st.every, steady, base, maxEvery),
		answer:   answer,
		failures: v.failures,
	}
}

// readView is what the metrics loop sees of a backend when it plans a read.
type readView struct {
	inFlight int64  // requests in flight on it
	requests uint64 // attempts sent to it so far
}

// readState is the metrics loop's memory of one backend.
type readState struct {
	read     bool
	at       time.Time     // the last read
	every    time.Duration // the interval after it
	requests uint64        // readView.requests at the last read
	last     loadmetrics.BackendMetrics
}

// readDue reports whether a backend's metrics are due at now: the base
// interval while requests go to it (balancing needs its signals when there
// is load to balance), the backed-off one while it idles. Pure.
func readDue(st readState, v readView, now time.Time, base time.Duration) bool {
	if !st.read {
		return true
	}
	every := st.every
	if v.inFlight > 0 || v.requests != st.requests {
		every = base
	}
	return !now.Before(st.at.Add(every))
}

// readDone returns the state after a read at now that found the backend in
// view v, and got m if ok. Steady: it had been read, got the same load
// values, and no request went to it. Pure.
func readDone(st readState, v readView, now time.Time, m loadmetrics.BackendMetrics, ok bool, base, maxEvery time.Duration) readState {
	steady := ok && st.read && sameLoad(st.last, m) && v.inFlight == 0 && v.requests == st.requests
	next := readState{read: true, at: now, every: backoff(st.every, steady, base, maxEvery), requests: v.requests, last: st.last}
	if ok {
		next.last = m
	} else {
		next.every = base
	}
	return next
}

// held returns m as stored for balancing after a read whose next one is
// every away: a read later than base on purpose holds the values until it
// (see loadmetrics.BackendMetrics.HeldUntil). Pure.
func held(m loadmetrics.BackendMetrics, every, base time.Duration) loadmetrics.BackendMetrics {
	if every > base && !m.ObservedAt.IsZero() {
		m.HeldUntil = m.ObservedAt.Add(every - base)
	} else {
		m.HeldUntil = time.Time{}
	}
	return m
}

// unheld returns m without its hold: a read failed, so the values age from
// their observation again, as without a back-off (stale MetricsMaxAge after
// the last good read). Pure.
func unheld(m loadmetrics.BackendMetrics) loadmetrics.BackendMetrics {
	m.HeldUntil = time.Time{}
	return m
}

// fractionTolerance is the change of a fraction (KV-cache usage, GPU
// utilisation) that does not count as a change of load: a smoothed
// utilisation decays for minutes after the last request, in steps far
// below what balancing can tell apart.
const fractionTolerance = 0.01

// sameLoad reports whether two readings carry the same load values (their
// times aside): the same counts, fractions within fractionTolerance. Pure.
func sameLoad(a, b loadmetrics.BackendMetrics) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) < fractionTolerance }
	return a.Has == b.Has && a.Family == b.Family &&
		a.QueueDepth == b.QueueDepth && a.Running == b.Running &&
		near(a.KVCacheUsage, b.KVCacheUsage) && near(a.GPUUtil, b.GPUUtil) &&
		a.TTFTP50 == b.TTFTP50 && a.TTFTP99 == b.TTFTP99 &&
		a.InFlight == b.InFlight && a.Latency == b.Latency && a.ErrorRate == b.ErrorRate &&
		slices.Equal(a.Loaded, b.Loaded)
}
