package gateway

import (
	"context"
	"errors"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/utils/clock"
)

// isConnectFailure reports whether err says that nothing accepts
// connections at the backend's address: refused, unreachable, or the dial
// timed out. Unlike a reset or an EOF, which can hit one stale pooled
// connection of a live server, that is what a SIGKILLed process or a
// reclaimed host looks like, so it ejects (and fails a probe) at once.
func isConnectFailure(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// recordFailure is passive health checking: it counts a failed attempt on u
// and ejects u after EjectAfter consecutive failures, or at once if connect
// is set. Each ejection without a success since the previous one lasts twice
// as long, up to MaxEjectFor. The consecutive count is not reset when an
// ejection ends, only by a success: a backend back from ejection is on
// probation, and its next failure ejects it again.
func (g *Gateway) recordFailure(u *Upstream, reason string, connect bool) {
	u.failures.Add(1)
	u.observeOutcome(true)
	n := u.consecutive.Add(1)
	u.mu.Lock()
	u.lastErr = reason
	if g.ejectAfter < 0 {
		u.mu.Unlock()
		return
	}
	now := g.clock.Now()
	if u.ejected(now.UnixNano()) || (!connect && int(n) < g.ejectAfter) {
		u.mu.Unlock()
		return
	}
	d := g.ejectFor
	for i := 0; i < u.ejections && d < g.maxEjectFor; i++ {
		d *= 2
	}
	d = min(d, g.maxEjectFor)
	u.ejections++
	u.ejectedUntil.Store(now.Add(d).UnixNano())
	u.mu.Unlock()
	g.metrics.ejected()
	g.log.Warn("gateway: backend ejected", "backend", u.id, "pool", u.pool, "for", d, "consecutiveFailures", n, "reason", reason)
}

// recordSuccess counts an attempt that got a response after latency; it
// ends any ejection and the failure streak. stream says the response is
// streamed, so that latency is the time to first token.
func (g *Gateway) recordSuccess(u *Upstream, latency time.Duration, stream bool) {
	u.observeLatency(latency)
	if stream {
		u.ttft.observe(g.clock.Now(), latency, g.latencyDecay)
	} else {
		u.whole.observe(g.clock.Now(), latency, g.latencyDecay)
	}
	u.observeOutcome(false)
	if u.consecutive.Load() == 0 && u.ejectedUntil.Load() == 0 {
		return
	}
	u.mu.Lock()
	u.consecutive.Store(0)
	u.ejections = 0
	u.ejectedUntil.Store(0)
	u.mu.Unlock()
}

// probeLoop probes the backends that are due (see probeDue: a backend that
// stays healthy, unchanged and idle is probed less and less often, up to
// DefaultProbeMaxInterval). It sleeps until the next probe is due, and
// wakes early when a backend that must be probed before admission was
// added (kick), the backends or their health change, or a request starts
// on one while it sleeps longer than probeInterval (see idle.go).
func (g *Gateway) probeLoop() {
	defer close(g.probeDone)
	sched := map[*Upstream]probeState{}
	wait, ok := g.probeInterval, true // the first round after one interval
	for {
		changed := g.changeCh()
		var tc <-chan time.Time
		var t clock.Timer
		if ok {
			t = g.clock.NewTimer(wait)
			tc = t.C()
		}
		select {
		case <-g.ctx.Done():
		case <-tc:
		case <-g.kick:
		case <-changed:
		case <-g.probeWake.ch:
		}
		if t != nil {
			t.Stop()
		}
		if g.ctx.Err() != nil {
			return
		}
		g.probeWake.asleep.Store(true) // before the look, as in metricsLoop
		g.probeDue(g.ctx, sched)
		wait, ok = sleepFor(g.probesDue(sched), g.clock.Now())
		if ok && wait <= g.probeInterval {
			g.probeWake.asleep.Store(false)
		}
	}
}

// probesDue returns when each known backend is next due for a probe, as of
// now (probeNext).
func (g *Gateway) probesDue(sched map[*Upstream]probeState) []time.Time {
	now := g.clock.Now()
	ups := g.upstreams()
	due := make([]time.Time, 0, len(ups))
	for _, u := range ups {
		due = append(due, probeNext(sched[u], g.viewForProbe(u, now), g.probeInterval))
	}
	return due
}

// probeMaxInterval is the cap of the probe back-off.
func (g *Gateway) probeMaxInterval() time.Duration {
	return max(g.probeInterval, DefaultProbeMaxInterval)
}

// viewForProbe is what probeDue needs of u.
func (g *Gateway) viewForProbe(u *Upstream, now time.Time) probeView {
	v := probeView{
		healthy:  u.healthy.Load() && !u.ejected(now.UnixNano()),
		inFlight: u.inflight.Load(),
		failures: u.failures.Load(),
	}
	if at := max(u.ttft.at.Load(), u.whole.at.Load()); at != 0 {
		v.lastOK = time.Unix(0, at)
	}
	return v
}

// probeDue probes, concurrently, every known backend that is due (retired
// ones with requests in flight included, so that a hung request on a
// removed backend is still rescued), updates sched, and returns when all
// probes are done. sched belongs to the caller's goroutine.
func (g *Gateway) probeDue(ctx context.Context, sched map[*Upstream]probeState) {
	now := g.clock.Now()
	ups := g.upstreams()
	type done struct {
		u      *Upstream
		v      probeView
		ok     bool
		answer uint64
	}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out []done
	)
	live := make(map[*Upstream]bool, len(ups))
	for _, u := range ups {
		live[u] = true
		v := g.viewForProbe(u, now)
		if !probeDue(sched[u], v, now, g.probeInterval) {
			continue
		}
		wg.Go(func() {
			ok, answer, fin := g.probe(ctx, u)
			if !fin {
				return
			}
			mu.Lock()
			out = append(out, done{u, v, ok, answer})
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, d := range out {
		sched[d.u] = probed(sched[d.u], d.v, now, d.ok, d.answer, g.probeInterval, g.probeMaxInterval())
	}
	for u := range sched {
		if !live[u] {
			delete(sched, u)
		}
	}
}

// probeAll probes every known backend concurrently, due or not, and
// returns when all probes are done.
func (g *Gateway) probeAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, u := range g.upstreams() {
		wg.Go(func() { g.probe(ctx, u) })
	}
	wg.Wait()
}

// probe probes u once and applies the outcome. It returns whether the
// probe succeeded, its answer (status and body, FNV-1a) and whether it
// finished (false: the gateway is closing).
func (g *Gateway) probe(ctx context.Context, u *Upstream) (ok bool, answer uint64, finished bool) {
	pctx, cancel := context.WithTimeout(ctx, g.probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, "http://"+u.address+g.probePath, nil)
	if err != nil {
		g.probeResult(u, false, false, "probe: "+err.Error())
		return false, 0, true
	}
	req.Header.Set("User-Agent", "tidegpu-gateway-probe")
	resp, err := g.probeTransport().RoundTrip(req)
	if err != nil {
		if ctx.Err() != nil {
			return false, 0, false // the gateway is closing
		}
		g.probeResult(u, false, isConnectFailure(err), "probe: "+err.Error())
		return false, 0, true
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(strconv.Itoa(resp.StatusCode)))
	_, _ = io.Copy(h, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	ok = resp.StatusCode >= 200 && resp.StatusCode < 500
	g.probeResult(u, ok, false, "probe: status "+strconv.Itoa(resp.StatusCode))
	return ok, h.Sum64(), true
}

// probeTransport is the transport for probes. The gateway's own one
// (oneShot, dialling as the data plane's transport does) does not keep
// connections alive, so that every probe also proves a backend still
// accepts connections (a reclaimed host fails the dial within DialTimeout
// instead of timing out on a dead pooled connection), and probes never take
// from or poison the data plane's connection pool.
func (g *Gateway) probeTransport() http.RoundTripper {
	g.probeOnce.Do(func() {
		if g.ownTransport == nil {
			g.probeRT = g.transport
			return
		}
		g.probeRT = &oneShot{dial: g.ownTransport.DialContext}
	})
	return g.probeRT
}

// probeResult applies one probe's outcome. A backend turning unhealthy has
// its waiting attempts cancelled: those still waiting for its response
// headers are abandoned and retried elsewhere.
func (g *Gateway) probeResult(u *Upstream, ok, connect bool, reason string) {
	var up, down bool
	u.mu.Lock()
	if ok {
		u.probeFails = 0
		if !u.healthy.Load() {
			u.waiting.revive()
			u.healthy.Store(true)
			up = true
		}
	} else {
		u.probeFails++
		u.lastErr = reason
		if u.healthy.Load() && (connect || u.probeFails >= g.probeFailures) {
			u.healthy.Store(false)
			u.waiting.abandon()
			down = true
		}
	}
	u.mu.Unlock()
	switch {
	case up:
		g.log.Info("gateway: backend healthy", "backend", u.id, "pool", u.pool)
		g.notify()
	case down:
		g.log.Warn("gateway: backend unhealthy", "backend", u.id, "pool", u.pool, "reason", reason)
	}
}
