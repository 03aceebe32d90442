package engine

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the engine's own Prometheus series, labelled by pool. One
// Metrics serves every Manager that registers with the same registry.
type Metrics struct {
	desired           *prometheus.GaugeVec
	ready             *prometheus.GaugeVec
	launches          *prometheus.CounterVec
	launchFailures    *prometheus.CounterVec
	terminations      *prometheus.CounterVec
	lost              *prometheus.CounterVec
	interruptions     *prometheus.CounterVec
	readySeconds      *prometheus.HistogramVec
	reconcileDuration *prometheus.HistogramVec
	reconcileErrors   *prometheus.CounterVec
	budgetExceeded    *prometheus.GaugeVec
}

// NewMetrics creates the engine's series and registers them with reg (nil
// for none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tidegpu_pool_desired_instances",
			Help: "Serving instances the pool wants."}, []string{"pool"}),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tidegpu_pool_ready_instances",
			Help: "Instances of the pool serving traffic."}, []string{"pool"}),
		launches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidegpu_instance_launches_total",
			Help: "Instances launched."}, []string{"pool", "market"}),
		launchFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidegpu_instance_launch_failures_total",
			Help: "Launches the provider refused or failed."}, []string{"pool"}),
		terminations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidegpu_instance_terminations_total",
			Help: "Terminations requested by the engine."}, []string{"pool"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidegpu_instance_lost_total",
			Help: "Instances that vanished without being asked to (crash, kill, reclaim without notice)."}, []string{"pool"}),
		interruptions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidegpu_instance_interruption_notices_total",
			Help: "Reclaim notices received."}, []string{"pool"}),
		readySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tidegpu_instance_ready_seconds",
			Help:    "Time from launch to the first passed readiness probe.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600}}, []string{"pool"}),
		reconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tidegpu_pool_round_duration_seconds",
			Help: "Duration of one observe-decide-apply round.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"pool"}),
		reconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidegpu_pool_round_errors_total",
			Help: "Rounds that ended in an error (retried with backoff)."}, []string{"pool"}),
		budgetExceeded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tidegpu_pool_budget_exceeded",
			Help: "1 while the pool's monthly budget is spent."}, []string{"pool"}),
	}
	if reg != nil {
		reg.MustRegister(m.desired, m.ready, m.launches, m.launchFailures, m.terminations, m.lost,
			m.interruptions, m.readySeconds, m.reconcileDuration, m.reconcileErrors, m.budgetExceeded)
	}
	return m
}

func (m *Metrics) forget(pool string) {
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.desired, m.ready, m.launches, m.launchFailures, m.terminations, m.lost, m.interruptions,
		m.readySeconds, m.reconcileDuration, m.reconcileErrors, m.budgetExceeded} {
		v.DeletePartialMatch(prometheus.Labels{"pool": pool})
	}
}
