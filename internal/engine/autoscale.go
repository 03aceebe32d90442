package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/autoscale"
	"github.com/tidegpu/tidegpu/internal/events"
)

// Signals reports a pool's inference signals for the autoscaler: one
// observation per metric name (qps, concurrency, queue-length, latency-pNN,
// gpu-utilization, or a PromQL metric's name), pool totals for the additive
// ones.
type Signals interface {
	Observe(pool string, now time.Time) []autoscale.Observation
}

// SignalHealth is implemented by signal sources that can say where a pool's
// balancing signals come from now (backends' metrics, or the gateway's own
// measurements after a fallback) and why.
type SignalHealth interface {
	SignalHealth(pool string) (source string, fallback bool, reason string, ok bool)
}

// ConditionBalancingSignals says whether the gateway balances the pool on
// the backends' own metrics or has fallen back to its own measurements.
const ConditionBalancingSignals = "BalancingSignals"

// noteSignals sets the BalancingSignals condition from the signal source.
func (p *Pool) noteSignals() {
	h, ok := p.deps.signals.(SignalHealth)
	if !ok {
		return
	}
	source, fallback, reason, known := h.SignalHealth(p.name)
	if !known {
		return
	}
	if fallback {
		p.setCondition(ConditionBalancingSignals, metav1.ConditionFalse, "GatewayFallback",
			"balancing on the gateway's own measurements (in-flight, latency, errors): "+reason)
		return
	}
	p.setCondition(ConditionBalancingSignals, metav1.ConditionTrue, "BackendMetrics", "balancing on backend metrics from "+source+": "+reason)
}

// AutoscaleEvery paces autoscaler evaluations (the HPA syncs every 15 s;
// panic mode wants samples every few seconds).
const AutoscaleEvery = 5 * time.Second

// autoscaleConfig fills the TidePool's watermarks into the autoscaling spec.
func autoscaleConfig(spec *tidev1.TidePoolSpec) autoscale.Config { return autoscale.ForPool(spec) }

// autoscale evaluates the pool's autoscaler when due and returns the size
// it wants (0: no autoscaling, use the spec).
func (p *Pool) autoscale(spec *tidev1.TidePoolSpec, current, ready int32, now time.Time) (int32, time.Duration) {
	if spec.Autoscaling == nil {
		p.mu.Lock()
		p.scaler, p.scalerCfg, p.status.Autoscaling = nil, "", nil
		p.mu.Unlock()
		return 0, 0
	}
	cfg := autoscaleConfig(spec)
	key, _ := json.Marshal(cfg)
	p.mu.Lock()
	if p.scaler == nil || p.scalerCfg != string(key) {
		a, err := autoscale.New(cfg, p.deps.clock)
		if err != nil {
			p.mu.Unlock()
			p.setCondition("AutoscalingActive", metav1.ConditionFalse, "InvalidConfig", "spec.autoscaling: "+err.Error())
			return 0, 0
		}
		p.scaler, p.scalerCfg, p.scaledAt = a, string(key), time.Time{}
	}
	a := p.scaler
	due := now.Sub(p.scaledAt) >= AutoscaleEvery
	desired := p.autoDesired
	p.mu.Unlock()
	if !due && desired > 0 {
		return desired, AutoscaleEvery - now.Sub(p.scaledAt)
	}
	var obs []autoscale.Observation
	if p.deps.signals != nil {
		obs = p.deps.signals.Observe(p.name, now)
	}
	if desired == 0 {
		desired = current
	}
	d := a.Recommend(autoscale.Input{CurrentReplicas: desired, ReadyReplicas: ready, Metrics: obs})
	p.mu.Lock()
	prev := p.autoDesired
	p.autoDesired = d.DesiredReplicas
	p.scaledAt = now
	st := &tidev1.AutoscalingStatus{DesiredReplicas: d.DesiredReplicas, Recommender: string(d.Source), Metric: d.Metric,
		Reason: d.Reason, Panic: d.Panic}
	if d.Metric != "" {
		st.Value = strconv.FormatFloat(d.Value, 'g', 4, 64)
	}
	if old := p.status.Autoscaling; old != nil {
		st.LastScaleTime = old.LastScaleTime
	}
	if prev != 0 && prev != d.DesiredReplicas {
		t := metav1.NewTime(now)
		st.LastScaleTime = &t
	}
	p.status.Autoscaling = st
	p.mu.Unlock()
	p.setCondition("AutoscalingActive", metav1.ConditionTrue, string(d.Source), d.Reason)
	if prev != 0 && prev != d.DesiredReplicas {
		p.deps.recorder.Eventf(events.TypeNormal, "Scaled", p.name, "", "autoscaler: %d → %d instances by %s%s: %s",
			prev, d.DesiredReplicas, d.Source, metricNote(d), d.Reason)
	}
	return d.DesiredReplicas, AutoscaleEvery
}

func metricNote(d autoscale.Decision) string {
	if d.Metric == "" {
		return ""
	}
	return fmt.Sprintf(" (%s = %.4g)", d.Metric, d.Value)
}
