// Package gateway is TideGPU's built-in HTTP data plane: one entry point in
// front of a changing pool of inference backends (Ollama, vLLM or the
// simulator).
//
// # Guarantee
//
// Backends come and go — killed with SIGKILL, reclaimed by the cloud,
// drained and replaced — and no request that had not yet started streaming
// to the client fails because of it. To keep that promise the gateway
//
//   - buffers the request body (bounded by Options.MaxBodyBytes) so that it
//     can be replayed;
//   - commits a response to the client only once a backend has answered
//     with a status other than 502/503; until then any failure (dial error,
//     connection refused or reset, EOF before the response headers, 502, 503)
//     is retried on another backend, up to Options.MaxRetries times;
//   - when no backend is available, waits a bounded time
//     (Options.WaitForBackend) for one to appear before answering 503;
//   - abandons attempts that are still waiting for response headers on a
//     backend that the active probe has just declared dead (a reclaimed host
//     never sends a RST, so without this such requests would hang) and
//     retries them elsewhere.
//
// Once the first byte of a response has been written, the response belongs
// to that backend: a backend failure mid-stream aborts the client connection
// (the client sees a truncated response, not a clean end) by panicking with
// http.ErrAbortHandler, as httputil.ReverseProxy does. The same abort
// ends an answer whose backend falls silent for Options.StreamIdleTimeout.
//
// The gateway's own answers (no backend, all failed, body too large, no
// route) are in the error shape of the client's API: OpenAI's error object
// under /v1, Ollama's {"error": "..."} elsewhere (apierror.go). With
// Options.CORS it answers CORS preflights itself and sets the
// Access-Control-* headers of every answer (cors.go); without, OPTIONS goes
// to a backend like any request.
//
// # Routing
//
// A path ending in /ollama-chat (the seed's Kong route, regex
// "~/ollama-chat$") is sent to the backend path /api/chat; paths under /api/
// and /v1/, and the root path /, are passed through unchanged, query
// included. Anything else is answered 404. The request header
// X-Tidegpu-Pool restricts the candidates to one pool; every response that
// came from a backend carries X-Tidegpu-Backend with that backend's ID.
//
// A request's model (the "model" field of its JSON body) restricts the
// candidates to the backends published as serving it (Backend.Models), and
// a version split (SetVersionSplit) divides a model's traffic among the
// backends' versions (Backend.Version). A backend without Models serves any
// model; a model no backend declares is not restricted.
//
// # Balancing
//
// Options.Policy picks one candidate per attempt: "prefix-aware" (the
// default: for the generation APIs, the backend that should still hold the
// longest leading part of the prompt in its prefix cache, as long as its
// load is within twice the least loaded one's, a new prefix going
// to its rendezvous-hashed home; without a prefix signal, "least-cost";
// see PrefixAware), "least-cost" (the lowest load score of all candidates:
// in-flight requests, peak-EWMA latency and, from Options.Metrics while
// fresh, queue depth and batch size; see Score and LeastCost), "p2c" (the
// same score over two random candidates; see P2C), "least-request",
// "round-robin" (smooth weighted) or "weighted" (random in proportion to
// Backend.Weight, the weights an AIBalancer computes). Options.Metrics is
// read in the background every Options.MetricsInterval and stored on each
// backend for the policy to read atomically; metrics older than
// Options.MetricsMaxAge count as missing, and missing metrics make the
// comparison fall back to the gateway's own signals (SignalStatus says
// which a pool is on).
//
// # Backends and health
//
// The pool controller publishes each pool's backends with
// Gateway.SetBackends; the new set is in force when the call returns. A
// backend is a candidate while it is not draining, is healthy according to
// the active probe, and has not been passively ejected (if every candidate
// is ejected, the ejected ones are used anyway rather than failing: "panic
// routing"). Draining backends get no new requests; Gateway.InFlight tells
// the controller when the last in-flight request on one has finished, and
// that count is exact: once it has been observed at 0 after SetBackends
// marked the backend draining or removed it, no request will start on it.
//
// # Idle cost
//
// The probe and the reads of Options.Metrics back off per backend while it
// idles unchanged: each interval doubles after a read that found it as
// before with no request on it, up to DefaultProbeMaxInterval and
// DefaultMetricsMaxInterval, and is back at the base interval after a
// failure, a changed answer, a request sent to it or one in flight on it.
// A request answered counts as a probe. Metrics read less often on purpose
// are held (loadmetrics.BackendMetrics.HeldUntil) and stay fresh until the
// next read is due; a failed read ends the hold (the values are stale MetricsMaxAge after the last good read, as without back-off). So a backend that dies
// while nobody uses it is marked unhealthy within DefaultProbeMaxInterval
// (a request to it fails over at once), and load that reaches an idle
// backend from elsewhere is seen within DefaultMetricsMaxInterval.
//
// # Token usage of streams
//
// With Options.OnUsage set, a streamed POST /v1/chat/completions or
// /v1/completions whose client did not ask for stream_options.include_usage
// is sent to the backend with it set (the rest of the JSON body kept), and
// the usage chunk that then ends the stream (the data event before
// data: [DONE] whose choices are empty) goes to OnUsage instead of the
// client. Other bodies (not streamed, not a JSON object, already asking)
// pass unchanged. The client's other chunks carry "usage": null, as the
// OpenAI API sends them when asked. The chunk also goes to the UsageFunc
// the request's context carries (WithUsageHook), so that a handler in front
// of the gateway can tell whose request it was.
//
// A server that serves a Gateway must not set http.Server.WriteTimeout (it
// would cut long generations), and a panic-recovering middleware in front of
// it must re-panic http.ErrAbortHandler.
package gateway
