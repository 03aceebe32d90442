package aibalancer

import (
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/metrics"
)

func TestObservations(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	snap := map[string]metrics.BackendMetrics{
		"a": {Running: 3, QueueDepth: 2, GPUUtil: 0.5, TTFTP99: 120 * time.Millisecond,
			Has: metrics.FieldRunning | metrics.FieldQueueDepth | metrics.FieldGPUUtil | metrics.FieldTTFT, ObservedAt: now},
		"b":     {Running: 1, GPUUtil: 0.9, Has: metrics.FieldRunning | metrics.FieldGPUUtil, ObservedAt: now.Add(-time.Second)},
		"stale": {Running: 50, QueueDepth: 50, Has: metrics.FieldRunning | metrics.FieldQueueDepth, ObservedAt: now.Add(-time.Hour)},
	}
	got := map[string]float64{}
	for _, o := range Observations(snap, now, 30*time.Second) {
		got[o.Metric] = o.Value
	}
	want := map[string]float64{"concurrency": 6, "queue-length": 2, "latency-p99": 120, "gpu-utilization": 70}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if obs := Observations(map[string]metrics.BackendMetrics{"stale": snap["stale"]}, now, 30*time.Second); obs != nil {
		t.Errorf("only stale metrics gave observations %v; want none (the autoscaler then holds)", obs)
	}
}

func TestUnread(t *testing.T) {
	bs := []backend{{id: "c"}, {id: "a"}, {id: "b"}}
	got := unread(bs, map[string]metrics.BackendMetrics{"b": {}})
	if strings.Join(got, ",") != "a,c" {
		t.Errorf("unread %v; want a, c", got)
	}
	if got := unread(bs, map[string]metrics.BackendMetrics{"a": {}, "b": {}, "c": {}}); len(got) != 0 {
		t.Errorf("unread %v; want none", got)
	}
}
