package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// loadBackend answers a small JSON document, or with X-Stream: 1 a
// three-line NDJSON stream flushed line by line.
func loadBackend(t *testing.T, id string) *testBackend {
	return newBackend(t, id, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Stream") == "1" {
			w.Header().Set("Content-Type", "application/x-ndjson")
			for i := range 3 {
				fmt.Fprintf(w, "{\"b\":%q,\"i\":%d}\n", id, i)
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"b\":%q}", id)
	})
}

// TestConcurrentLoadWithSwapsAndKill runs 32 clients x 50 requests (half of
// them streams) while the backend set is swapped and drained under them and
// one backend is killed with requests waiting on it. Not one request may
// fail.
func TestConcurrentLoadWithSwapsAndKill(t *testing.T) {
	const (
		workers   = 32
		perWorker = 50
		killAt    = 300 // completed requests
	)
	a, b, c := loadBackend(t, "a"), loadBackend(t, "b"), loadBackend(t, "c")

	// The victim takes requests but never answers them, as a model that is
	// slow to the first token; when killed it resets every connection
	// (SIGKILL) and stops listening.
	kill := make(chan struct{})
	victim := newBackend(t, "victim", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-kill:
		case <-r.Context().Done():
			return
		}
		hijackReset(w)
	})
	killVictim := func() {
		close(kill)
		_ = victim.Listener.Close()
		victim.CloseClientConnections()
	}
	t.Cleanup(func() {
		select {
		case <-kill:
		default:
			killVictim()
		}
	})

	reg := prometheus.NewRegistry()
	h := newHarness(t, Options{
		ProbeInterval:  20 * time.Millisecond,
		ProbePath:      "/healthz",
		WaitForBackend: 5 * time.Second,
		Registry:       reg,
	})
	bk := func(tb *testBackend, draining bool) Backend {
		x := tb.backend("p")
		x.Draining = draining
		return x
	}
	sets := [][]Backend{
		{bk(victim, false), bk(a, false), bk(b, false)},
		{bk(a, false), bk(b, false), bk(c, false)},
		{bk(a, true), bk(b, false), bk(c, false)},
		{bk(victim, false), bk(b, false), bk(c, false)}, // stale: victim may be dead
		{bk(a, false), bk(c, false)},
		{bk(a, false), bk(b, true), bk(c, false)},
		{bk(c, false), bk(b, false), bk(a, false)},
	}
	h.g.SetBackends("p", sets[0])

	swap := make(chan struct{}, 1)
	done := make(chan struct{})
	var swapper sync.WaitGroup
	swapper.Go(func() {
		for i := 1; ; i++ {
			select {
			case <-done:
				return
			case <-swap:
				h.g.SetBackends("p", sets[i%len(sets)])
			}
		}
	})

	var (
		completed atomic.Int64
		failures  atomic.Int64
		firstErr  sync.Once
	)
	fail := func(format string, args ...any) {
		failures.Add(1)
		firstErr.Do(func() { t.Errorf(format, args...) })
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				stream := (w+i)%2 == 0
				path := "/api/chat"
				if i%3 == 0 {
					path = "/ollama-chat"
				}
				req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(`{"model":"m","w":`+fmt.Sprint(w)+`}`))
				if stream {
					req.Header.Set("X-Stream", "1")
				}
				resp, err := h.client.Do(req)
				if err != nil {
					fail("worker %d request %d: %v", w, i, err)
					continue
				}
				be := resp.Header.Get(BackendHeader)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					fail("worker %d request %d: body from %s: %v", w, i, be, err)
				case resp.StatusCode != http.StatusOK:
					fail("worker %d request %d: status %d from %q: %s", w, i, resp.StatusCode, be, body)
				case stream:
					sc := bufio.NewScanner(strings.NewReader(string(body)))
					n := 0
					for sc.Scan() {
						if want := fmt.Sprintf("{\"b\":%q,\"i\":%d}", be, n); sc.Text() != want {
							fail("worker %d request %d: line %q, want %q", w, i, sc.Text(), want)
						}
						n++
					}
					if n != 3 {
						fail("worker %d request %d: %d lines", w, i, n)
					}
				case string(body) != fmt.Sprintf("{\"b\":%q}", be):
					fail("worker %d request %d: body %q from %q", w, i, body, be)
				}
				n := completed.Add(1)
				if n == killAt {
					killVictim()
				}
				if n%25 == 0 {
					select {
					case swap <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	wg.Wait()
	close(done)
	swapper.Wait()

	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed", n, workers*perWorker)
	}
	if victim.hits.Load() == 0 {
		t.Fatal("the victim never had a request to lose")
	}
	// Shutting the front server down waits for every handler: then nothing
	// may be left in flight anywhere.
	if err := h.gs.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c", "victim"} {
		if n := h.g.InFlight(id); n != 0 {
			t.Errorf("InFlight(%s) = %d after the load", id, n)
		}
	}
	retries := 0.0
	for _, reason := range []string{"connect", "transport", "down", "status"} {
		retries += testutil.ToFloat64(h.g.metrics.retries.WithLabelValues(reason))
	}
	t.Logf("%d requests, victim got %d, %v retries; backends: %+v", completed.Load(), victim.hits.Load(), retries, h.g.Backends())
	if retries == 0 {
		t.Error("no retries: the kill did not hit any request")
	}
}
