package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/metrics/promtest"
	"github.com/tidegpu/tidegpu/internal/sim"
)

// simBackend serves a simulator over a real loopback socket.
func simBackend(t *testing.T, cfg sim.Config) *httptest.Server {
	t.Helper()
	s := sim.New(cfg)
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		s.Close()
	})
	return srv
}

// queueOn sends n generations straight to a simulator (not through the
// gateway), which hold until the test ends.
func queueOn(t *testing.T, srv *httptest.Server, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/api/generate",
				strings.NewReader(`{"model":"qwen2:0.5b","prompt":"x","stream":false}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
}

// poll waits for cond, bounded by d.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// generateVia sends a quick generation through the gateway and returns the
// backend that answered, or "" if none answered within 3s.
func generateVia(t *testing.T, h *harness) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/api/generate",
		strings.NewReader(`{"model":"qwen2:0.5b","prompt":"x","stream":false}`))
	resp, err := h.client.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode) // may run on a client goroutine
		return ""
	}
	return resp.Header.Get(BackendHeader)
}

// TestQueueDepthFromScrapeSteersP2C: a backend whose queue the gateway
// cannot see (its requests came from elsewhere) gets nothing while the
// scraped queue depth says it is saturated.
func TestQueueDepthFromScrapeSteersP2C(t *testing.T) {
	busy := simBackend(t, sim.Config{MaxBatch: 1, TTFT: time.Minute, InstanceID: "busy"})
	idle := simBackend(t, sim.Config{TTFT: -1, TokenTime: -1, OutputTokens: 1, InstanceID: "idle"})
	queueOn(t, busy, 3)

	src := loadmetrics.NewScrape(loadmetrics.ScrapeOptions{})
	defer src.Close()
	h := newHarness(t, Options{Metrics: src, MetricsInterval: 20 * time.Millisecond, MetricsMaxAge: loadedMachineMaxAge})
	h.g.SetBackends("p", []Backend{
		{ID: "busy", Pool: "p", Address: busy.Listener.Addr().String()},
		{ID: "idle", Pool: "p", Address: idle.Listener.Addr().String()},
	})
	poll(t, 10*time.Second, "fresh metrics showing busy's queue", func() bool {
		s := h.g.SignalStatus()["p"]
		return s.Source == "scrape" && s.Fresh == 2 && status(t, h.g, "busy").QueueDepth == 2
	})
	for i := range 20 {
		if be := generateVia(t, h); be != "idle" {
			t.Fatalf("request %d went to %q; busy has 2 queued", i, be)
		}
	}
}

// TestMetricsGoStaleOnTheClock: the background read follows Options.Clock;
// when the backend stops answering its metrics age, and after MetricsMaxAge
// the pool is reported on the gateway's own signals with the error.
func TestMetricsGoStaleOnTheClock(t *testing.T) {
	a := simBackend(t, sim.Config{InstanceID: "a"})
	fc := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	src := loadmetrics.NewScrape(loadmetrics.ScrapeOptions{Clock: fc, Timeout: 200 * time.Millisecond})
	defer src.Close()
	h := newHarness(t, Options{Clock: fc, Metrics: src, MetricsInterval: time.Second, MetricsMaxAge: 3 * time.Second})
	h.g.SetBackends("p", []Backend{{ID: "a", Pool: "p", Address: a.Listener.Addr().String()}})
	// No check of the status before the first read: a new backend is read
	// at once, so that status depends on the scheduler.
	step := func() {
		poll(t, 5*time.Second, "the metrics loop's timer", fc.HasWaiters)
		fc.Step(time.Second)
	}
	step()
	observed := fc.Now()
	poll(t, 5*time.Second, "a read on the clock", func() bool {
		m, ok := h.g.table.Load().byID["a"].Metrics()
		return ok && m.ObservedAt.Equal(observed)
	})
	if s := h.g.SignalStatus()["p"]; s.Source != "scrape" || s.Fresh != 1 || s.Err != "" {
		t.Fatalf("after a good read: %+v", s)
	}

	a.CloseClientConnections()
	a.Close()
	for range 3 { // 3s after the last good read: still within the max age
		step()
	}
	poll(t, 5*time.Second, "the failed read's error", func() bool { return h.g.SignalStatus()["p"].Err != "" })
	if s := h.g.SignalStatus()["p"]; s.Source != "scrape" {
		t.Fatalf("%v after the last good read, within the max age: %+v", fc.Since(observed), s)
	}
	step()
	s := h.g.SignalStatus()["p"]
	if s.Source != SignalGateway || s.Fresh != 0 || !strings.Contains(s.Err, "scrap") {
		t.Fatalf("%v after the last good read: %+v; want the gateway's signals and the error", fc.Since(observed), s)
	}
	if status(t, h.g, "a").MetricsFresh {
		t.Error("BackendStatus says the stale metrics are fresh")
	}
}

// TestPrometheusDownFallsBackToGatewaySignals runs the real Prometheus
// (Debian's package) scraping two simulators, balances on it, kills it, and
// checks that balancing goes on with the gateway's own signals, spread
// over both backends, and that SignalStatus says so.
func TestPrometheusDownFallsBackToGatewaySignals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus server")
	}
	a := simBackend(t, sim.Config{TTFT: 20 * time.Millisecond, OutputTokens: 1, InstanceID: "a"})
	b := simBackend(t, sim.Config{TTFT: 20 * time.Millisecond, OutputTokens: 1, InstanceID: "b"})
	addrA, addrB := a.Listener.Addr().String(), b.Listener.Addr().String()
	prom := promtest.Start(t, []string{addrA, addrB}, 200*time.Millisecond)
	prom.WaitFor(t, "vllm:num_requests_waiting", 2, 20*time.Second)

	src, err := loadmetrics.NewPrometheus(loadmetrics.PrometheusOptions{Address: prom.URL, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Options{Metrics: src, MetricsInterval: 100 * time.Millisecond, MetricsMaxAge: time.Second})
	h.g.SetBackends("p", []Backend{{ID: "a", Pool: "p", Address: addrA}, {ID: "b", Pool: "p", Address: addrB}})
	poll(t, 20*time.Second, "balancing on Prometheus", func() bool {
		s := h.g.SignalStatus()["p"]
		return s.Source == "prometheus" && s.Fresh == 2 && s.Err == ""
	})

	prom.Stop()
	poll(t, 10*time.Second, "the fallback to the gateway's signals", func() bool {
		s := h.g.SignalStatus()["p"]
		return s.Source == SignalGateway && s.Err != ""
	})
	if s := h.g.SignalStatus()["p"]; !strings.Contains(s.Err, "prometheus query") {
		t.Errorf("SignalStatus error %q does not name Prometheus", s.Err)
	}
	// Eight clients at once: in flight at the gateway spreads them.
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				be := generateVia(t, h)
				mu.Lock()
				got[be]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if got[""] > 0 {
		t.Fatalf("%d requests failed with Prometheus down", got[""])
	}
	if got["a"] < 5 || got["b"] < 5 {
		t.Errorf("with Prometheus down: %v; want both backends used", got)
	}
}

func TestLocalMetrics(t *testing.T) {
	a := newBackend(t, "a", echoHandler("a"))
	bad := newBackend(t, "bad", statusHandler(http.StatusInternalServerError))
	h := newHarness(t, Options{Policy: PolicyRoundRobin, EjectAfter: -1})
	h.g.SetBackends("p", []Backend{a.backend("p"), bad.backend("p")})
	for range 6 {
		h.post(t)
	}
	src := h.g.LocalMetrics()
	defer src.Close()
	if src.Name() != SignalGateway {
		t.Errorf("Name %q", src.Name())
	}
	snap, err := src.Snapshot(context.Background(), []loadmetrics.Target{{ID: "a"}, {ID: "bad"}, {ID: "unknown"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap["unknown"]; ok || len(snap) != 2 {
		t.Fatalf("snapshot %v; want a and bad only", snap)
	}
	ma, mb := snap["a"], snap["bad"]
	if ma.Has&loadmetrics.FieldLatency == 0 || ma.Latency <= 0 || ma.ErrorRate != 0 || ma.InFlight != 0 {
		t.Errorf("a: %+v; want a latency, no errors, nothing in flight", ma)
	}
	if mb.ErrorRate <= 0.2 || mb.Has&loadmetrics.FieldLatency != 0 {
		t.Errorf("bad: %+v; want an error rate after 3 failures and no latency sample", mb)
	}
	if !ma.Fresh(time.Now(), time.Second) {
		t.Errorf("local metrics not fresh: %v", ma.ObservedAt)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := src.Snapshot(ctx, nil); err == nil {
		t.Error("Snapshot ignores a cancelled context")
	}
}

// TestTheDefaultAvoidsASlowBackend: with no options, a backend
// five times slower to answer gets clearly fewer of 60 concurrent-ish
// requests than the fast ones. (Three times slower, 30 ms against 10, was
// within what a loaded machine adds to every answer's time.)
func TestTheDefaultAvoidsASlowBackend(t *testing.T) {
	var set []Backend
	for i, d := range []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond} {
		id := fmt.Sprint("b", i)
		b := newBackend(t, id, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			time.Sleep(d) // the backend's service time, not a synchronisation
			w.WriteHeader(http.StatusOK)
		})
		set = append(set, b.backend("p"))
	}
	h := newHarness(t, Options{})
	h.g.SetBackends("p", set)
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 15 {
				resp, err := h.client.Post(h.srv.URL+"/api/chat", "application/json", strings.NewReader(`{"model":"m"}`))
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				be := resp.Header.Get(BackendHeader)
				mu.Lock()
				got[be]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if got["b2"] >= got["b0"] || got["b2"] >= got["b1"] || got["b2"] > 15 {
		t.Errorf("shares %v; want the slow b2 to get clearly fewer", got)
	}
}

// loadedMachineMaxAge is the metrics age limit of the tests that read
// backends' metrics every 20 ms and then check where requests go: the
// default (four intervals, 80 ms) let a scrape delayed on a loaded machine
// (the race detector, two test packages at once) turn the metrics stale in
// mid-test, and the requests were then balanced on the gateway's own
// signals. What these tests check is the steering by fresh metrics, not the
// age limit (TestMetricsGoStaleOnTheClock does that, on a fake clock).
const loadedMachineMaxAge = time.Minute
