package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Source reports the load of a set of backends. Implementations are safe
// for concurrent use.
type Source interface {
	// Name identifies the source in status and logs ("scrape",
	// "prometheus", "gateway").
	Name() string
	// Snapshot returns the latest metrics of the targets it could learn
	// about, keyed by Target.ID. A target missing from the map has no
	// metrics (neutral, not zero load). A non-nil error means the source is
	// failing, wholly or for some targets or queries; the entries of a
	// non-nil map returned with it are still valid. Snapshot honours ctx.
	Snapshot(ctx context.Context, targets []Target) (map[string]BackendMetrics, error)
	// Close releases the source's connections and state.
	Close()
}

// Target is one backend whose metrics are wanted.
type Target struct {
	// ID is the backend's instance id (the key of Snapshot's map).
	ID string
	// Address is host:port of the backend's HTTP server, which also serves
	// /metrics (vLLM, the simulator).
	Address string
	// Family, if set, is the metric names of this backend (its pool's
	// spec.serving.metrics), instead of the source's: Scrape parses its
	// exposition with them, Prometheus runs that family's default queries
	// for it.
	Family Family
	// Queries, if any is set, are this backend's own PromQL queries (its
	// pool's spec.serving.metrics.promql) over those of its Family, for
	// the Prometheus source.
	Queries Queries
}

// Field names one value of BackendMetrics, for BackendMetrics.Has.
type Field uint16

// Fields of BackendMetrics.
const (
	FieldQueueDepth Field = 1 << iota
	FieldRunning
	FieldKVCacheUsage
	FieldGPUUtil
	FieldTTFT
	FieldInFlight
	FieldLatency
	FieldErrorRate
	// FieldLoaded: Loaded (the models an Ollama server has in memory).
	FieldLoaded
)

// BackendMetrics is one backend's load at ObservedAt. A value counts only if
// its Field is set in Has: zero is a real value (an idle backend), not
// "unknown".
type BackendMetrics struct {
	// QueueDepth is the number of requests waiting for a batch slot
	// (vllm:num_requests_waiting or its Family's equivalent, summed over
	// models, engines and ranks).
	QueueDepth float64
	// Running is the number of requests in the running batch
	// (vllm:num_requests_running, summed over models).
	Running float64
	// KVCacheUsage is the fraction of the KV cache in use, 0..1
	// (vllm:kv_cache_usage_perc).
	KVCacheUsage float64
	// GPUUtil is the GPU utilisation, 0..1 (tidegpu_sim_gpu_utilization, or
	// a DCGM query through Prometheus).
	GPUUtil float64
	// TTFTP50 and TTFTP99 are quantiles of the time to first token over the
	// last interval (vllm:time_to_first_token_seconds: from the bucket
	// deltas between two scrapes, or histogram_quantile over a rate).
	TTFTP50, TTFTP99 time.Duration
	// InFlight, Latency (peak-EWMA time to response headers) and ErrorRate
	// (0..1) are measured by a gateway, for backends that publish nothing.
	InFlight  float64
	Latency   time.Duration
	ErrorRate float64
	// Loaded are the models the backend has loaded in memory (Ollama's
	// /api/ps), for model-aware routing.
	Loaded []string
	// Has says which of the values above are known.
	Has Field
	// Family is the name of the server family whose metrics gave the
	// values ("vllm", "sglang", "tgi", "llamacpp"), if a scrape read them.
	Family string
	// ObservedAt is when the values were measured: the scrape's time, or
	// the sample's timestamp in Prometheus.
	ObservedAt time.Time
	// HeldUntil, if after ObservedAt, says that the reader reads this
	// backend less often on purpose (it backed off while the backend was
	// idle and its values did not change) and reads it again by then: the
	// values count as current until HeldUntil and age from there, so a
	// back-off does not make them stale. Zero: they age from ObservedAt.
	HeldUntil time.Time
}

// Fresh reports whether the metrics were observed no longer than maxAge
// before now (and not in the future by more than maxAge, which would be a
// clock fault), where a HeldUntil after ObservedAt counts as the time of
// observation: a reader that backed off is due to read again by then.
// Stale metrics must be treated as missing. Pure.
func (m BackendMetrics) Fresh(now time.Time, maxAge time.Duration) bool {
	if m.ObservedAt.IsZero() || m.Has == 0 {
		return false
	}
	if now.Sub(m.ObservedAt) < -maxAge {
		return false
	}
	ref := m.ObservedAt
	if m.HeldUntil.After(ref) {
		ref = m.HeldUntil
	}
	return now.Sub(ref) <= maxAge
}

// set stores v as the value of f if v is a usable number: finite and not
// negative. Fractions are clamped to 1.
func (m *BackendMetrics) set(f Field, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return
	}
	switch f {
	case FieldQueueDepth:
		m.QueueDepth = v
	case FieldRunning:
		m.Running = v
	case FieldKVCacheUsage:
		m.KVCacheUsage = min(v, 1)
	case FieldGPUUtil:
		m.GPUUtil = min(v, 1)
	case FieldInFlight:
		m.InFlight = v
	case FieldErrorRate:
		m.ErrorRate = min(v, 1)
	default:
		return
	}
	m.Has |= f
}

// setTTFT stores the two TTFT quantiles (seconds) if both are usable.
func (m *BackendMetrics) setTTFT(p50, p99 float64) {
	d50, ok50 := seconds(p50)
	d99, ok99 := seconds(p99)
	if !ok50 || !ok99 {
		return
	}
	m.TTFTP50, m.TTFTP99 = d50, d99
	m.Has |= FieldTTFT
}

// seconds converts a non-negative finite number of seconds below ~292 years
// to a Duration.
func seconds(s float64) (time.Duration, bool) {
	if math.IsNaN(s) || s < 0 || s >= float64(math.MaxInt64)/float64(time.Second) {
		return 0, false
	}
	return time.Duration(s * float64(time.Second)), true
}

// TargetError is the error of a Snapshot for some of its targets: the ones
// listed failed, the others are in the map.
type TargetError struct {
	// Source is the name of the failing source.
	Source string
	// Failed maps a target ID to its error.
	Failed map[string]error
	// Total is the number of targets asked for.
	Total int
}

// Error names how many targets failed and the error of the first by ID
// (so that the text, which ends up in status conditions, is stable).
func (e *TargetError) Error() string {
	var first error
	firstID := ""
	for id, err := range e.Failed {
		if first == nil || id < firstID {
			first, firstID = err, id
		}
	}
	return fmt.Sprintf("%s: %d of %d targets failed, e.g.: %v", e.Source, len(e.Failed), e.Total, first)
}

// Unwrap returns the targets' errors.
func (e *TargetError) Unwrap() []error {
	out := make([]error, 0, len(e.Failed))
	for _, err := range e.Failed {
		out = append(out, err)
	}
	return out
}

// AllFailed reports whether err is a TargetError for which no target
// answered, or another error (the whole source failed).
func AllFailed(err error) bool {
	if err == nil {
		return false
	}
	var te *TargetError
	if errors.As(err, &te) {
		return len(te.Failed) >= te.Total
	}
	return true
}
