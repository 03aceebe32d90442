package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestScrapeOncePerAddressAndConditional: two targets on one address are
// scraped once per Snapshot; a server that sends an ETag gets it back, and
// its 304 reuses the last values, observed now.
func TestScrapeOncePerAddressAndConditional(t *testing.T) {
	const body = "vllm:num_requests_waiting 2\nvllm:num_requests_running 3\n"
	var hits, notModified atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("If-None-Match") == `"v1"` {
			notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	fc := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := NewScrape(ScrapeOptions{Clock: fc})
	defer s.Close()
	addr := srv.Listener.Addr().String()
	targets := []Target{{ID: "a", Address: addr}, {ID: "b", Address: addr}}
	for i := range 2 {
		snap, err := s.Snapshot(context.Background(), targets)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"a", "b"} {
			m := snap[id]
			if m.QueueDepth != 2 || m.Running != 3 || m.Family != "vllm" || !m.ObservedAt.Equal(fc.Now()) {
				t.Errorf("snapshot %d, %s: %+v", i, id, m)
			}
		}
		if got := hits.Load(); got != int64(i+1) {
			t.Fatalf("snapshot %d: %d requests for two targets on one address, want %d", i, got, i+1)
		}
		fc.Step(time.Second)
	}
	if notModified.Load() != 1 {
		t.Errorf("%d conditional answers, want 1", notModified.Load())
	}
}

// TestScrapeReusesAnUnchangedBody: a server without validators that
// answers the same bytes gets the same values (parsing is skipped), and a
// changed body is parsed.
func TestScrapeReusesAnUnchangedBody(t *testing.T) {
	var body atomic.Value
	body.Store("vllm:num_requests_waiting 1\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(body.Load().(string)))
	}))
	defer srv.Close()
	s := NewScrape(ScrapeOptions{})
	defer s.Close()
	tg := []Target{{ID: "a", Address: srv.Listener.Addr().String()}}
	for i, want := range []float64{1, 1, 4} {
		if i == 2 {
			body.Store("vllm:num_requests_waiting 4\n")
		}
		snap, err := s.Snapshot(context.Background(), tg)
		if err != nil {
			t.Fatal(err)
		}
		if got := snap["a"].QueueDepth; got != want {
			t.Errorf("read %d: queue %v, want %v", i, got, want)
		}
	}
}
