// Package aibalancer is the AIBalancer controller (seed 002, without its
// weak points): it finds the model's backends (a TidePool's Ready instances
// or pods selected by labels), reads their inference signals from a
// metrics source, computes weights with the strategy (internal/balancer),
// writes them to status and applies them: to the pool's gateways through
// the pool engine (the built-in gateway and Kong target weights). It looks
// again every couple of seconds, not on a 30 s timer, and only writes
// status when the weights change.
package aibalancer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	tidev1alpha1 "github.com/tidegpu/tidegpu/api/v1alpha1"
	"github.com/tidegpu/tidegpu/internal/balancer"
	"github.com/tidegpu/tidegpu/internal/metrics"
)

// Conditions of an AIBalancer.
const (
	ConditionMetricsAvailable = "MetricsAvailable"
	ConditionWeightsApplied   = "WeightsApplied"
)

// Interval is how often weights are recomputed from fresh signals.
const Interval = 2 * time.Second

// WeightSink applies a pool's weights (the TidePool engines).
type WeightSink interface {
	SetWeights(pool string, w map[string]int32) error
}

// +kubebuilder:rbac:groups=tidegpu.eja.dev,resources=aibalancers,verbs=get;list;watch
// +kubebuilder:rbac:groups=tidegpu.eja.dev,resources=aibalancers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconciler reconciles AIBalancers.
type Reconciler struct {
	Client  client.Client
	Metrics metrics.Source
	Weights WeightSink
	// Registry receives the controller's metrics (optional).
	Registry prometheus.Registerer
	// Events records scaling decisions (optional).
	Events events.EventRecorder

	weightGauge *prometheus.GaugeVec
	scalers     scalers
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.weightGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tidegpu_aibalancer_weight",
		Help: "Weight an AIBalancer gives a backend."}, []string{"balancer", "backend"})
	if r.Registry != nil {
		if err := r.Registry.Register(r.weightGauge); err != nil {
			return err
		}
	}
	return ctrl.NewControllerManagedBy(mgr).For(&tidev1alpha1.AIBalancer{}).Named("aibalancer").Complete(r)
}

// Reconcile recomputes and applies the weights of one AIBalancer.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ab tidev1alpha1.AIBalancer
	if err := r.Client.Get(ctx, req.NamespacedName, &ab); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base := ab.DeepCopy()
	now := time.Now()
	backends, pool, err := r.backends(ctx, &ab)
	if err != nil {
		setCondition(&ab, ConditionWeightsApplied, metav1.ConditionFalse, "BackendsUnknown", err.Error())
		return r.finish(ctx, base, &ab, Interval*5)
	}
	targets := make([]metrics.Target, 0, len(backends))
	for _, b := range backends {
		targets = append(targets, metrics.Target{ID: b.id, Address: b.address})
	}
	var snap map[string]metrics.BackendMetrics
	var metricsErr error
	if r.Metrics != nil && len(targets) > 0 {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		snap, metricsErr = r.Metrics.Snapshot(sctx, targets)
		cancel()
	}
	bs := make([]balancer.Backend, 0, len(backends))
	for _, b := range backends {
		bs = append(bs, toBalancer(b, snap[b.id]))
	}
	weights, fresh, err := balancer.Compute(specFor(&ab), bs, now)
	if err != nil {
		setCondition(&ab, ConditionWeightsApplied, metav1.ConditionFalse, "InvalidStrategy", err.Error())
		return r.finish(ctx, base, &ab, 0)
	}
	switch {
	case metricsErr != nil && fresh == 0:
		setCondition(&ab, ConditionMetricsAvailable, metav1.ConditionFalse, "SourceFailing",
			fmt.Sprintf("%s: %v: weights are neutral until signals return", r.sourceName(), metricsErr))
	case fresh < len(backends) && ab.Spec.Strategy.Type != tidev1alpha1.StrategyModelBased:
		msg := fmt.Sprintf("%d of %d backends have fresh signals from %s; the others get the neutral weight", fresh, len(backends), r.sourceName())
		if ids := unread(backends, snap); len(ids) > 0 {
			msg += "; no signals read for " + strings.Join(ids, ", ")
		}
		if metricsErr != nil {
			msg += ": " + metricsErr.Error()
		}
		setCondition(&ab, ConditionMetricsAvailable, metav1.ConditionFalse, "PartiallyStale", msg)
	default:
		setCondition(&ab, ConditionMetricsAvailable, metav1.ConditionTrue, "Fresh",
			fmt.Sprintf("%d backends, signals from %s", len(backends), r.sourceName()))
	}
	current := make([]tidev1alpha1.BackendWeight, 0, len(weights))
	byID := map[string]int32{}
	for _, w := range weights {
		current = append(current, tidev1alpha1.BackendWeight{PodName: w.ID, Weight: w.Weight})
		byID[w.ID] = w.Weight
		if r.weightGauge != nil {
			r.weightGauge.WithLabelValues(req.Namespace+"/"+req.Name, w.ID).Set(float64(w.Weight))
		}
	}
	if pool != "" && r.Weights != nil {
		if err := r.Weights.SetWeights(pool, byID); err != nil {
			setCondition(&ab, ConditionWeightsApplied, metav1.ConditionFalse, "PoolNotRunning", err.Error())
		} else {
			setCondition(&ab, ConditionWeightsApplied, metav1.ConditionTrue, "Applied",
				fmt.Sprintf("weights applied to pool %s's gateways", pool))
		}
	} else {
		setCondition(&ab, ConditionWeightsApplied, metav1.ConditionTrue, "Published",
			"weights published in status (pods: a gateway reads them from there)")
	}
	r.scale(ctx, &ab, snap, len(backends), now)
	ab.Status.CurrentReplicas = int32(len(backends))
	if !equality.Semantic.DeepEqual(ab.Status.CurrentWeights, current) {
		ab.Status.CurrentWeights = current
		t := metav1.NewTime(now)
		ab.Status.LastUpdated = &t
	}
	ab.Status.ObservedGeneration = ab.Generation
	return r.finish(ctx, base, &ab, Interval)
}

func (r *Reconciler) sourceName() string {
	if r.Metrics == nil {
		return "no metrics source"
	}
	return r.Metrics.Name()
}

func (r *Reconciler) finish(ctx context.Context, base, ab *tidev1alpha1.AIBalancer, after time.Duration) (ctrl.Result, error) {
	if !equality.Semantic.DeepEqual(base.Status, ab.Status) {
		if err := r.Client.Status().Patch(ctx, ab, client.MergeFrom(base)); err != nil && !apierrors.IsNotFound(err) {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: time.Second}, nil
			}
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

type backend struct {
	id, address, version string
}

// backends lists the balanced backends: a TidePool's Ready instances, or
// Running and Ready pods matching the selector.
func (r *Reconciler) backends(ctx context.Context, ab *tidev1alpha1.AIBalancer) ([]backend, string, error) {
	version := ab.Spec.Model.Version
	if ref := ab.Spec.PoolRef; ref != nil {
		var tp tidev1.TidePool
		nn := types.NamespacedName{Namespace: ab.Namespace, Name: ref.Name}
		if err := r.Client.Get(ctx, nn, &tp); err != nil {
			return nil, "", fmt.Errorf("spec.poolRef: TidePool %s: %w", nn, err)
		}
		var out []backend
		for _, in := range tp.Status.Instances {
			if in.Phase == tidev1.PhaseReady && in.Address != "" {
				out = append(out, backend{id: in.ID, address: in.Address, version: version})
			}
		}
		return out, nn.Namespace + "/" + nn.Name, nil
	}
	if ab.Spec.Selector == nil {
		return nil, "", errors.New("spec.selector or spec.poolRef is required")
	}
	sel, err := metav1.LabelSelectorAsSelector(ab.Spec.Selector)
	if err != nil {
		return nil, "", fmt.Errorf("spec.selector: %w", err)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ab.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, "", err
	}
	port := int32(8080)
	if ab.Spec.Service != nil && ab.Spec.Service.Port > 0 {
		port = ab.Spec.Service.Port
	}
	var out []backend
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !podReady(&p) || !p.DeletionTimestamp.IsZero() {
			continue
		}
		v := version
		if lv, ok := p.Labels["version"]; ok {
			v = lv
		}
		out = append(out, backend{id: p.Name, address: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))), version: v})
	}
	return out, "", nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// unread returns, sorted, the IDs of the backends the snapshot has no
// metrics of. Pure.
func unread(backends []backend, snap map[string]metrics.BackendMetrics) []string {
	var ids []string
	for _, b := range backends {
		if _, ok := snap[b.id]; !ok {
			ids = append(ids, b.id)
		}
	}
	slices.Sort(ids)
	return ids
}

func toBalancer(b backend, m metrics.BackendMetrics) balancer.Backend {
	out := balancer.Backend{ID: b.id, Version: b.version, At: m.ObservedAt}
	val := func(f metrics.Field, v float64) *float64 {
		if m.Has&f == 0 {
			return nil
		}
		return &v
	}
	out.GPUUtil = val(metrics.FieldGPUUtil, m.GPUUtil)
	out.Queue = val(metrics.FieldQueueDepth, m.QueueDepth)
	out.InFlight = val(metrics.FieldRunning, m.Running)
	if m.Has&metrics.FieldTTFT != 0 {
		ms := float64(m.TTFTP99) / float64(time.Millisecond)
		out.LatencyMs = &ms
	} else if m.Has&metrics.FieldLatency != 0 {
		ms := float64(m.Latency) / float64(time.Millisecond)
		out.LatencyMs = &ms
	}
	return out
}

func specFor(ab *tidev1alpha1.AIBalancer) balancer.Spec {
	s := ab.Spec.Strategy
	spec := balancer.Spec{Strategy: s.Type, Target: float64(s.Target), MinWeight: s.MinWeight}
	if len(s.Versions) > 0 {
		spec.Versions = map[string]int32{}
		for _, v := range s.Versions {
			spec.Versions[v.Version] = v.Weight
		}
	}
	return spec
}

func setCondition(ab *tidev1alpha1.AIBalancer, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&ab.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
		Message: msg, ObservedGeneration: ab.Generation, LastTransitionTime: metav1.Now()})
}
