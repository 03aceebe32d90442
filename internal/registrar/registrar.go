// Package registrar defines the seam between the pool engine and the gateway
// in front of the pool: make the gateway's backends for a pool equal to a
// target list. Implementations: builtin (the embedded data plane) and kong
// (Kong's Admin API).
package registrar

import (
	"context"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
)

// Target is one backend the gateway should send a pool's traffic to.
type Target struct {
	// ID is the instance id.
	ID string `json:"id"`
	// Address is host:port of the inference server.
	Address string `json:"address"`
	// Weight is the relative share of traffic, 1..65535; 0 means the
	// registrar's default (100).
	Weight int `json:"weight,omitempty"`
	// Models the backend serves (empty: any) and its model Version, for
	// model-aware routing.
	Models  []string `json:"models,omitempty"`
	Version string   `json:"version,omitempty"`
	// Metrics is the pool's spec.serving.metrics: which metrics the
	// backend serves, for a gateway's balancing signals; nil: detected.
	Metrics *tidev1.ServingMetrics `json:"metrics,omitempty"`
}

// Registrar makes a gateway's backends for a pool equal to targets: it adds
// what is missing, removes what is not listed and corrects weights. Sync
// with an empty list removes every backend the pool owns.
type Registrar interface {
	Sync(ctx context.Context, pool string, targets []Target) error
}

// InFlightReporter is implemented by registrars that can tell how many
// requests a backend still serves, so that a draining instance can be
// terminated as soon as it is idle instead of at its deadline.
type InFlightReporter interface {
	// InFlight returns the requests in flight on the backend, or -1 when
	// unknown.
	InFlight(id string) int
}

// Nop is the registrar of a gateway that follows pools on its own, such as
// `tidegpu gateway --kubeconfig`, which watches the pools' status: there is
// nothing to push.
type Nop struct{}

// Sync does nothing.
func (Nop) Sync(context.Context, string, []Target) error { return nil }
