package metrics

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/tidegpu/tidegpu/internal/sim"
)

// countingWriter counts the bytes of an answer.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(b []byte) (int, error) {
	w.n.Add(int64(len(b)))
	return w.ResponseWriter.Write(b)
}

// TestScrapeAsksOnlyForItsNames: a scrape of a real simulator names the
// family's metrics in name[] (client_golang's promhttp honours it), gets a
// smaller answer, and reads the same values as from the whole exposition.
func TestScrapeAsksOnlyForItsNames(t *testing.T) {
	s := sim.New(sim.Config{InstanceID: "a"})
	t.Cleanup(s.Close)
	var mu sync.Mutex
	var asked [][]string
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			mu.Lock()
			asked = append(asked, r.URL.Query()["name[]"])
			mu.Unlock()
		}
		s.ServeHTTP(countingWriter{w, &sent}, r)
	}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	if err := generate(context.Background(), addr); err != nil {
		t.Fatal(err)
	}
	sent.Store(0)

	sc := NewScrape(ScrapeOptions{Family: FamilyVLLM})
	defer sc.Close()
	snap, err := sc.Snapshot(context.Background(), []Target{{ID: "a", Address: addr}})
	if err != nil {
		t.Fatal(err)
	}
	filtered := sent.Load()

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want, _, err := ParseFamily(whole, expfmt.ResponseFormat(resp.Header), FamilyVLLM)
	if err != nil {
		t.Fatal(err)
	}
	got := snap["a"]
	got.ObservedAt, got.TTFTP50, got.TTFTP99, got.Has = time.Time{}, 0, 0, got.Has&^FieldTTFT
	// The GPU utilisation decays between the two reads.
	if got.QueueDepth != want.QueueDepth || got.Running != want.Running || got.KVCacheUsage != want.KVCacheUsage || got.Has != want.Has {
		t.Errorf("filtered scrape %+v, whole exposition %+v", got, want)
	}
	if snap["a"].Has&FieldTTFT == 0 {
		t.Errorf("no TTFT from the filtered answer: %+v", snap["a"])
	}
	mu.Lock()
	first := asked[0]
	mu.Unlock()
	if !slices.Contains(first, MetricQueueDepth) || !slices.Contains(first, MetricTTFT) || !slices.Contains(first, MetricTTFT+"_bucket") {
		t.Errorf("name[] %q: want the queue gauge and the TTFT histogram's names", first)
	}
	if filtered*2 > int64(len(whole)) {
		t.Errorf("the filtered answer has %d bytes, the whole %d: want under half", filtered, len(whole))
	}
}

// TestScrapeWithoutTheQueryWhenRefused: a server that answers the name[]
// query with 400 is asked again without it at once, and from then on.
func TestScrapeWithoutTheQueryWhenRefused(t *testing.T) {
	var withQuery, plain atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			withQuery.Add(1)
			http.Error(w, "unknown parameter", http.StatusBadRequest)
			return
		}
		plain.Add(1)
		_, _ = io.WriteString(w, "# TYPE go_gc gauge\ngo_gc 1\nvllm:num_requests_waiting 4\n")
	}))
	defer srv.Close()
	sc := NewScrape(ScrapeOptions{})
	defer sc.Close()
	for i := range 3 {
		snap, err := sc.Snapshot(context.Background(), []Target{{ID: "a", Address: srv.Listener.Addr().String()}})
		if err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
		if snap["a"].QueueDepth != 4 {
			t.Errorf("snapshot %d: %+v", i, snap["a"])
		}
	}
	if withQuery.Load() != 1 || plain.Load() != 3 {
		t.Errorf("%d requests with the query, %d without; want 1 and 3", withQuery.Load(), plain.Load())
	}
}

// TestScrapeSkipsAChangeElsewhere: an answer whose wanted lines did not
// change is not parsed again, though other families moved; the values are
// those of the last parse, observed now.
func TestScrapeSkipsAChangeElsewhere(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Another family moves at every read; the queue stays.
		_, _ = io.WriteString(w, "vllm:num_requests_waiting 1\nvllm:prompt_tokens_total "+strings.Repeat("9", int(n.Add(1)))+"\n")
	}))
	defer srv.Close()
	sc := NewScrape(ScrapeOptions{})
	defer sc.Close()
	tg := []Target{{ID: "a", Address: srv.Listener.Addr().String()}}
	var first *scrapeState
	for i := range 3 {
		if _, err := sc.Snapshot(context.Background(), tg); err != nil {
			t.Fatal(err)
		}
		sc.mu.Lock()
		st := sc.prev[scrapeKey(tg[0].Address, Family{})]
		sc.mu.Unlock()
		if i == 0 {
			first = st
		} else if st != first {
			t.Errorf("read %d: the state was replaced (a parse) though the wanted lines are the same", i)
		}
	}
}
