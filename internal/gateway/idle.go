package gateway

import (
	"math"
	"slices"
	"sync/atomic"
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
//
// The loops do not poll: each sleeps until its next read is due (or the
// base interval while a backend is busy or unhealthy), and wakes early when
// the backends change (SetBackends, a health change) or a request starts
// on a backend while it sleeps longer than the base interval (wakeIdle).
// Backed-off reads fall on multiples of their interval (alignedNext), so
// that idle backends are read together in one wake-up, not one each: on a
// small machine every wake-up of an idle Go process costs about as much
// CPU as a scrape (BENCHMARKS.md, "Idle cost").

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
	next     time.Time     // when the next is due if nothing changes (alignedNext)
	answer   uint64        // the last answer (status and body, FNV-1a)
	failures uint64        // probeView.failures at the last probe
}

// probeNext returns when a backend is next due for a probe; the zero time
// if never probed (at once). A request that got an answer is as good a
// sign of life as a probe, so the interval runs from the later of the two
// while the backend is healthy. While it is unhealthy or ejected, has
// requests in flight (a hung backend must be caught so they are retried) or
// failed a request since the last probe, the interval is base. Pure.
func probeNext(st probeState, v probeView, base time.Duration) time.Time {
	if !st.probed {
		return time.Time{}
	}
	every, next := st.every, st.next
	if next.IsZero() {
		next = st.at.Add(every)
	}
	if !v.healthy || v.inFlight > 0 || v.failures != st.failures {
		every, next = base, st.at.Add(base)
	}
	if v.healthy && v.lastOK.After(st.at) {
		return v.lastOK.Add(every)
	}
	return next
}

// probeDue reports whether a backend is due for a probe at now (see
// probeNext). Pure.
func probeDue(st probeState, v probeView, now time.Time, base time.Duration) bool {
	return !now.Before(probeNext(st, v, base))
}

// probed returns the state after a probe at now that found the backend
// in view v (as planned) and answered ok with answer. Pure.
func probed(st probeState, v probeView, now time.Time, ok bool, answer uint64, base, maxEvery time.Duration) probeState {
	steady := ok && st.probed && answer == st.answer && v.healthy && v.inFlight == 0 && v.failures == st.failures
	every := backoff(st.every, steady, base, maxEvery)
	return probeState{
		probed:   true,
		at:       now,
		every:    every,
		next:     alignedNext(now, every, base),
		answer:   answer,
		failures: v.failures,
	}
}

// alignedNext returns when the next read (or probe) after one at now with
// interval every is due: now+every at the base interval; for a backed-off
// one, the last multiple of every (counted from the zero time) at or before
// now+every, so that backends idling at the same interval are read at the
// same instants and a sleeping loop wakes once for all of them, not once
// each. It is never less than base after now: the multiple after is taken
// instead, so the gap is at least base and under every+base (a polling
// loop ticking at base was as late). Pure.
func alignedNext(now time.Time, every, base time.Duration) time.Time {
	if every <= base {
		return now.Add(every)
	}
	next := now.Add(every).Truncate(every)
	if next.Sub(now) < base {
		next = next.Add(every)
	}
	return next
}

// sleepFor returns how long a loop that plans by due times sleeps at now:
// until the earliest of them, 0 if one is past; forever (ok false) if
// there is none. Pure.
func sleepFor(due []time.Time, now time.Time) (d time.Duration, ok bool) {
	if len(due) == 0 {
		return 0, false
	}
	return max(slices.MinFunc(due, time.Time.Compare).Sub(now), 0), true
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
	next     time.Time     // when the next is due while it idles (alignedNext)
	requests uint64        // readView.requests at the last read
	last     loadmetrics.BackendMetrics
}

// readNext returns when a backend's metrics are next due; the zero time if
// never read (at once): the base interval after the last read while
// requests go to it (balancing needs its signals when there is load to
// balance), the backed-off time while it idles. Pure.
func readNext(st readState, v readView, base time.Duration) time.Time {
	if !st.read {
		return time.Time{}
	}
	if v.inFlight > 0 || v.requests != st.requests {
		return st.at.Add(base)
	}
	if st.next.IsZero() {
		return st.at.Add(st.every)
	}
	return st.next
}

// readDue reports whether a backend's metrics are due at now (see
// readNext). Pure.
func readDue(st readState, v readView, now time.Time, base time.Duration) bool {
	return !now.Before(readNext(st, v, base))
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
	next.next = alignedNext(now, next.every, base)
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

// wakeup wakes a loop that sleeps longer than its base interval when a
// request starts: the loop sets asleep before it looks at the backends, and
// clears it when it will look again within base anyway; a request that
// starts while it is set sends on ch (buffered, one pending wake is enough).
type wakeup struct {
	asleep atomic.Bool
	ch     chan struct{}
}

func newWakeup() *wakeup { return &wakeup{ch: make(chan struct{}, 1)} }

// wake wakes the loop if it sleeps long. Cheap when it does not: one
// atomic load on the request path.
func (w *wakeup) wake() {
	if w.asleep.Load() {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// wakeIdle tells the probe and metrics loops that a request started on a
// backend: one that idled is read and probed at the base interval again.
func (g *Gateway) wakeIdle() {
	g.readWake.wake()
	g.probeWake.wake()
}
