// Package poolview is the read-only view of one pool that the engine hands
// to its readers (the admin API, the dashboard): the pool's name, spec and
// status. It imports only api/v1, so a reader such as the dashboard that
// `tidegpu gateway` serves does not link the engine.
package poolview

import tidev1 "github.com/tidegpu/tidegpu/api/v1"

// Pool is one pool as its readers see it.
type Pool struct {
	Name   string                `json:"name"`
	Spec   tidev1.TidePoolSpec   `json:"spec"`
	Status tidev1.TidePoolStatus `json:"status"`
}
