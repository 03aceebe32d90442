package metrics

import (
	"math"
	"testing"

	"github.com/prometheus/common/expfmt"
)

// FuzzParseExposition feeds arbitrary text to the parser of backends'
// /metrics answers, detecting the family or with one given (fam picks it:
// 0 detects, 1.. are Families): it must not panic, whatever it accepts must
// be usable numbers with a queue depth, and the family it names must be the
// one asked for.
func FuzzParseExposition(f *testing.F) {
	f.Add([]byte("vllm:num_requests_waiting{model_name=\"m\"} 2\n"))
	f.Add([]byte("# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{le=\"0.1\"} 1\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\nvllm:time_to_first_token_seconds_count 2\nvllm:time_to_first_token_seconds_sum 1\n"))
	f.Add([]byte("vllm:kv_cache_usage_perc 1e309\ntidegpu_sim_gpu_utilization -0\n"))
	f.Add([]byte("vllm:num_requests_running{a=\"\\\"\"} +Inf 123\n"))
	for _, text := range []string{vllmV1Exposition, sglangExposition, tgiExposition, llamacppExposition} {
		f.Add([]byte(text))
	}
	f.Add([]byte("sglang:num_queue_reqs{tp_rank=\"1\"} 3\nsglang:num_queue_reqs{tp_rank=\"0\"} NaN\n"))
	f.Add([]byte("# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 1e308\nllamacpp:requests_deferred 1e308\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		for i := 0; i <= len(Families); i++ {
			fuzzOneFamily(t, body, i)
		}
	})
}

// fuzzOneFamily parses body detecting the family (fam 0) or as
// Families[fam-1], and checks what it accepts.
func fuzzOneFamily(t *testing.T, body []byte, fam int) {
	var want Family
	if fam > 0 {
		want = Families[fam-1]
	}
	m, b, err := ParseFamily(body, expfmt.NewFormat(expfmt.TypeTextPlain), want)
	if err != nil {
		return
	}
	if m.Has&FieldQueueDepth == 0 || m.Family == "" || (want.Name != "" && m.Family != want.Name) {
		t.Fatalf("accepted without a queue or with family %q (asked %q): %+v", m.Family, want.Name, m)
	}
	for _, v := range []float64{m.QueueDepth, m.Running, m.KVCacheUsage, m.GPUUtil} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Fatalf("unusable value in %+v", m)
		}
	}
	if m.KVCacheUsage > 1 || m.GPUUtil > 1 {
		t.Fatalf("fraction above 1 in %+v", m)
	}
	for i := 1; i < len(b); i++ {
		if !(b[i-1].UpperBound < b[i].UpperBound) {
			t.Fatalf("buckets not strictly sorted: %v", b)
		}
	}
	q := HistogramQuantile(0.99, b)
	if len(b) > 0 && !math.IsNaN(q) && q < 0 && !math.IsInf(b[0].UpperBound, -1) && b[0].UpperBound >= 0 {
		t.Fatalf("negative quantile %v from %v", q, b)
	}
}
