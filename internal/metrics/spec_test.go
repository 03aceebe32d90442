package metrics

import (
	"strings"
	"testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
)

func TestSpecFamily(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    *tidev1.ServingMetrics
		queue   string
		kv      string
		kvScale float64
		off     bool
		wantErr string
	}{
		{"unset: detect", nil, "", "", 0, false, ""},
		{"auto: detect", &tidev1.ServingMetrics{Family: "auto"}, "", "", 0, false, ""},
		{"a family", &tidev1.ServingMetrics{Family: "sglang"}, "sglang:num_queue_reqs", "sglang:token_usage", 1, false, ""},
		{"none", &tidev1.ServingMetrics{Family: "none"}, "", "", 0, true, ""},
		{"a family, one name renamed", &tidev1.ServingMetrics{Family: "vllm", Names: &tidev1.MetricNames{KVCache: "vllm:gpu_cache_usage_perc"}},
			MetricQueueDepth, "vllm:gpu_cache_usage_perc", 1, false, ""},
		{"names of its own, percent", &tidev1.ServingMetrics{Names: &tidev1.MetricNames{Queue: "q", KVCache: "kv", KVCacheUnit: "Percent"}},
			"q", "kv", 0.01, false, ""},
		{"names without queue under auto", &tidev1.ServingMetrics{Names: &tidev1.MetricNames{Running: "r"}}, "", "", 0, false, "names.queue"},
		{"names with none", &tidev1.ServingMetrics{Family: "none", Names: &tidev1.MetricNames{Queue: "q"}}, "", "", 0, true, "names"},
		{"an unknown family", &tidev1.ServingMetrics{Family: "triton"}, "", "", 0, false, "spec.serving.metrics.family"},
		{"an unknown unit", &tidev1.ServingMetrics{Family: "tgi", Names: &tidev1.MetricNames{KVCacheUnit: "Ratio"}}, "", "", 0, false, "kvCacheUnit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, off, err := SpecFamily(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || off != tc.off || f.Queue != tc.queue {
				t.Fatalf("(%+v, %v, %v); want queue %q, off %v", f, off, err, tc.queue, tc.off)
			}
			if tc.kv != "" && (len(f.KVCache) != 1 || f.KVCache[0] != tc.kv || f.KVCacheScale != tc.kvScale) {
				t.Errorf("KV cache %v × %v; want %s × %v", f.KVCache, f.KVCacheScale, tc.kv, tc.kvScale)
			}
		})
	}
}

func TestSpecQueries(t *testing.T) {
	if q := SpecQueries(nil); q != (Queries{}) {
		t.Errorf("nil: %+v", q)
	}
	if q := SpecQueries(&tidev1.ServingMetrics{Family: "vllm"}); q != (Queries{}) {
		t.Errorf("no promql: %+v", q)
	}
	q := SpecQueries(&tidev1.ServingMetrics{PromQL: &tidev1.PromQLQueries{Queue: "a", Running: "b", KVCache: "c", TTFTP50: "d", TTFTP99: "e", GPUUtil: "f"}})
	if q != (Queries{QueueDepth: "a", Running: "b", KVCacheUsage: "c", TTFTP50: "d", TTFTP99: "e", GPUUtil: "f"}) {
		t.Errorf("promql: %+v", q)
	}
}
