package metrics

import (
	"math"
	"testing"

	"github.com/prometheus/common/expfmt"
)

// FuzzParseExposition feeds arbitrary text to the parser of backends'
// /metrics answers: it must not panic, and whatever it accepts must be
// usable numbers.
func FuzzParseExposition(f *testing.F) {
	f.Add([]byte("vllm:num_requests_waiting{model_name=\"m\"} 2\n"))
	f.Add([]byte("# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{le=\"0.1\"} 1\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\nvllm:time_to_first_token_seconds_count 2\nvllm:time_to_first_token_seconds_sum 1\n"))
	f.Add([]byte("vllm:kv_cache_usage_perc 1e309\ntidegpu_sim_gpu_utilization -0\n"))
	f.Add([]byte("vllm:num_requests_running{a=\"\\\"\"} +Inf 123\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, b, err := ParseExposition(body, expfmt.NewFormat(expfmt.TypeTextPlain))
		if err != nil {
			return
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
	})
}
