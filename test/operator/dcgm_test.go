package operator_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	tidev1alpha1 "github.com/tidegpu/tidegpu/api/v1alpha1"
)

// TestDCGMDrivesAutoscalingAndResourceBasedWeights: with --dcgm-url, GPU
// utilisation from NVIDIA dcgm-exporter reaches a pool's autoscaler
// (GPUUtilization) and an AIBalancer's ResourceBased weights. The GPUs
// cannot run here, so the exporter is a test server speaking its
// documented exposition (DCGM_FI_DEV_GPU_UTIL, a percent gauge per GPU
// with gpu, UUID, device, modelName and Hostname labels, from
// NVIDIA/dcgm-exporter etc/default-counters.csv and its docs at
// docs.nvidia.com/datacenter/cloud-native/gpu-telemetry): one node-level
// exporter for every instance, its series matched by Hostname (an
// instance's ID), two GPUs each. The pool's first instance runs hot (90 %),
// any other cool (10 %).
func TestDCGMDrivesAutoscalingAndResourceBasedWeights(t *testing.T) {
	ns := namespace(t)
	nn := types.NamespacedName{Namespace: ns, Name: "gpu"}
	var hotID atomic.Pointer[string]
	hotID.Store(new(string))
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tp, ok := getPool(t, nn)
		if !ok {
			return
		}
		var b strings.Builder
		b.WriteString("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
		hot := *hotID.Load()
		for i, id := range readyIDs(tp) {
			util := 10
			if id == hot || (hot == "" && i == 0) {
				util = 90
			}
			for gpu := range 2 {
				fmt.Fprintf(&b, "DCGM_FI_DEV_GPU_UTIL{gpu=\"%d\",UUID=\"GPU-%s-%d\",device=\"nvidia%d\",modelName=\"NVIDIA L4\",Hostname=%q,DCGM_FI_DRIVER_VERSION=\"550.54.15\"} %d\n",
					gpu, id, gpu, gpu, id, util)
			}
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(b.String()))
	}))
	defer exporter.Close()
	startProc(t, "operator", "--kubeconfig", kubeconfig, "--state-dir", t.TempDir(),
		"--metrics-bind-address", "0", "--health-probe-bind-address", freeAddr(t), "--admin-addr", "0", "--log-level", "info",
		"--dcgm-url", exporter.URL+"/metrics")

	tp := localPool(ns, "gpu", 1)
	tp.Spec.Maximum = 2
	tp.Spec.Autoscaling = &tidev1.AutoscalingSpec{
		Metrics: []tidev1.MetricSpec{{Type: tidev1.MetricGPUUtilization, Target: resource.MustParse("50")}},
	}
	createPool(t, tp)
	eventually(t, 30*time.Second, "1 Ready instance", func() bool {
		p, ok := getPool(t, nn)
		if ok && len(readyIDs(p)) == 1 {
			id := readyIDs(p)[0]
			hotID.Store(&id)
			return true
		}
		return false
	})
	// 1 instance at 90 % over a target of 50 % wants 2.
	up := eventually(t, 60*time.Second, "2 Ready instances from GPU utilisation", func() bool {
		p, ok := getPool(t, nn)
		return ok && len(readyIDs(p)) == 2
	})
	p, _ := getPool(t, nn)
	if a := p.Status.Autoscaling; a == nil || a.DesiredReplicas != 2 || a.Metric != "gpu-utilization" {
		t.Errorf("status.autoscaling %+v; want desired 2 from gpu-utilization", a)
	}
	t.Logf("1 → 2 Ready %s after apply on GPU utilisation 90 %%; status.autoscaling %+v", up, p.Status.Autoscaling)

	ab := &tidev1alpha1.AIBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gpu-balancer"},
		Spec: tidev1alpha1.AIBalancerSpec{
			Model:    tidev1alpha1.ModelSpec{Name: "qwen2:0.5b", Version: "v1"},
			Strategy: tidev1alpha1.StrategySpec{Type: tidev1alpha1.StrategyResourceBased, Target: 70, MinWeight: 10},
			PoolRef:  &tidev1alpha1.PoolReference{Name: "gpu"},
		}}
	if err := k8s.Create(context.Background(), ab); err != nil {
		t.Fatal(err)
	}
	abn := types.NamespacedName{Namespace: ns, Name: "gpu-balancer"}
	var weights map[string]int32
	eventually(t, 30*time.Second, "ResourceBased weights for 2 backends from fresh signals", func() bool {
		if err := k8s.Get(context.Background(), abn, ab); err != nil {
			return false
		}
		c := meta.FindStatusCondition(ab.Status.Conditions, "MetricsAvailable")
		weights = map[string]int32{}
		for _, w := range ab.Status.CurrentWeights {
			weights[w.PodName] = w.Weight
		}
		return len(weights) == 2 && c != nil && c.Status == metav1.ConditionTrue
	})
	hot := *hotID.Load()
	var cool string
	for id := range weights {
		if id != hot {
			cool = id
		}
	}
	if !slices.Contains(readyIDs(p), cool) || weights[hot] >= weights[cool] {
		t.Errorf("weights %v; want the hot %s (90 %%) below the cool %s (10 %%)", weights, hot, cool)
	}
	t.Logf("ResourceBased weights %v (hot %s)", weights, hot)
}
