// Package agent owns `tidegpu agent`, the small process baked into every
// instance image: it watches the cloud's interruption notice in the
// instance metadata service and reports it to the controller, so that the
// pool drains the instance and launches its replacement before the cloud
// takes it back.
//
// The parts:
//
//   - Source (one per cloud) reads the metadata service: AWS IMDSv2
//     (session token, spot/instance-action, the rebalance recommendation,
//     instance-id) and Tencent Cloud's metadata service
//     (spot/termination-time, instance-id). The parsers of their answers
//     are pure functions.
//   - Reporter POSTs a notice to the controller's admin API
//     (POST /api/v1/pools/{pool}/instances/{id}/notice) with the admin
//     token as a bearer token; the token is never logged.
//   - Agent is the loop: poll every interval (AWS recommends 5 s), report
//     each notice once, retry with exponential backoff and jitter until the
//     controller acknowledges (2xx) or the interruption time passes. Time
//     comes from an injected clock.
//
// Fakes of both metadata services live in package metadatatest.
package agent
