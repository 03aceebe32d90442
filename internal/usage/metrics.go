package usage

import "github.com/prometheus/client_golang/prometheus"

// Metric names of the usage reports.
const (
	// MetricReportBatches counts a replica's batches by outcome: acked,
	// duplicate (the operator had counted it already: an ack was lost),
	// failed (a send that got no acknowledgement; it is retried).
	MetricReportBatches = "tidegpu_gateway_usage_batches_total"
	// MetricReportUnacked is the tokens a replica holds that the operator
	// has not acknowledged yet.
	MetricReportUnacked = "tidegpu_gateway_usage_unacked_tokens"
	// MetricIngestBatches counts the operator's batches by result:
	// counted, duplicate, refused (not the leader, or restoring).
	MetricIngestBatches = "tidegpu_usage_ingest_batches_total"
	// MetricIngestDropped counts tokens reported for backends the ledger
	// does not know (not an instance of a pool).
	MetricIngestDropped = "tidegpu_usage_ingest_dropped_tokens_total"
)

type reporterMetrics struct {
	batches *prometheus.CounterVec
}

func newReporterMetrics(reg prometheus.Registerer, r *Reporter) (*reporterMetrics, error) {
	m := &reporterMetrics{batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricReportBatches,
		Help: "Usage batches sent to the operator, by outcome (acked, duplicate, failed)."}, []string{"outcome"})}
	unacked := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricReportUnacked,
		Help: "Tokens gathered that the operator has not acknowledged yet."}, func() float64 { return float64(r.Unacked()) })
	for _, c := range []prometheus.Collector{m.batches, unacked} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, o := range []string{"acked", "duplicate", "failed"} {
		m.batches.WithLabelValues(o)
	}
	return m, nil
}

func (m *reporterMetrics) batch(outcome string) {
	if m != nil {
		m.batches.WithLabelValues(outcome).Inc()
	}
}

type ingestMetrics struct {
	batches *prometheus.CounterVec
	dropped prometheus.Counter
}

func newIngestMetrics(reg prometheus.Registerer) (*ingestMetrics, error) {
	m := &ingestMetrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricIngestBatches,
			Help: "Usage batches from gateway replicas, by result (counted, duplicate, refused)."}, []string{"result"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricIngestDropped,
			Help: "Tokens reported for backends that are no instance the cost ledger knows."}),
	}
	for _, c := range []prometheus.Collector{m.batches, m.dropped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{"counted", "duplicate", "refused"} {
		m.batches.WithLabelValues(r)
	}
	return m, nil
}

func (m *ingestMetrics) batch(result string) {
	if m != nil {
		m.batches.WithLabelValues(result).Inc()
	}
}

func (m *ingestMetrics) drop(n int64) {
	if m != nil {
		m.dropped.Add(float64(n))
	}
}
