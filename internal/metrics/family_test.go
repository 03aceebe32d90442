package metrics

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
)

// The expositions below are written for these tests from each server's own
// metric definitions (names, types, units and labels), not copied from a
// running server:
//
//   - vLLM: vllm-project/vllm, vllm/v1/metrics/loggers.py (V1 gauges
//     vllm:num_requests_waiting, vllm:num_requests_running,
//     vllm:kv_cache_usage_perc — a fraction, "1 means 100 percent usage" —
//     and the vllm:time_to_first_token_seconds histogram, labels model_name
//     and engine), and docs/usage/metrics.md.
//   - SGLang: sgl-project/sglang, python/sglang/srt/metrics/collector.py
//     (SchedulerMetricsCollector: gauges sglang:num_queue_reqs,
//     sglang:num_running_reqs, sglang:token_usage — the used fraction of the
//     KV pool; TokenizerMetricsCollector: histogram
//     sglang:time_to_first_token_seconds; labels model_name, engine_type and,
//     in recent versions, tp_rank/dp_rank), and
//     docs/references/production_metrics.md.
//   - TGI: huggingface/text-generation-inference,
//     docs/source/reference/metrics.md (gauges tgi_queue_size and
//     tgi_batch_current_size, unlabelled; no KV-cache gauge, no TTFT
//     histogram).
//   - llama.cpp: ggml-org/llama.cpp, tools/server/README.md, "GET /metrics"
//     (gauges llamacpp:requests_deferred, llamacpp:requests_processing and,
//     in some versions, llamacpp:kv_cache_usage_ratio, "1 means 100 percent
//     usage"; unlabelled; no TTFT histogram).

// vllmV1Exposition is a vLLM V1 server with two engine cores (data
// parallelism) of one model.
const vllmV1Exposition = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.7
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.9
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.1
`

// sglangExposition is an SGLang server with two data-parallel ranks of two
// tensor-parallel ranks each; rank 1 of each group repeats rank 0's
// scheduler state.
const sglangExposition = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="0"} 6.0
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="1"} 6.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="0"} 2.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="1"} 2.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="0"} 4.0
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="1"} 4.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="0"} 1.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="1"} 1.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="0"} 0.62
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="1"} 0.62
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="0"} 0.21
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="1"} 0.21
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{dp_rank="0",engine_type="unified",model_name="Qwen/Qwen3-8B",tp_rank="0"} 0.5
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.04",model_name="Qwen/Qwen3-8B"} 1.0
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="Qwen/Qwen3-8B"} 5.0
sglang:time_to_first_token_seconds_bucket{le="0.5",model_name="Qwen/Qwen3-8B"} 10.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="Qwen/Qwen3-8B"} 10.0
sglang:time_to_first_token_seconds_sum{model_name="Qwen/Qwen3-8B"} 1.7
sglang:time_to_first_token_seconds_count{model_name="Qwen/Qwen3-8B"} 10.0
`

// tgiExposition is a TGI router's gauges (metrics-exporter-prometheus text).
const tgiExposition = `# TYPE tgi_request_count counter
tgi_request_count 120
# TYPE tgi_queue_size gauge
tgi_queue_size 5
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 8
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 12000
# TYPE tgi_request_queue_duration histogram
tgi_request_queue_duration_bucket{le="0.005"} 100
tgi_request_queue_duration_bucket{le="+Inf"} 120
tgi_request_queue_duration_sum 3.2
tgi_request_queue_duration_count 120
`

// llamacppExposition is llama-server's /metrics (with --metrics).
const llamacppExposition = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.75
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 3
`

func TestParseFamilies(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		family  string // asked for; "" detects
		want    BackendMetrics
		p50     time.Duration // of the buckets returned; 0: none wanted
		wantErr string        // substring of the error; "" for none
	}{
		{name: "vLLM V1, two engines", text: vllmV1Exposition,
			want: BackendMetrics{Family: "vllm", QueueDepth: 3, Running: 7, KVCacheUsage: 0.7,
				Has: FieldQueueDepth | FieldRunning | FieldKVCacheUsage},
			// 10 of 20 at most 0.1s: the median is the bound.
			p50: 100 * time.Millisecond},
		{name: "SGLang, two DP ranks of two TP ranks", text: sglangExposition,
			want: BackendMetrics{Family: "sglang", QueueDepth: 5, Running: 8, KVCacheUsage: 0.62,
				Has: FieldQueueDepth | FieldRunning | FieldKVCacheUsage},
			p50: 100 * time.Millisecond},
		{name: "TGI", text: tgiExposition,
			want: BackendMetrics{Family: "tgi", QueueDepth: 5, Running: 8, Has: FieldQueueDepth | FieldRunning}},
		{name: "llama.cpp", text: llamacppExposition,
			want: BackendMetrics{Family: "llamacpp", QueueDepth: 3, Running: 4, KVCacheUsage: 0.75,
				Has: FieldQueueDepth | FieldRunning | FieldKVCacheUsage}},
		{name: "llama.cpp without the KV-cache gauge", text: "llamacpp:requests_processing 1\nllamacpp:requests_deferred 0\n",
			want: BackendMetrics{Family: "llamacpp", Running: 1, Has: FieldQueueDepth | FieldRunning}},
		{name: "family given", text: tgiExposition, family: "tgi",
			want: BackendMetrics{Family: "tgi", QueueDepth: 5, Running: 8, Has: FieldQueueDepth | FieldRunning}},
		{name: "family given, another's exposition", text: llamacppExposition, family: "sglang",
			wantErr: "want sglang:num_queue_reqs (SGLang)"},
		{name: "no family's queue", text: "sglang:token_usage 0.3\ntgi_batch_current_size 2\n",
			wantErr: "want one of vllm:num_requests_waiting (vLLM), sglang:num_queue_reqs (SGLang), tgi_queue_size (TGI), llamacpp:requests_deferred (llama.cpp)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := LookupFamily(tt.family)
			if err != nil {
				t.Fatal(err)
			}
			m, b, err := ParseFamily([]byte(tt.text), expfmt.NewFormat(expfmt.TypeTextPlain), f)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrNoMetrics) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v; want ErrNoMetrics saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, tt.want) {
				t.Errorf("got %+v\nwant %+v", m, tt.want)
			}
			if tt.p50 == 0 {
				if b != nil {
					t.Errorf("buckets %v; want none", b)
				}
				return
			}
			if got, _ := seconds(HistogramQuantile(0.5, b)); got != tt.p50 {
				t.Errorf("TTFT p50 %v from %v; want %v", got, b, tt.p50)
			}
		})
	}
}

func TestFamilyUnits(t *testing.T) {
	// A server publishing KV usage as a percentage and TTFT in
	// milliseconds: the scales bring them to a fraction and seconds.
	f := Family{Name: "x", Server: "X", Queue: "x_queue", KVCache: []string{"x_kv_percent"}, KVCacheScale: 0.01,
		TTFT: "x_ttft_ms", TTFTScale: 0.001}
	text := `x_queue 1
x_kv_percent 40
# TYPE x_ttft_ms histogram
x_ttft_ms_bucket{le="100"} 3
x_ttft_ms_bucket{le="1000"} 4
x_ttft_ms_bucket{le="+Inf"} 4
x_ttft_ms_sum 500
x_ttft_ms_count 4
`
	m, b, err := ParseFamily([]byte(text), expfmt.NewFormat(expfmt.TypeTextPlain), f)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(m.KVCacheUsage-0.4) > 1e-12 {
		t.Errorf("KV %v; want 0.4", m.KVCacheUsage)
	}
	if len(b) != 3 || b[0].UpperBound != 0.1 || b[1].UpperBound != 1 || !math.IsInf(b[2].UpperBound, 1) {
		t.Errorf("buckets %v; want bounds 0.1s, 1s, +Inf", b)
	}
}

func TestLookupFamily(t *testing.T) {
	for _, name := range []string{"", "auto", "AUTO"} {
		if f, err := LookupFamily(name); err != nil || f.Queue != "" {
			t.Errorf("LookupFamily(%q) = %+v, %v; want detection", name, f, err)
		}
	}
	for _, f := range Families {
		if g, err := LookupFamily(f.Name); err != nil || g.Name != f.Name {
			t.Errorf("LookupFamily(%q) = %+v, %v", f.Name, g, err)
		}
	}
	if _, err := LookupFamily("ollama"); err == nil || !strings.Contains(err.Error(), "auto, vllm, sglang, tgi, llamacpp") {
		t.Errorf("LookupFamily(ollama) err %v; want the names", err)
	}
}

func TestTargetErrorIsStable(t *testing.T) {
	e := &TargetError{Source: "scrape", Total: 3, Failed: map[string]error{
		"c": errors.New("scraping c"), "a": errors.New("scraping a"), "b": errors.New("scraping b")}}
	for range 20 { // map order varies; the text must not
		if got, want := e.Error(), "scrape: 3 of 3 targets failed, e.g.: scraping a"; got != want {
			t.Fatalf("%q; want %q", got, want)
		}
	}
}
