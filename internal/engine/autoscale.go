package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/autoscale"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/placement"
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

// SignalGaps is implemented by signal sources that can name the backends
// of a pool whose own metrics cannot be read now (balanced on the
// gateway's own measurements while the others are not).
type SignalGaps interface {
	SignalGaps(pool string) []string
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
	if g, ok := p.deps.signals.(SignalGaps); ok {
		if gaps := g.SignalGaps(p.name); len(gaps) > 0 {
			p.setCondition(ConditionBalancingSignals, metav1.ConditionFalse, "MissingBackendMetrics",
				"no fresh metrics for "+strings.Join(gaps, ", ")+" (balanced on the gateway's own measurements); the others from "+source+": "+reason)
			return
		}
	}
	p.setCondition(ConditionBalancingSignals, metav1.ConditionTrue, "BackendMetrics", "balancing on backend metrics from "+source+": "+reason)
}

// AutoscaleEvery paces autoscaler evaluations (the HPA syncs every 15 s;
// panic mode wants samples every few seconds).
const AutoscaleEvery = 5 * time.Second

// autoscaleConfig fills the TidePool's watermarks into the autoscaling spec.
func autoscaleConfig(spec *tidev1.TidePoolSpec) autoscale.Config { return autoscale.ForPool(spec) }

// autoscale evaluates the pool's autoscaler when due and returns the size
// it wants (ok false: no autoscaling, use the spec) and when to evaluate
// again.
func (p *Pool) autoscale(spec *tidev1.TidePoolSpec, current, ready int32, now time.Time) (int32, bool, time.Duration) {
	a, ok := p.scalerFor(spec)
	if !ok {
		return 0, false, 0
	}
	p.mu.Lock()
	due := p.woken || now.Sub(p.scaledAt) >= AutoscaleEvery
	desired, known, woken := p.autoDesired, p.autoKnown, p.woken
	p.woken = false
	mem := p.capMem
	p.mu.Unlock()
	if !due && known {
		return desired, true, AutoscaleEvery - now.Sub(p.scaledAt)
	}
	var obs []autoscale.Observation
	if p.deps.signals != nil {
		obs = p.deps.signals.Observe(p.name, now)
	}
	if !known {
		desired = current
	}
	var view placement.Memory
	if mem != nil {
		view = mem
	}
	d := a.Recommend(autoscale.Input{CurrentReplicas: desired, ReadyReplicas: ready, Metrics: obs,
		ColdStart: timingOf(spec, view).ColdStart, Woken: woken})
	p.noteScale(d, now)
	return d.DesiredReplicas, true, AutoscaleEvery
}

// Wake asks the pool's autoscaler to look at its signals now rather than
// at its next evaluation: a gateway holds a request for the pool and no
// instance is ready (a pool at zero). It reports whether the pool can
// grow: it autoscales and its maximum is above zero.
func (p *Pool) Wake() bool {
	p.mu.Lock()
	can := p.spec.Autoscaling != nil && p.spec.Maximum > 0
	if can {
		p.woken = true
	}
	p.mu.Unlock()
	if can {
		p.Trigger()
	}
	return can
}

// scalerFor returns the pool's autoscaler, made anew when spec.autoscaling
// changes; false when the pool has none (or its configuration is invalid).
func (p *Pool) scalerFor(spec *tidev1.TidePoolSpec) (*autoscale.Autoscaler, bool) {
	if spec.Autoscaling == nil {
		p.mu.Lock()
		p.scaler, p.scalerCfg, p.status.Autoscaling, p.autoKnown = nil, "", nil, false
		p.mu.Unlock()
		return nil, false
	}
	cfg := autoscaleConfig(spec)
	key, _ := json.Marshal(cfg)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.scaler == nil || p.scalerCfg != string(key) {
		a, err := autoscale.New(cfg, p.deps.clock)
		if err != nil {
			p.setConditionLocked("AutoscalingActive", metav1.ConditionFalse, "InvalidConfig", "spec.autoscaling: "+err.Error())
			return nil, false
		}
		p.scaler, p.scalerCfg, p.scaledAt, p.autoKnown = a, string(key), time.Time{}, false
	}
	return p.scaler, true
}

// noteScale keeps the autoscaler's recommendation, its status and
// condition, and records the event when the size changes.
func (p *Pool) noteScale(d autoscale.Decision, now time.Time) {
	p.mu.Lock()
	prev, known := p.autoDesired, p.autoKnown
	p.autoDesired, p.autoKnown = d.DesiredReplicas, true
	p.scaledAt = now
	st := &tidev1.AutoscalingStatus{DesiredReplicas: d.DesiredReplicas, Recommender: string(d.Source), Metric: d.Metric,
		Reason: d.Reason, Panic: d.Panic}
	if d.Metric != "" {
		st.Value = strconv.FormatFloat(d.Value, 'g', 4, 64)
	}
	if old := p.status.Autoscaling; old != nil {
		st.LastScaleTime = old.LastScaleTime
	}
	changed := known && prev != d.DesiredReplicas
	if changed {
		t := metav1.NewTime(now)
		st.LastScaleTime = &t
	}
	p.status.Autoscaling = st
	p.mu.Unlock()
	p.setCondition("AutoscalingActive", metav1.ConditionTrue, string(d.Source), d.Reason)
	if changed {
		p.deps.recorder.Eventf(events.TypeNormal, "Scaled", p.name, "", "autoscaler: %d → %d instances by %s%s: %s",
			prev, d.DesiredReplicas, d.Source, metricNote(d), d.Reason)
	}
}

func metricNote(d autoscale.Decision) string {
	if d.Metric == "" {
		return ""
	}
	return fmt.Sprintf(" (%s = %.4g)", d.Metric, d.Value)
}
