package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/sim"
)

// startSim serves a simulator over a real loopback socket.
func startSim(t *testing.T, cfg sim.Config) (*sim.Server, string) {
	t.Helper()
	s := sim.New(cfg)
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		s.Close()
	})
	return s, srv.Listener.Addr().String()
}

// generate sends one non-streaming generation to a simulator and returns
// when it is answered or ctx ends.
func generate(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/api/generate",
		strings.NewReader(`{"model":"qwen2:0.5b","prompt":"hello","stream":false}`))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// until polls cond until it holds or d passes (a bounded condition poll).
func until(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestScrapeReadsSimulatorLoad(t *testing.T) {
	// One batch slot and a long prefill: the first request runs, the next
	// two wait.
	_, busy := startSim(t, sim.Config{MaxBatch: 1, TTFT: time.Minute, InstanceID: "busy"})
	_, idle := startSim(t, sim.Config{InstanceID: "idle"})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range 3 {
		wg.Go(func() { _ = generate(ctx, busy) })
	}

	fc := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := NewScrape(ScrapeOptions{Clock: fc})
	defer s.Close()
	targets := []Target{{ID: "b", Address: busy}, {ID: "i", Address: idle}}
	var snap map[string]BackendMetrics
	until(t, 10*time.Second, "two waiting requests on the busy backend", func() bool {
		var err error
		snap, err = s.Snapshot(context.Background(), targets)
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		return snap["b"].QueueDepth == 2
	})
	b, i := snap["b"], snap["i"]
	want := FieldQueueDepth | FieldRunning | FieldKVCacheUsage | FieldGPUUtil
	if b.Has&want != want || i.Has&want != want {
		t.Fatalf("fields: busy %b, idle %b; want at least %b", b.Has, i.Has, want)
	}
	if b.Running != 1 || b.KVCacheUsage != 1 {
		t.Errorf("busy: running %v, kv %v; want 1, 1", b.Running, b.KVCacheUsage)
	}
	if i.QueueDepth != 0 || i.Running != 0 || i.KVCacheUsage != 0 {
		t.Errorf("idle: %+v; want zeros", i)
	}
	if !b.ObservedAt.Equal(fc.Now()) {
		t.Errorf("ObservedAt %v, want the injected clock's %v", b.ObservedAt, fc.Now())
	}
	if b.Has&FieldTTFT != 0 {
		t.Errorf("busy backend has a TTFT with no request past its first token: %+v", b)
	}
}

func TestScrapeTTFTFromBucketDeltas(t *testing.T) {
	_, addr := startSim(t, sim.Config{TTFT: 30 * time.Millisecond, OutputTokens: 1})
	s := NewScrape(ScrapeOptions{})
	defer s.Close()
	targets := []Target{{ID: "a", Address: addr}}
	for range 4 {
		if err := generate(context.Background(), addr); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := s.Snapshot(context.Background(), targets)
	if err != nil {
		t.Fatal(err)
	}
	m := snap["a"]
	if m.Has&FieldTTFT == 0 {
		t.Fatalf("no TTFT after 4 requests: %+v", m)
	}
	// The sim's buckets around 30ms are 0.02, 0.04 and 0.06; a loaded
	// machine may push a request into the next one.
	if m.TTFTP50 < 20*time.Millisecond || m.TTFTP50 > 60*time.Millisecond || m.TTFTP99 < m.TTFTP50 || m.TTFTP99 > 100*time.Millisecond {
		t.Errorf("TTFT p50 %v p99 %v; want 20-60ms and p50 <= p99 <= 100ms", m.TTFTP50, m.TTFTP99)
	}
	// Nothing new since: no TTFT for this interval.
	snap, err = s.Snapshot(context.Background(), targets)
	if err != nil {
		t.Fatal(err)
	}
	if snap["a"].Has&FieldTTFT != 0 {
		t.Errorf("TTFT %v reported for an interval without requests", snap["a"].TTFTP50)
	}
	if snap["a"].Has&FieldQueueDepth == 0 {
		t.Errorf("gauges missing on the second scrape: %+v", snap["a"])
	}
}

func TestScrapeFailuresArePerTarget(t *testing.T) {
	_, good := startSim(t, sim.Config{})
	// A backend that accepts the connection and never answers.
	hang := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); hung.Close() })
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	t.Cleanup(broken.Close)
	notMetrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte("other_metric 1\n"))
	}))
	t.Cleanup(notMetrics.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()

	s := NewScrape(ScrapeOptions{Timeout: 200 * time.Millisecond})
	defer s.Close()
	targets := []Target{
		{ID: "good", Address: good},
		{ID: "hung", Address: hung.Listener.Addr().String()},
		{ID: "broken", Address: broken.Listener.Addr().String()},
		{ID: "other", Address: notMetrics.Listener.Addr().String()},
		{ID: "refused", Address: refused},
	}
	start := time.Now()
	snap, err := s.Snapshot(context.Background(), targets)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Snapshot took %v; the per-backend timeout is 200ms", d)
	}
	if _, ok := snap["good"]; !ok || len(snap) != 1 {
		t.Fatalf("snapshot %v; want only the good backend", snap)
	}
	var te *TargetError
	if !errors.As(err, &te) {
		t.Fatalf("err %v; want a *TargetError", err)
	}
	if len(te.Failed) != 4 || te.Total != 5 {
		t.Errorf("failed %v of %d; want 4 of 5", te.Failed, te.Total)
	}
	if !errors.Is(te.Failed["other"], ErrNoMetrics) {
		t.Errorf("other: %v; want ErrNoMetrics", te.Failed["other"])
	}
	if AllFailed(err) {
		t.Error("AllFailed with one backend answering")
	}
	_, err = s.Snapshot(context.Background(), targets[4:])
	if !AllFailed(err) {
		t.Errorf("AllFailed(%v) = false with the only backend refusing", err)
	}
}

func TestScrapeHonoursContext(t *testing.T) {
	hang := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); hung.Close() })
	s := NewScrape(ScrapeOptions{Timeout: time.Minute})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Snapshot(ctx, []Target{{ID: "h", Address: hung.Listener.Addr().String()}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v; want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestParseExposition(t *testing.T) {
	const text = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 2
vllm:num_requests_waiting{model_name="b"} 3
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 4
vllm:num_requests_running{model_name="b"} 1
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="a"} 0.25
vllm:kv_cache_usage_perc{model_name="b"} 0.5
# TYPE tidegpu_sim_gpu_utilization gauge
tidegpu_sim_gpu_utilization 0.75
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="a",le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{model_name="a",le="1"} 2
vllm:time_to_first_token_seconds_bucket{model_name="a",le="+Inf"} 2
vllm:time_to_first_token_seconds_sum{model_name="a"} 0.6
vllm:time_to_first_token_seconds_count{model_name="a"} 2
vllm:time_to_first_token_seconds_bucket{model_name="b",le="0.1"} 0
vllm:time_to_first_token_seconds_bucket{model_name="b",le="1"} 1
vllm:time_to_first_token_seconds_bucket{model_name="b",le="+Inf"} 2
vllm:time_to_first_token_seconds_sum{model_name="b"} 3
vllm:time_to_first_token_seconds_count{model_name="b"} 2
`
	tests := []struct {
		name      string
		text      string
		wantErr   error
		wantHas   Field
		check     func(t *testing.T, m BackendMetrics, b []Bucket)
		anyErr    bool
		noBuckets bool
	}{
		{name: "vLLM names over two models", text: text,
			wantHas: FieldQueueDepth | FieldRunning | FieldKVCacheUsage | FieldGPUUtil,
			check: func(t *testing.T, m BackendMetrics, b []Bucket) {
				if m.QueueDepth != 5 || m.Running != 5 || m.KVCacheUsage != 0.5 || m.GPUUtil != 0.75 {
					t.Errorf("values %+v; want queue 5 (sum), running 5 (sum), kv 0.5 (max), gpu 0.75", m)
				}
				want := []Bucket{{0.1, 1}, {1, 3}}
				if len(b) != 3 || b[0] != want[0] || b[1] != want[1] || b[2].Count != 4 {
					t.Errorf("buckets %v; want %v then +Inf 4", b, want)
				}
			}},
		{name: "pre-V1 KV-cache name", text: "vllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.3\n", wantHas: FieldQueueDepth | FieldKVCacheUsage, noBuckets: true,
			check: func(t *testing.T, m BackendMetrics, _ []Bucket) {
				if m.KVCacheUsage != 0.3 {
					t.Errorf("kv %v", m.KVCacheUsage)
				}
			}},
		{name: "V1 name wins over the old one", text: "vllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.3\nvllm:kv_cache_usage_perc 0.6\n", wantHas: FieldQueueDepth | FieldKVCacheUsage, noBuckets: true,
			check: func(t *testing.T, m BackendMetrics, _ []Bucket) {
				if m.KVCacheUsage != 0.6 {
					t.Errorf("kv %v", m.KVCacheUsage)
				}
			}},
		{name: "negative and NaN values are unknown", text: "vllm:num_requests_waiting 0\nvllm:num_requests_running NaN\ntidegpu_sim_gpu_utilization -1\nvllm:kv_cache_usage_perc 3\n",
			wantHas: FieldQueueDepth | FieldKVCacheUsage, noBuckets: true,
			check: func(t *testing.T, m BackendMetrics, _ []Bucket) {
				if m.KVCacheUsage != 1 {
					t.Errorf("kv %v; want clamped to 1", m.KVCacheUsage)
				}
			}},
		{name: "none of our metrics", text: "go_goroutines 12\n", wantErr: ErrNoMetrics},
		{name: "KV cache without a queue", text: "vllm:kv_cache_usage_perc 0.3\n", wantErr: ErrNoMetrics},
		{name: "unusable queue value", text: "vllm:num_requests_waiting -1\nvllm:num_requests_running 2\n", wantErr: ErrNoMetrics},
		{name: "empty", text: "", wantErr: ErrNoMetrics},
		{name: "malformed", text: "vllm:num_requests_waiting{ 2\n", anyErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, b, err := ParseExposition([]byte(tt.text), expfmt.NewFormat(expfmt.TypeTextPlain))
			switch {
			case tt.wantErr != nil || tt.anyErr:
				if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("err %v; want %v", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if m.Has != tt.wantHas {
				t.Errorf("Has %b; want %b", m.Has, tt.wantHas)
			}
			if tt.noBuckets && b != nil {
				t.Errorf("buckets %v; want none", b)
			}
			if tt.check != nil {
				tt.check(t, m, b)
			}
		})
	}
}

func TestFresh(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	tests := []struct {
		name string
		m    BackendMetrics
		want bool
	}{
		{"just observed", BackendMetrics{Has: FieldQueueDepth, ObservedAt: now}, true},
		{"at the max age", BackendMetrics{Has: FieldQueueDepth, ObservedAt: now.Add(-2 * time.Second)}, true},
		{"older than the max age", BackendMetrics{Has: FieldQueueDepth, ObservedAt: now.Add(-2*time.Second - 1)}, false},
		{"far in the future", BackendMetrics{Has: FieldQueueDepth, ObservedAt: now.Add(3 * time.Second)}, false},
		{"no time", BackendMetrics{Has: FieldQueueDepth}, false},
		{"no values", BackendMetrics{ObservedAt: now}, false},
		{"held: old but read again later on purpose", BackendMetrics{Has: FieldQueueDepth, ObservedAt: now.Add(-20 * time.Second), HeldUntil: now.Add(5 * time.Second)}, true},
		{"held until just past, within the max age", BackendMetrics{Has: FieldQueueDepth, ObservedAt: now.Add(-20 * time.Second), HeldUntil: now.Add(-2 * time.Second)}, true},
		{"held until long past", BackendMetrics{Has: FieldQueueDepth, ObservedAt: now.Add(-20 * time.Second), HeldUntil: now.Add(-2*time.Second - 1)}, false},
		{"held before observed: ignored", BackendMetrics{Has: FieldQueueDepth, ObservedAt: now.Add(-3 * time.Second), HeldUntil: now.Add(-10 * time.Second)}, false},
		{"held, observed far in the future", BackendMetrics{Has: FieldQueueDepth, ObservedAt: now.Add(3 * time.Second), HeldUntil: now.Add(10 * time.Second)}, false},
	}
	for _, tt := range tests {
		if got := tt.m.Fresh(now, 2*time.Second); got != tt.want {
			t.Errorf("%s: Fresh = %v, want %v", tt.name, got, tt.want)
		}
	}
}
