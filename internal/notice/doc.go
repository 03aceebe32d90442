// Package notice owns the way spot interruption notices reach the pool
// engine in a cluster: the per-pool notice tokens (generated here, kept by
// the reconciler in a Secret, compared as SHA-256 digests in constant
// time), the notice endpoint that `tidegpu agent` posts to (its own
// listener and mux, separate from the admin API, optional TLS), and the
// Router that hands a notice to the engine once, whichever source — the
// agent or the cloud's event queue — brings it first.
//
// A token is never written to a log, an event or a status: Tokens keeps
// it in memory for the bootstrap renderer and compares digests.
package notice
