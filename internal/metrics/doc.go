// Package metrics owns the load signals of inference backends as the
// balancer and the autoscaler read them: one small interface, [Source], and
// its implementations.
//
//   - [Scrape] reads each backend's own /metrics (Prometheus text format)
//     directly, concurrently and with a timeout per backend: the freshest
//     signal, for a gateway that balances every few hundred milliseconds.
//     The metric names are those of the backend's server [Family] (vLLM,
//     SGLang, TGI, llama.cpp), detected from the exposition or given; an
//     exposition without the family's queue gauge is an error, not an idle
//     backend.
//   - [Prometheus] asks a Prometheus server with PromQL instant queries
//     (templates that can be replaced; by default every family's names),
//     for clusters where Prometheus already scrapes the backends.
//   - The gateway's own measurements (in flight, peak-EWMA latency, error
//     rate) are a Source too (gateway.Gateway.LocalMetrics), for backends
//     that publish no metrics, such as Ollama.
//
// A Source reports what it saw and when ([BackendMetrics.ObservedAt]). It
// never decides what a missing or old value means: callers treat a value
// older than their maximum age as stale and stale or missing values as
// neutral ([BackendMetrics.Fresh]), so that a metrics outage degrades
// balancing to the gateway's own signals rather than breaking it.
package metrics
