package sim

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, as exported by vLLM, plus the simulator's own.
const (
	metricRunning         = "vllm:num_requests_running"
	metricWaiting         = "vllm:num_requests_waiting"
	metricKVCacheUsage    = "vllm:kv_cache_usage_perc"
	metricTTFT            = "vllm:time_to_first_token_seconds"
	metricTPOT            = "vllm:time_per_output_token_seconds"
	metricE2E             = "vllm:e2e_request_latency_seconds"
	metricQueueTime       = "vllm:request_queue_time_seconds"
	metricPromptTokens    = "vllm:prompt_tokens_total"
	metricGenTokens       = "vllm:generation_tokens_total"
	metricRequestSuccess  = "vllm:request_success_total"
	metricPrefixQueries   = "vllm:prefix_cache_queries_total"
	metricPrefixHits      = "vllm:prefix_cache_hits_total"
	metricPrefixUsage     = "tidegpu_sim_prefix_cache_usage"
	metricGPUUtilization  = "tidegpu_sim_gpu_utilization"
	metricInfo            = "tidegpu_sim_info"
	labelModelName        = "model_name"
	labelFinishedReason   = "finished_reason"
	labelInstanceID       = "instance_id"
	utilizationSmoothing  = time.Second
	utilizationMetricHelp = "Simulated GPU utilization (0..1): fraction of batch slots busy, exponentially smoothed over about one second; within half a percent of that fraction, the fraction itself."
	// utilizationSettle is how close the smoothed utilization must come to
	// the fraction of busy slots to read it exactly: half a percent, under
	// the resolution of a real GPU utilization meter (nvidia-smi and
	// DCGM's DCGM_FI_DEV_GPU_UTIL report whole percents), so that an idle
	// simulator reads 0 as an idle GPU does, not an exponential tail that
	// changes at every scrape for minutes.
	utilizationSettle = 0.005
)

// Histogram buckets: vLLM's, extended downwards because simulated backends
// are often configured faster than real ones.
var (
	ttftBuckets = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	tpotBuckets = []float64{0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15,
		0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	e2eBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0,
		15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// metrics are the Prometheus collectors of one Server, in its own registry.
type metrics struct {
	reg *prometheus.Registry

	running      *prometheus.GaugeVec
	waiting      *prometheus.GaugeVec
	kvCacheUsage *prometheus.GaugeVec
	ttft         *prometheus.HistogramVec
	tpot         *prometheus.HistogramVec
	e2e          *prometheus.HistogramVec
	queueTime    *prometheus.HistogramVec
	promptTokens *prometheus.CounterVec
	genTokens    *prometheus.CounterVec
	success      *prometheus.CounterVec
	// vLLM's prefix-cache counters count prompt tokens: looked up, and
	// found in the cache.
	prefixQueries *prometheus.CounterVec
	prefixHits    *prometheus.CounterVec

	models   []string
	maxBatch int

	utilMu   sync.Mutex
	util     float64   // smoothed utilization at utilAt
	utilAt   time.Time // time of the last update
	utilNow  float64   // instantaneous utilization since utilAt
	nowFunc  func() time.Time
	instance string
}

func newMetrics(cfg Config, now func() time.Time) *metrics {
	m := &metrics{
		reg:      prometheus.NewRegistry(),
		models:   cfg.Models,
		maxBatch: cfg.MaxBatch,
		nowFunc:  now,
		instance: cfg.InstanceID,
	}
	m.utilAt = now()
	labels := []string{labelModelName}
	m.running = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: metricRunning, Help: "Number of requests in model execution batches.",
	}, labels)
	m.waiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: metricWaiting, Help: "Number of requests waiting to be processed.",
	}, labels)
	m.kvCacheUsage = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: metricKVCacheUsage, Help: "KV-cache usage. 1 means 100 percent usage (simulated: running sequences / max batch).",
	}, labels)
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: metricTTFT, Help: "Histogram of time to first token in seconds.", Buckets: ttftBuckets,
	}, labels)
	m.tpot = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: metricTPOT, Help: "Histogram of time per output token in seconds.", Buckets: tpotBuckets,
	}, labels)
	m.e2e = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: metricE2E, Help: "Histogram of end to end request latency in seconds.", Buckets: e2eBuckets,
	}, labels)
	m.queueTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: metricQueueTime, Help: "Histogram of time spent in WAITING phase for request.", Buckets: e2eBuckets,
	}, labels)
	m.promptTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricPromptTokens, Help: "Number of prefill tokens processed.",
	}, labels)
	m.genTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricGenTokens, Help: "Number of generation tokens processed.",
	}, labels)
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricRequestSuccess, Help: "Count of successfully processed requests.",
	}, []string{labelModelName, labelFinishedReason})
	m.prefixQueries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricPrefixQueries, Help: "Prefix cache queries, in terms of number of queried tokens.",
	}, labels)
	m.prefixHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricPrefixHits, Help: "Prefix cache hits, in terms of number of cached tokens.",
	}, labels)
	util := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metricGPUUtilization, Help: utilizationMetricHelp,
	}, m.utilization)
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: metricInfo, Help: "Information about the simulated backend; always 1.",
		ConstLabels: prometheus.Labels{labelInstanceID: cfg.InstanceID},
	})
	info.Set(1)
	m.reg.MustRegister(m.running, m.waiting, m.kvCacheUsage, m.ttft, m.tpot, m.e2e,
		m.queueTime, m.promptTokens, m.genTokens, m.success, m.prefixQueries, m.prefixHits, util, info)

	// Create every per-model series up front so that scrapers see zeros
	// before the first request.
	for _, model := range cfg.Models {
		m.running.WithLabelValues(model)
		m.waiting.WithLabelValues(model)
		m.kvCacheUsage.WithLabelValues(model)
		m.ttft.WithLabelValues(model)
		m.tpot.WithLabelValues(model)
		m.e2e.WithLabelValues(model)
		m.queueTime.WithLabelValues(model)
		m.promptTokens.WithLabelValues(model)
		m.genTokens.WithLabelValues(model)
		m.prefixQueries.WithLabelValues(model)
		m.prefixHits.WithLabelValues(model)
		for _, reason := range []string{finishStop, finishLength} {
			m.success.WithLabelValues(model, reason)
		}
	}
	return m
}

// loadChanged updates the scheduler gauges; it runs under the admission lock,
// so the gauges change in the same order as the admission state.
func (m *metrics) loadChanged(model string, l load, total load) {
	m.running.WithLabelValues(model).Set(float64(l.running))
	m.waiting.WithLabelValues(model).Set(float64(l.waiting))
	busy := float64(total.running) / float64(m.maxBatch)
	// The KV cache is shared by every model served by this backend.
	for _, name := range m.models {
		m.kvCacheUsage.WithLabelValues(name).Set(busy)
	}
	m.utilMu.Lock()
	now := m.nowFunc()
	m.util = smooth(m.util, m.utilNow, now.Sub(m.utilAt), utilizationSmoothing)
	m.utilAt = now
	m.utilNow = busy
	m.utilMu.Unlock()
}

// utilization returns the smoothed fraction of busy batch slots, settled
// on the fraction itself once within utilizationSettle of it.
func (m *metrics) utilization() float64 {
	m.utilMu.Lock()
	defer m.utilMu.Unlock()
	return settled(smooth(m.util, m.utilNow, m.nowFunc().Sub(m.utilAt), utilizationSmoothing), m.utilNow, utilizationSettle)
}

// settled returns target if v is within tol of it, else v: an exponential
// average reaches its target only in the limit, a meter of finite
// resolution reads it after a few time constants. Pure.
func settled(v, target, tol float64) float64 {
	if math.Abs(v-target) < tol {
		return target
	}
	return v
}

// watchCache exports the fill of the prefix cache c, if there is one:
// the fraction of its capacity holding cached blocks. It is not
// vllm:kv_cache_usage_perc, which (as in vLLM, where cached blocks no
// running request uses are free to evict) stays the share of the batch
// the running sequences take.
func (m *metrics) watchCache(c *prefixCache) {
	if c == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metricPrefixUsage, Help: "Fraction of the simulated prefix cache holding cached blocks (0..1).",
	}, c.usage))
}
