package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/metrics/promtest"
	"github.com/tidegpu/tidegpu/internal/sim"
)

// TestPrometheusSourceAgainstRealPrometheus runs Debian's Prometheus
// scraping two simulators, one with a queue, reads their load through
// PromQL, then stops Prometheus: the source must fail (so its caller falls
// back) instead of returning stale or empty data as if all were idle.
func TestPrometheusSourceAgainstRealPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus server")
	}
	_, busy := startSim(t, sim.Config{MaxBatch: 1, TTFT: time.Minute, InstanceID: "busy"})
	_, idle := startSim(t, sim.Config{TTFT: 5 * time.Millisecond, OutputTokens: 1, InstanceID: "idle"})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range 3 {
		wg.Go(func() { _ = generate(ctx, busy) })
	}
	for range 3 {
		if err := generate(context.Background(), idle); err != nil {
			t.Fatal(err)
		}
	}

	// A TGI router (its gauges only), read through the same default
	// queries, which join every family's.
	tgi := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(tgiExposition))
	}))
	t.Cleanup(tgi.Close)
	tgiAddr := tgi.Listener.Addr().String()

	prom := promtest.Start(t, []string{busy, idle, tgiAddr}, 200*time.Millisecond)
	// Two scrapes of both, so that rate() over the TTFT buckets has points.
	prom.WaitFor(t, `count_over_time(vllm:num_requests_waiting[1m]) >= 2`, 2, 20*time.Second)

	src, err := NewPrometheus(PrometheusOptions{Address: prom.URL, Selector: `{job="tidegpu"}`})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	targets := []Target{{ID: "b", Address: busy}, {ID: "i", Address: idle}, {ID: "t", Address: tgiAddr}, {ID: "gone", Address: "127.0.0.1:1"}}
	var snap map[string]BackendMetrics
	until(t, 20*time.Second, "queue depth 2 on the busy backend through Prometheus", func() bool {
		snap, err = src.Snapshot(context.Background(), targets)
		var te *TargetError
		return errors.As(err, &te) && len(te.Failed) == 1 && te.Failed["gone"] != nil && snap["b"].QueueDepth == 2
	})
	// A backend with no series is an error naming it, not an idle one.
	if msg := err.Error(); !strings.Contains(msg, "gone") || !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, "tgi_queue_size") {
		t.Errorf("error %q does not name the backend and the expected series", msg)
	}
	if AllFailed(err) {
		t.Error("AllFailed with three of four answering")
	}
	if m := snap["t"]; m.QueueDepth != 5 || m.Running != 8 || m.Has&FieldKVCacheUsage != 0 {
		t.Errorf("TGI through Prometheus: %+v; want queue 5, running 8, no KV cache", m)
	}
	b, i := snap["b"], snap["i"]
	want := FieldQueueDepth | FieldRunning | FieldKVCacheUsage | FieldGPUUtil
	if b.Has&want != want || i.Has&want != want {
		t.Fatalf("fields: busy %b, idle %b; want at least %b", b.Has, i.Has, want)
	}
	if b.Running != 1 || b.KVCacheUsage != 1 || i.QueueDepth != 0 {
		t.Errorf("busy %+v, idle %+v", b, i)
	}
	if _, ok := snap["gone"]; ok {
		t.Errorf("a target Prometheus does not scrape has metrics: %+v", snap["gone"])
	}
	// ObservedAt is the scrape's time (timestamp()), within a few scrape
	// intervals of now.
	if age := time.Since(b.ObservedAt); age < 0 || age > 5*time.Second {
		t.Errorf("ObservedAt %v is %v old", b.ObservedAt, age)
	}
	if q := src.Queries()["QueueDepth"]; !strings.HasPrefix(q, `sum by (instance) (vllm:num_requests_waiting{job="tidegpu"}) or sum by (instance) ((sglang:num_queue_reqs{job="tidegpu"} unless sglang:num_queue_reqs{tp_rank!~"0|"}))`) {
		t.Errorf("rendered query %q", q)
	}

	prom.Stop()
	snap, err = src.Snapshot(context.Background(), targets)
	if err == nil {
		t.Fatalf("Snapshot with Prometheus down: no error, %v", snap)
	}
	if !AllFailed(err) {
		t.Errorf("AllFailed(%v) = false", err)
	}
	if len(snap) != 0 {
		t.Errorf("Prometheus down, yet metrics: %v", snap)
	}
	if !strings.Contains(err.Error(), "QueueDepth") {
		t.Errorf("error %q does not say which query failed", err)
	}
}

func TestNewPrometheusValidates(t *testing.T) {
	tests := []struct {
		name string
		o    PrometheusOptions
		want string // substring of the error; "" = valid
	}{
		{"valid", PrometheusOptions{Address: "http://127.0.0.1:9090"}, ""},
		{"no address", PrometheusOptions{}, "no address"},
		{"not a URL", PrometheusOptions{Address: "127.0.0.1:9090"}, "http(s) URL"},
		{"bad label", PrometheusOptions{Address: "http://p:9090", Label: "a-b"}, "label"},
		{"bad window", PrometheusOptions{Address: "http://p:9090", Window: "soon"}, "window"},
		{"bad template", PrometheusOptions{Address: "http://p:9090", Queries: Queries{Running: "{{.Nope"}}, "Running"},
		{"unknown field", PrometheusOptions{Address: "http://p:9090", Queries: Queries{Running: "{{.Nope}}"}}, "Running"},
		{"disabled queries", PrometheusOptions{Address: "http://p:9090", Queries: Queries{TTFTP50: DisabledQuery, TTFTP99: DisabledQuery}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPrometheus(tt.o)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("err %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err %v; want one containing %q", err, tt.want)
			}
			if tt.name == "disabled queries" {
				if _, ok := p.Queries()["TTFTP50"]; ok {
					t.Error("disabled query still runs")
				}
			}
		})
	}
}

func TestFamilyQueries(t *testing.T) {
	tests := []struct {
		family Family
		field  string
		want   string
	}{
		{FamilyVLLM, "QueueDepth", `sum by (instance) (vllm:num_requests_waiting{job="x"})`},
		{FamilyVLLM, "KVCacheUsage", `max by (instance) (vllm:kv_cache_usage_perc{job="x"}) or max by (instance) (vllm:gpu_cache_usage_perc{job="x"})`},
		{FamilyVLLM, "TTFTP99", `histogram_quantile(0.99, sum by (instance, le) (rate(vllm:time_to_first_token_seconds_bucket{job="x"}[1m])))`},
		{FamilySGLang, "TTFTP50", `histogram_quantile(0.5, sum by (instance, le) ((rate(sglang:time_to_first_token_seconds_bucket{job="x"}[1m]) unless rate(sglang:time_to_first_token_seconds_bucket{tp_rank!~"0|"}[1m]))))`},
		{FamilySGLang, "Running", `sum by (instance) ((sglang:num_running_reqs{job="x"} unless sglang:num_running_reqs{tp_rank!~"0|"}))`},
		{FamilyTGI, "QueueDepth", `sum by (instance) (tgi_queue_size{job="x"})`},
		{FamilyTGI, "KVCacheUsage", ""}, // disabled: TGI has none
		{FamilyLlamaCpp, "Running", `sum by (instance) (llamacpp:requests_processing{job="x"})`},
		{FamilyLlamaCpp, "ObservedAt", `max by (instance) (timestamp(llamacpp:requests_deferred{job="x"}))`},
		{Family{Name: "x", Server: "X", Queue: "q", KVCache: []string{"kv"}, KVCacheScale: 0.01, TTFT: "ms", TTFTScale: 0.001}, "TTFTP50",
			`histogram_quantile(0.5, sum by (instance, le) (rate(ms_bucket{job="x"}[1m]))) * 0.001`},
	}
	for _, tt := range tests {
		p, err := NewPrometheus(PrometheusOptions{Address: "http://p:9090", Family: tt.family, Selector: `{job="x"}`})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Queries()[tt.field]; got != tt.want {
			t.Errorf("%s %s:\n got %s\nwant %s", tt.family.Name, tt.field, got, tt.want)
		}
	}
}
