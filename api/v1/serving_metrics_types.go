package v1

// The types of this file say how the gateway reads a pool's backends' own
// load signals (spec.serving.metrics). internal/metrics implements them.

// MetricsFamily names an inference server's metric vocabulary.
// +kubebuilder:validation:Enum=auto;vllm;sglang;tgi;llamacpp;none
type MetricsFamily string

// Metrics families.
const (
	// MetricsFamilyAuto detects each backend's family from the names in
	// its /metrics.
	MetricsFamilyAuto MetricsFamily = "auto"
	// MetricsFamilyNone reads no backend metrics (Ollama): the gateway
	// balances on its own measurements.
	MetricsFamilyNone MetricsFamily = "none"
)

// ServingMetrics says which metrics a pool's backends serve.
//
// +kubebuilder:validation:XValidation:rule="!has(self.names) || !has(self.family) || self.family != 'none'",fieldPath=".names",message="names: a pool with family none reads no metrics: remove names or set a family"
// +kubebuilder:validation:XValidation:rule="!has(self.names) || has(self.names.queue) || (has(self.family) && self.family != 'auto')",fieldPath=".names.queue",message="names.queue: required unless family names a server (auto has no names to start from): give the queue gauge's name"
// +kubebuilder:validation:XValidation:rule="!has(self.promql) || !has(self.family) || self.family != 'none'",fieldPath=".promql",message="promql: a pool with family none reads no metrics: remove promql or set a family"
type ServingMetrics struct {
	// Family is the server family whose metric names the gateway reads:
	// auto (default: detected per backend), vllm, sglang, tgi, llamacpp, or
	// none (Ollama: the gateway's own measurements). It overrides the
	// gateway's --metrics-family for this pool's backends.
	// +optional
	Family MetricsFamily `json:"family,omitempty"`

	// Names override the family's metric names signal by signal, for a
	// server that renames them or one of no known family. Set names.queue
	// when family is auto or unset.
	// +optional
	Names *MetricNames `json:"names,omitempty"`

	// PromQL are this pool's own queries, signal by signal, for a gateway
	// that reads its backends through Prometheus (--metrics
	// prometheus=URL); a query left unset keeps the one of the family's
	// names.
	// +optional
	PromQL *PromQLQueries `json:"promql,omitempty"`
}

// PromQLQueries are PromQL instant queries, each a Go text/template over
// {{.Label}} (the label naming a backend, instance by default),
// {{.Selector}} and {{.Window}}, returning one sample per backend that
// carries the label.
type PromQLQueries struct {
	// Queue: requests waiting for a batch slot.
	// +kubebuilder:validation:XValidation:rule="!self.matches('^\\\\s*$')",message="queue: must not be blank: give the query or remove the field"
	// +optional
	Queue string `json:"queue,omitempty"`
	// Running: requests in the running batch.
	// +kubebuilder:validation:XValidation:rule="!self.matches('^\\\\s*$')",message="running: must not be blank: give the query or remove the field"
	// +optional
	Running string `json:"running,omitempty"`
	// KVCache: KV-cache usage as a fraction 0..1.
	// +kubebuilder:validation:XValidation:rule="!self.matches('^\\\\s*$')",message="kvCache: must not be blank: give the query or remove the field"
	// +optional
	KVCache string `json:"kvCache,omitempty"`
	// TTFTP50 and TTFTP99: quantiles of the time to first token, seconds
	// (both or neither).
	// +kubebuilder:validation:XValidation:rule="!self.matches('^\\\\s*$')",message="ttftP50: must not be blank: give the query or remove the field"
	// +optional
	TTFTP50 string `json:"ttftP50,omitempty"`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^\\\\s*$')",message="ttftP99: must not be blank: give the query or remove the field"
	// +optional
	TTFTP99 string `json:"ttftP99,omitempty"`
	// GPUUtil: GPU utilisation as a fraction 0..1.
	// +kubebuilder:validation:XValidation:rule="!self.matches('^\\\\s*$')",message="gpuUtil: must not be blank: give the query or remove the field"
	// +optional
	GPUUtil string `json:"gpuUtil,omitempty"`
}

// MetricNames are the metric names of each signal in a backend's /metrics.
// A name left unset keeps the family's.
type MetricNames struct {
	// Queue is the gauge of requests waiting for a batch slot (summed over
	// label sets).
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_:][a-zA-Z0-9_:]*$`
	// +optional
	Queue string `json:"queue,omitempty"`
	// Running is the gauge of requests in the running batch (summed).
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_:][a-zA-Z0-9_:]*$`
	// +optional
	Running string `json:"running,omitempty"`
	// KVCache is the gauge of KV-cache usage (maxed over label sets), in
	// kvCacheUnit.
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_:][a-zA-Z0-9_:]*$`
	// +optional
	KVCache string `json:"kvCache,omitempty"`
	// KVCacheUnit is Fraction (0..1, the default) or Percent (0..100).
	// +kubebuilder:validation:Enum=Fraction;Percent
	// +optional
	KVCacheUnit string `json:"kvCacheUnit,omitempty"`
	// TTFT is the histogram of the time to first token, in seconds.
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_:][a-zA-Z0-9_:]*$`
	// +optional
	TTFT string `json:"ttft,omitempty"`
}
