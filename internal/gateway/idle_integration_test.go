package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/sim"
)

// freshGauge is the value of tidegpu_gateway_backend_metrics_fresh of the
// one backend, as a scrape of the gateway's metrics (the operator's
// gwsignals) reads it; -1 if absent.
func freshGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "tidegpu_gateway_backend_metrics_fresh" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// countingSim is a real simulator that counts the gateway's reads of it.
type countingSim struct {
	*httptest.Server
	scrapes, probes atomic.Int64
}

func newCountingSim(t *testing.T) *countingSim {
	t.Helper()
	s := sim.New(sim.Config{InstanceID: "a", TTFT: time.Millisecond, OutputTokens: 1})
	c := &countingSim{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/metrics":
			c.scrapes.Add(1)
		case r.Header.Get("User-Agent") == "tidegpu-gateway-probe":
			c.probes.Add(1)
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		c.CloseClientConnections()
		c.Close()
		s.Close()
	})
	return c
}

// TestIdleBackendIsReadLessAndStaysFresh runs the metrics and probe loops
// on a fake clock against a real simulator nobody sends requests to: the
// reads back off (far fewer than one per interval), the metrics stay
// fresh throughout (the back-off is on purpose, not a failure), and one
// request brings the reads back to the base interval at once.
func TestIdleBackendIsReadLessAndStaysFresh(t *testing.T) {
	a := newCountingSim(t)
	fc := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	src := loadmetrics.NewScrape(loadmetrics.ScrapeOptions{Clock: fc})
	defer src.Close()
	const base = time.Second
	reg := prometheus.NewRegistry()
	h := newHarness(t, Options{Clock: fc, Metrics: src, MetricsInterval: base, ProbeInterval: base, Registry: reg})
	h.g.SetBackends("p", []Backend{{ID: "a", Pool: "p", Address: a.Listener.Addr().String()}})

	read := func() time.Time {
		m, _ := h.g.table.Load().byID["a"].Metrics()
		return m.ObservedAt
	}
	// 60 base intervals of idleness, one step at a time: every step
	// waits for both loops to be back on their timers.
	const steps = 60
	stepAll := func() {
		poll(t, 5*time.Second, "both loops waiting", func() bool { return fc.Waiters() >= 2 })
		fc.Step(base)
	}
	stepAll()
	poll(t, 5*time.Second, "the first read", func() bool { return !read().IsZero() })
	for i := range steps {
		stepAll()
		if s := h.g.SignalStatus()["p"]; s.Fresh != 1 || s.Source != "scrape" {
			t.Fatalf("step %d (%v after the last read): %+v; backed-off metrics must stay fresh", i, fc.Since(read()), s)
		}
		if v := freshGauge(t, reg); v != 1 {
			t.Fatalf("step %d: tidegpu_gateway_backend_metrics_fresh = %v, want 1", i, v)
		}
	}
	poll(t, 5*time.Second, "both loops waiting", func() bool { return fc.Waiters() >= 2 })
	scrapes, probes := a.scrapes.Load(), a.probes.Load()
	t.Logf("over %d idle intervals: %d scrapes, %d probes", steps, scrapes, probes)
	// Scrapes: 1, 2, 4 then every 5 s (DefaultMetricsMaxInterval): about 14.
	if scrapes > 16 {
		t.Errorf("%d scrapes in %d idle intervals; want them backed off (≤ 16)", scrapes, steps)
	}
	// Probes: 1, 2, 4, 8, 16, 30 s: about 7.
	if probes > 8 {
		t.Errorf("%d probes in %d idle intervals; want them backed off (≤ 8)", probes, steps)
	}

	// Traffic: the next interval reads it again.
	if be := generateVia(t, h); be != "a" {
		t.Fatalf("request answered by %q", be)
	}
	before := a.scrapes.Load()
	stepAll()
	poll(t, 5*time.Second, "a read at the base interval after a request", func() bool {
		return a.scrapes.Load() > before && read().Equal(fc.Now())
	})
}

// TestIdleProbeNoticesADeadBackend: the probe backs off while the backend
// is idle and healthy, and still marks it unhealthy within
// DefaultProbeMaxInterval of its death.
func TestIdleProbeNoticesADeadBackend(t *testing.T) {
	a := newCountingSim(t)
	fc := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	const base = time.Second
	h := newHarness(t, Options{Clock: fc, ProbeInterval: base})
	h.g.SetBackends("p", []Backend{{ID: "a", Pool: "p", Address: a.Listener.Addr().String()}})
	step := func() {
		poll(t, 5*time.Second, "the prober waiting", fc.HasWaiters)
		fc.Step(base)
	}
	for range 40 {
		step()
	}
	poll(t, 5*time.Second, "the prober waiting", fc.HasWaiters)
	if n := a.probes.Load(); n > 7 {
		t.Fatalf("%d probes in 40 idle intervals", n)
	}
	a.CloseClientConnections()
	a.Close()
	steps := 0
	for status(t, h.g, "a").Healthy {
		if steps > int(DefaultProbeMaxInterval/base)+1 {
			t.Fatalf("still healthy %d intervals after its death", steps)
		}
		step()
		steps++
		poll(t, 5*time.Second, "the probe round", fc.HasWaiters)
	}
	t.Logf("marked unhealthy %d intervals after its death", steps)
}

// TestARequestWakesTheSleepingLoops: once the reads and probes of an idle
// backend have backed off, the loops sleep until the next is due instead
// of polling; a request that starts on the backend wakes them, so it is
// read at once, with no clock step (a polling loop would have waited for
// its next tick).
func TestARequestWakesTheSleepingLoops(t *testing.T) {
	a := newCountingSim(t)
	fc := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	src := loadmetrics.NewScrape(loadmetrics.ScrapeOptions{Clock: fc})
	defer src.Close()
	const base = time.Second
	h := newHarness(t, Options{Clock: fc, Metrics: src, MetricsInterval: base, ProbeInterval: base})
	h.g.SetBackends("p", []Backend{{ID: "a", Pool: "p", Address: a.Listener.Addr().String()}})
	// Backed off to the caps, and the last read over base ago (the reads
	// fall on multiples of 5 s): a read is due as soon as a request starts.
	for range 31 {
		poll(t, 5*time.Second, "both loops waiting", func() bool { return fc.Waiters() >= 2 })
		fc.Step(base)
	}
	poll(t, 5*time.Second, "both loops waiting", func() bool { return fc.Waiters() >= 2 })
	if !h.g.readWake.asleep.Load() || !h.g.probeWake.asleep.Load() {
		t.Fatalf("idle loops not asleep past their base interval (reads %v, probes %v)", h.g.readWake.asleep.Load(), h.g.probeWake.asleep.Load())
	}
	before := a.scrapes.Load()
	if be := generateVia(t, h); be != "a" {
		t.Fatalf("request answered by %q", be)
	}
	poll(t, 5*time.Second, "a read woken by the request, the clock not stepped", func() bool { return a.scrapes.Load() > before })
}
