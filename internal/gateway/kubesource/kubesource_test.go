package kubesource

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
)

func TestBackendsCarryThePoolsMetrics(t *testing.T) {
	tp := &tidev1.TidePool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	tp.Status.Instances = []tidev1.InstanceStatus{
		{ID: "a", Phase: tidev1.PhaseReady, Address: "10.0.0.1:8000", Weight: 50},
		{ID: "b", Phase: tidev1.PhaseStarting, Address: "10.0.0.2:8000"},
	}
	for _, tc := range []struct {
		name  string
		spec  *tidev1.ServingMetrics
		queue string
		off   bool
	}{
		{"detected", nil, "", false},
		{"a family", &tidev1.ServingMetrics{Family: "tgi"}, "tgi_queue_size", false},
		{"none", &tidev1.ServingMetrics{Family: tidev1.MetricsFamilyNone}, "", true},
		{"names", &tidev1.ServingMetrics{Names: &tidev1.MetricNames{Queue: "q"}}, "q", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp.Spec.Serving.Metrics = tc.spec
			bs := Backends(tp)
			if len(bs) != 1 || bs[0].ID != "a" || bs[0].Pool != "ns/p" || bs[0].Weight != 50 {
				t.Fatalf("backends %+v; want only the Ready a", bs)
			}
			if bs[0].MetricsFamily.Queue != tc.queue || bs[0].NoMetrics != tc.off {
				t.Errorf("family queue %q, off %v; want %q, %v", bs[0].MetricsFamily.Queue, bs[0].NoMetrics, tc.queue, tc.off)
			}
		})
	}
}
