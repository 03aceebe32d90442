package aibalancer

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	tidev1alpha1 "github.com/tidegpu/tidegpu/api/v1alpha1"
	"github.com/tidegpu/tidegpu/internal/autoscale"
	"github.com/tidegpu/tidegpu/internal/metrics"
)

// ConditionScalingActive says whether the autoscaler drives the target.
const ConditionScalingActive = "ScalingActive"

// +kubebuilder:rbac:groups=apps,resources=deployments/scale;statefulsets/scale,verbs=get;update

// scalers keeps one autoscaler per AIBalancer (its history and
// stabilisation windows), rebuilt when the spec changes.
type scalers struct {
	mu sync.Mutex
	m  map[string]scalerEntry
}

type scalerEntry struct {
	cfg string
	a   *autoscale.Autoscaler
}

func (s *scalers) get(key string, cfg autoscale.Config) (*autoscale.Autoscaler, error) {
	b, _ := json.Marshal(cfg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]scalerEntry{}
	}
	if e, ok := s.m[key]; ok && e.cfg == string(b) {
		return e.a, nil
	}
	a, err := autoscale.New(cfg, clock.RealClock{})
	if err != nil {
		return nil, err
	}
	s.m[key] = scalerEntry{cfg: string(b), a: a}
	return a, nil
}

// Observations turns the backends' metrics into autoscaler observations:
// pool totals of concurrency (running + queued) and queue length, the mean
// GPU utilisation (percent) and the worst TTFT p99 (ms), from fresh metrics
// only. Pure.
func Observations(snap map[string]metrics.BackendMetrics, now time.Time, maxAge time.Duration) []autoscale.Observation {
	var conc, queue, gpu, ttft float64
	var nGPU, n int
	for _, m := range snap {
		if !m.Fresh(now, maxAge) {
			continue
		}
		n++
		if m.Has&metrics.FieldRunning != 0 {
			conc += m.Running
		}
		if m.Has&metrics.FieldQueueDepth != 0 {
			conc += m.QueueDepth
			queue += m.QueueDepth
		}
		if m.Has&metrics.FieldGPUUtil != 0 {
			gpu += m.GPUUtil * 100
			nGPU++
		}
		if m.Has&metrics.FieldTTFT != 0 {
			if ms := float64(m.TTFTP99) / float64(time.Millisecond); ms > ttft {
				ttft = ms
			}
		}
	}
	if n == 0 {
		return nil
	}
	obs := []autoscale.Observation{
		{Metric: "concurrency", Value: conc, At: now},
		{Metric: "queue-length", Value: queue, At: now},
		{Metric: "latency-p99", Value: ttft, At: now},
	}
	if nGPU > 0 {
		obs = append(obs, autoscale.Observation{Metric: "gpu-utilization", Value: gpu / float64(nGPU), At: now})
	}
	return obs
}

// scale runs the AIBalancer's autoscaler and writes the scale target's
// replicas through its scale subresource.
func (r *Reconciler) scale(ctx context.Context, ab *tidev1alpha1.AIBalancer, snap map[string]metrics.BackendMetrics, ready int, now time.Time) {
	ref := ab.Spec.ScaleTargetRef
	if ab.Spec.Autoscaling == nil || ref == nil {
		ab.Status.Autoscaling = nil
		return
	}
	cfg := *ab.Spec.Autoscaling.DeepCopy()
	if sc := ab.Spec.Scale; sc != nil {
		if cfg.MinReplicas == 0 {
			cfg.MinReplicas = sc.MinReplicas
		}
		if cfg.MaxReplicas == 0 {
			cfg.MaxReplicas = sc.MaxReplicas
		}
	}
	a, err := r.scalers.get(ab.Namespace+"/"+ab.Name, cfg)
	if err != nil {
		setCondition(ab, ConditionScalingActive, metav1.ConditionFalse, "InvalidConfig", "spec.autoscaling: "+err.Error())
		return
	}
	var target client.Object
	switch ref.Kind {
	case "StatefulSet":
		target = &appsv1.StatefulSet{}
	default:
		target = &appsv1.Deployment{}
	}
	target.SetNamespace(ab.Namespace)
	target.SetName(ref.Name)
	sc := &autoscalingv1.Scale{}
	if err := r.Client.SubResource("scale").Get(ctx, target, sc); err != nil {
		setCondition(ab, ConditionScalingActive, metav1.ConditionFalse, "TargetUnavailable",
			fmt.Sprintf("spec.scaleTargetRef %s/%s: %v", ref.Kind, ref.Name, err))
		return
	}
	d := a.Recommend(autoscale.Input{CurrentReplicas: sc.Spec.Replicas, ReadyReplicas: int32(ready),
		Metrics: Observations(snap, now, 30*time.Second)})
	st := &tidev1.AutoscalingStatus{DesiredReplicas: d.DesiredReplicas, Recommender: string(d.Source), Metric: d.Metric,
		Reason: d.Reason, Panic: d.Panic}
	if d.Metric != "" {
		st.Value = strconv.FormatFloat(d.Value, 'g', 4, 64)
	}
	if old := ab.Status.Autoscaling; old != nil {
		st.LastScaleTime = old.LastScaleTime
	}
	if d.DesiredReplicas != sc.Spec.Replicas {
		from := sc.Spec.Replicas
		sc.Spec.Replicas = d.DesiredReplicas
		if err := r.Client.SubResource("scale").Update(ctx, target, client.WithSubResourceBody(sc)); err != nil {
			setCondition(ab, ConditionScalingActive, metav1.ConditionFalse, "ScaleFailed", err.Error())
			return
		}
		t := metav1.NewTime(now)
		st.LastScaleTime = &t
		if r.Events != nil {
			r.Events.Eventf(ab, nil, "Normal", "Scaled", "Scale", "%s/%s: %d → %d replicas by %s: %s", ref.Kind, ref.Name,
				from, d.DesiredReplicas, d.Source, d.Reason)
		}
	}
	ab.Status.Autoscaling = st
	setCondition(ab, ConditionScalingActive, metav1.ConditionTrue, string(d.Source), d.Reason)
}
