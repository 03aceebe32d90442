package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/metrics/promtest"
)

// familyExpositions render, for each server family, a /metrics answer with
// queue requests waiting. They follow the servers' own metric definitions
// (names, types, labels, units), written for these tests:
//
//   - vLLM: vllm-project/vllm, vllm/v1/metrics/loggers.py (labels
//     model_name and engine).
//   - SGLang: sgl-project/sglang, python/sglang/srt/metrics/collector.py
//     (SchedulerMetricsCollector).
//   - TGI: huggingface/text-generation-inference,
//     docs/source/reference/metrics.md.
//   - llama.cpp: ggml-org/llama.cpp, tools/server/README.md ("GET /metrics").
var familyExpositions = map[string]func(queue int) string{
	"vllm": func(q int) string {
		return fmt.Sprintf(`# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %d
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
`, q)
	},
	"sglang": func(q int) string {
		return fmt.Sprintf(`# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="m"} %d
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m"} 1
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="m"} 0.5
`, q)
	},
	"tgi": func(q int) string {
		return fmt.Sprintf("# TYPE tgi_queue_size gauge\ntgi_queue_size %d\n# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 1\n", q)
	},
	"llamacpp": func(q int) string {
		return fmt.Sprintf("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred %d\n", q)
	},
}

// familyBackend serves exposition at /metrics and echoes everything else.
func familyBackend(t *testing.T, id, exposition string) *testBackend {
	echo := echoHandler(id)
	return newBackend(t, id, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = w.Write([]byte(exposition))
			return
		}
		echo(w, r)
	})
}

// TestEveryFamilySteersP2C: for each server family, through the real
// gateway scraping real HTTP backends, a backend reporting 5 waiting
// requests in its family's metrics gets (almost) nothing while an idle one
// is there.
func TestEveryFamilySteersP2C(t *testing.T) {
	for _, fam := range loadmetrics.Families {
		t.Run(fam.Name, func(t *testing.T) {
			render := familyExpositions[fam.Name]
			busy := familyBackend(t, "busy", render(5))
			idle := familyBackend(t, "idle", render(0))
			src := loadmetrics.NewScrape(loadmetrics.ScrapeOptions{})
			defer src.Close()
			h := newHarness(t, Options{Metrics: src, MetricsInterval: 20 * time.Millisecond, MetricsMaxAge: loadedMachineMaxAge})
			h.g.SetBackends("p", []Backend{busy.backend("p"), idle.backend("p")})
			poll(t, 10*time.Second, "fresh metrics showing busy's queue", func() bool {
				s := h.g.SignalStatus()["p"]
				return s.Source == "scrape" && s.Fresh == 2 && s.Err == "" && status(t, h.g, "busy").QueueDepth == 5
			})
			if f := status(t, h.g, "idle").MetricsFamily; f != fam.Name {
				t.Errorf("BackendStatus.MetricsFamily %q; want %q", f, fam.Name)
			}
			checkSignals(t, status(t, h.g, "busy").Signals, fam, "scrape")
			got := map[string]int{}
			for range 100 {
				got[generateVia(t, h)]++
			}
			if got["idle"] < 95 {
				t.Errorf("%s: %v; want at least 95 of 100 on the idle backend", fam.Server, got)
			}
		})
	}
}

// TestUnknownExpositionIsAnError: a backend whose /metrics matches no
// family is reported in SignalStatus with its ID and what was expected, and
// balanced on the gateway's own signals, not as idle.
func TestUnknownExpositionIsAnError(t *testing.T) {
	other := familyBackend(t, "other", "# TYPE go_goroutines gauge\ngo_goroutines 12\n")
	src := loadmetrics.NewScrape(loadmetrics.ScrapeOptions{})
	defer src.Close()
	h := newHarness(t, Options{Metrics: src, MetricsInterval: 20 * time.Millisecond})
	h.g.SetBackends("p", []Backend{other.backend("p")})
	poll(t, 10*time.Second, "the scrape error", func() bool { return h.g.SignalStatus()["p"].Err != "" })
	s := h.g.SignalStatus()["p"]
	if s.Source != SignalGateway || s.Fresh != 0 {
		t.Errorf("status %+v; want the gateway's own signals", s)
	}
	for _, want := range []string{"other", other.addr(), "sglang:num_queue_reqs", "tgi_queue_size", "llamacpp:requests_deferred"} {
		if !strings.Contains(s.Err, want) {
			t.Errorf("error %q does not name %q", s.Err, want)
		}
	}
}

// TestEveryFamilySteersP2CThroughPrometheus: the same as
// TestEveryFamilySteersP2C with the real Prometheus (Debian's package)
// scraping every family's backends and the gateway reading them through
// the default PromQL queries, which join every family's names. A backend
// Prometheus has no series for is an error naming it, and is balanced on
// the gateway's own signals, not taken for idle.
func TestEveryFamilySteersP2CThroughPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus server")
	}
	type pair struct{ busy, idle *testBackend }
	pairs := map[string]pair{}
	var scraped []string
	for _, fam := range loadmetrics.Families {
		render := familyExpositions[fam.Name]
		p := pair{familyBackend(t, fam.Name+"-busy", render(5)), familyBackend(t, fam.Name+"-idle", render(0))}
		pairs[fam.Name] = p
		scraped = append(scraped, p.busy.addr(), p.idle.addr())
	}
	prom := promtest.Start(t, scraped, 200*time.Millisecond)
	prom.WaitFor(t, "up == 1", len(scraped), 20*time.Second)

	for _, fam := range loadmetrics.Families {
		t.Run(fam.Name, func(t *testing.T) {
			p := pairs[fam.Name]
			src, err := loadmetrics.NewPrometheus(loadmetrics.PrometheusOptions{Address: prom.URL, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, Options{Metrics: src, MetricsInterval: 50 * time.Millisecond, MetricsMaxAge: 2 * time.Second})
			h.g.SetBackends("p", []Backend{p.busy.backend("p"), p.idle.backend("p")})
			poll(t, 20*time.Second, "fresh metrics from Prometheus showing busy's queue", func() bool {
				s := h.g.SignalStatus()["p"]
				return s.Source == "prometheus" && s.Fresh == 2 && s.Err == "" && status(t, h.g, fam.Name+"-busy").QueueDepth == 5
			})
			checkSignals(t, status(t, h.g, fam.Name+"-busy").Signals, fam, "prometheus")
			got := map[string]int{}
			for range 100 {
				got[generateVia(t, h)]++
			}
			if got[fam.Name+"-idle"] < 95 {
				t.Errorf("%s through Prometheus: %v; want at least 95 of 100 on the idle backend", fam.Server, got)
			}
		})
	}

	t.Run("a pool's own names", func(t *testing.T) {
		// The busy vLLM backend's queue read through names of its own
		// (its pool's spec.serving.metrics): the same series, by name.
		fam, _, err := loadmetrics.SpecFamily(&tidev1.ServingMetrics{Names: &tidev1.MetricNames{Queue: "vllm:num_requests_waiting", Running: "vllm:num_requests_running"}})
		if err != nil {
			t.Fatal(err)
		}
		src, err := loadmetrics.NewPrometheus(loadmetrics.PrometheusOptions{Address: prom.URL, Timeout: time.Second, Family: loadmetrics.FamilyTGI})
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, Options{Metrics: src, MetricsInterval: 50 * time.Millisecond, MetricsMaxAge: 2 * time.Second})
		busy, idle := pairs["vllm"].busy.backend("p"), pairs["tgi"].idle.backend("p")
		busy.MetricsFamily = fam // the source reads TGI names; this pool says its own
		h.g.SetBackends("p", []Backend{busy, idle})
		poll(t, 20*time.Second, "both read, each with its names", func() bool {
			s := h.g.SignalStatus()["p"]
			return s.Fresh == 2 && s.Err == "" && status(t, h.g, "vllm-busy").QueueDepth == 5
		})
	})

	t.Run("a pool's own queries", func(t *testing.T) {
		// The busy vLLM backend's queue through a query of its pool's
		// own (spec.serving.metrics.promql), doubled to tell it from the
		// family's.
		q := loadmetrics.SpecQueries(&tidev1.ServingMetrics{PromQL: &tidev1.PromQLQueries{
			Queue: "sum by ({{.Label}}) (vllm:num_requests_waiting{{.Selector}}) * 2"}})
		src, err := loadmetrics.NewPrometheus(loadmetrics.PrometheusOptions{Address: prom.URL, Timeout: time.Second, Family: loadmetrics.FamilyTGI})
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, Options{Metrics: src, MetricsInterval: 50 * time.Millisecond, MetricsMaxAge: 2 * time.Second})
		busy := pairs["vllm"].busy.backend("p")
		busy.MetricsQueries = q
		h.g.SetBackends("p", []Backend{busy})
		poll(t, 20*time.Second, "busy's queue through its own query", func() bool {
			s := h.g.SignalStatus()["p"]
			return s.Fresh == 1 && s.Err == "" && status(t, h.g, "vllm-busy").QueueDepth == 10
		})
	})

	t.Run("no series", func(t *testing.T) {
		unscraped := familyBackend(t, "unscraped", familyExpositions["vllm"](0))
		idle := pairs["vllm"].idle
		src, err := loadmetrics.NewPrometheus(loadmetrics.PrometheusOptions{Address: prom.URL, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, Options{Metrics: src, MetricsInterval: 50 * time.Millisecond, MetricsMaxAge: 2 * time.Second})
		h.g.SetBackends("p", []Backend{unscraped.backend("p"), idle.backend("p")})
		poll(t, 20*time.Second, "the error for the backend without series", func() bool {
			s := h.g.SignalStatus()["p"]
			return s.Fresh == 1 && s.Err != ""
		})
		s := h.g.SignalStatus()["p"]
		for _, want := range []string{"unscraped", unscraped.addr(), "no series"} {
			if !strings.Contains(s.Err, want) {
				t.Errorf("error %q does not name %q", s.Err, want)
			}
		}
		st := status(t, h.g, "unscraped")
		if st.MetricsFresh || st.Signals.Fresh || st.Signals.Queue != nil {
			t.Errorf("the backend without series has fresh metrics: %+v", st.Signals)
		}
		if !strings.Contains(st.Signals.Error, "no series") || st.Signals.Source != "prometheus" || len(st.Signals.Missing) != 5 {
			t.Errorf("its signals %+v; want the error, the source and all 5 missing", st.Signals)
		}
		if e := status(t, h.g, idle.id).Signals.Error; e != "" {
			t.Errorf("the scraped backend carries the other's error %q", e)
		}
	})
}

// checkSignals checks a busy family backend's BackendSignals: queue 5, the
// family's name and source, a recent read, and exactly the signals the
// family does not publish (and GPU utilisation, which none does) missing.
func checkSignals(t *testing.T, s *BackendSignals, fam loadmetrics.Family, source string) {
	t.Helper()
	if s == nil {
		t.Fatal("no Signals in BackendStatus")
	}
	if s.Queue == nil || *s.Queue != 5 || s.Running == nil || *s.Running != 1 || s.Source != source || !s.Fresh || s.Age < 0 || s.Age > 5 || s.Error != "" {
		t.Errorf("%s signals %+v; want queue 5, running 1, fresh from %s", fam.Name, s, source)
	}
	if source == "scrape" && s.Family != fam.Name {
		t.Errorf("family %q; want %q", s.Family, fam.Name)
	}
	want := []string{}
	if len(fam.KVCache) == 0 || fam.Name == "llamacpp" { // the test's llama.cpp exposition has no KV ratio
		want = append(want, "kvCache")
	} else if s.KVCache == nil || *s.KVCache != 0.5 {
		t.Errorf("%s kvCache %v; want 0.5", fam.Name, s.KVCache)
	}
	want = append(want, "ttftP99", "gpuUtil") // the test's expositions have no TTFT histogram
	if strings.Join(s.Missing, ",") != strings.Join(want, ",") {
		t.Errorf("%s missing %v; want %v", fam.Name, s.Missing, want)
	}
}

// TestPoolMetricsFamilySteersP2C: a pool's spec.serving.metrics reaches
// the gateway with its backends: custom names (a server of no known
// family, KV cache in percent) are read and steer p2c, and a pool with
// family none is not read at all, which /api/v1/backends says.
func TestPoolMetricsFamilySteersP2C(t *testing.T) {
	custom := func(q int) string {
		return fmt.Sprintf("# TYPE my_waiting gauge\nmy_waiting %d\n# TYPE my_kv_percent gauge\nmy_kv_percent 50\n", q)
	}
	busy := familyBackend(t, "busy", custom(5))
	idle := familyBackend(t, "idle", custom(0))
	fam, off, err := loadmetrics.SpecFamily(&tidev1.ServingMetrics{Names: &tidev1.MetricNames{Queue: "my_waiting", KVCache: "my_kv_percent", KVCacheUnit: "Percent"}})
	if err != nil || off {
		t.Fatal(err, off)
	}
	src := loadmetrics.NewScrape(loadmetrics.ScrapeOptions{})
	defer src.Close()
	h := newHarness(t, Options{Metrics: src, MetricsInterval: 20 * time.Millisecond, MetricsMaxAge: loadedMachineMaxAge})
	with := func(b Backend) Backend { b.MetricsFamily = fam; return b }
	h.g.SetBackends("p", []Backend{with(busy.backend("p")), with(idle.backend("p"))})
	poll(t, 10*time.Second, "fresh custom metrics showing busy's queue", func() bool {
		s := h.g.SignalStatus()["p"]
		return s.Fresh == 2 && s.Err == "" && status(t, h.g, "busy").QueueDepth == 5
	})
	if s := status(t, h.g, "busy").Signals; s.KVCache == nil || *s.KVCache != 0.5 || s.Family != "custom" {
		t.Errorf("signals %+v; want KV cache 0.5 from 50 %%, family custom", s)
	}
	got := map[string]int{}
	for range 100 {
		got[generateVia(t, h)]++
	}
	if got["idle"] < 95 {
		t.Errorf("custom names: %v; want at least 95 of 100 on the idle backend", got)
	}

	// Family none: never read, on the gateway's own signals, no error.
	ollama := familyBackend(t, "ollama", "")
	h.g.SetBackends("o", []Backend{{ID: "ollama", Pool: "o", Address: ollama.addr(), NoMetrics: true}})
	h.g.refreshMetrics(context.Background())
	s := status(t, h.g, "ollama").Signals
	if s.Source != SignalGateway || s.Error != "" || s.Fresh {
		t.Errorf("a family-none backend's signals %+v; want the gateway's own, no error", s)
	}
}

// TestOllamaLoadedModelSteersRouting: two Ollama backends (no /metrics;
// /api/ps in the shape of https://docs.ollama.com/api/ps), one with the
// requested model loaded: the gateway reads their loaded models without
// reporting an error, sends the model's requests to the backend that has
// it in memory, and balances a model neither has loaded as before.
func TestOllamaLoadedModelSteersRouting(t *testing.T) {
	ollama := func(id, loaded string) *testBackend {
		echo := echoHandler(id)
		return newBackend(t, id, func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/api/ps":
				fmt.Fprintf(w, `{"models":[{"name":%q,"model":%q,"size":6591830464,"digest":"a2af6cc3","details":{"format":"gguf","family":"qwen2"},"expires_at":"2025-10-17T16:47:07.93355-07:00","size_vram":6591830464,"context_length":4096}]}`, loaded, loaded)
			case "/metrics":
				http.NotFound(w, r)
			default:
				echo(w, r)
			}
		})
	}
	warm := ollama("warm", "qwen2:0.5b")
	cold := ollama("cold", "llama3.2:latest")
	src := loadmetrics.NewOllama(loadmetrics.NewScrape(loadmetrics.ScrapeOptions{}), loadmetrics.OllamaOptions{})
	defer src.Close()
	h := newHarness(t, Options{Metrics: src, MetricsInterval: 20 * time.Millisecond, MetricsMaxAge: loadedMachineMaxAge})
	h.g.SetBackends("p", []Backend{warm.backend("p"), cold.backend("p")})
	poll(t, 10*time.Second, "both backends' loaded models", func() bool {
		return len(status(t, h.g, "warm").Signals.Loaded) == 1 && len(status(t, h.g, "cold").Signals.Loaded) == 1
	})
	if s := h.g.SignalStatus()["p"]; s.Err != "" || s.Source != SignalGateway || s.Fresh != 0 {
		t.Errorf("SignalStatus %+v; want the gateway's own signals and no error for Ollama", s)
	}
	if s := status(t, h.g, "warm").Signals; s.Family != "ollama" || s.Fresh || s.Error != "" {
		t.Errorf("warm's signals %+v", s)
	}
	got := map[string]int{}
	for range 100 {
		got[generateVia(t, h)]++ // model qwen2:0.5b
	}
	if got["warm"] < 95 {
		t.Errorf("qwen2:0.5b: %v; want at least 95 of 100 on the backend that has it loaded", got)
	}
	for range 10 {
		if code, be := h.post(t); code != http.StatusOK || be == "" { // model "m"
			t.Fatalf("a model neither has loaded: %d from %q", code, be)
		}
	}
}
