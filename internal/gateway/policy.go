package gateway

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
)

// Policy chooses the backend for one attempt among the candidates, which
// are all eligible (not draining, healthy, not ejected, not yet tried by this
// request) and never empty. Pick must be safe for concurrent use and must
// return one of cands.
type Policy interface {
	Pick(cands []*Upstream, r *http.Request) *Upstream
}

// Policy names accepted by Options.Policy.
const (
	PolicyLeastRequest = "least-request"
	PolicyRoundRobin   = "round-robin"
)

// NewPolicy returns the policy with the given name; "" means least-request.
func NewPolicy(name string) (Policy, error) {
	switch name {
	case "", PolicyLeastRequest:
		return &LeastRequest{}, nil
	case PolicyRoundRobin:
		return &RoundRobin{}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (want %q or %q)", name, PolicyLeastRequest, PolicyRoundRobin)
}

// LeastRequest picks the backend with the lowest load after assigning it
// this request, (in-flight+1)/weight, so a backend of weight 200 takes twice
// the concurrent requests of one of weight 100. Ties are broken at random,
// in proportion to weight. It scans all candidates: pools are tens of
// backends, not thousands, so the exact minimum is cheaper than its
// approximation by two random choices is worth.
type LeastRequest struct {
	// Rand returns a uniform number in [0, n); nil means math/rand/v2.
	// Tests set it to make tie breaking deterministic.
	Rand func(n int64) int64
}

// Pick implements Policy.
func (p *LeastRequest) Pick(cands []*Upstream, _ *http.Request) *Upstream {
	var (
		best           *Upstream
		bestIn, bestW  int64
		tieWeightTotal int64
	)
	for _, u := range cands {
		in, w := u.InFlight()+1, u.Weight()
		if best == nil {
			best, bestIn, bestW, tieWeightTotal = u, in, w, w
			continue
		}
		// in/w < bestIn/bestW, without division.
		l, r := in*bestW, bestIn*w
		switch {
		case l < r:
			best, bestIn, bestW, tieWeightTotal = u, in, w, w
		case l == r:
			// Weighted reservoir sampling over the tied backends.
			tieWeightTotal += w
			if p.rand(tieWeightTotal) < w {
				best, bestIn, bestW = u, in, w
			}
		}
	}
	return best
}

func (p *LeastRequest) rand(n int64) int64 {
	if p.Rand != nil {
		return p.Rand(n)
	}
	return rand.Int64N(n)
}

// RoundRobin is smooth weighted round-robin (as in nginx): over any window of
// sum(weights) picks from a stable candidate set each backend is picked
// weight times, interleaved rather than in bursts. Backends that are not
// candidates for a pick (tried, draining, ejected) are skipped without
// disturbing the rotation of the others.
type RoundRobin struct {
	mu sync.Mutex
}

// Pick implements Policy.
func (p *RoundRobin) Pick(cands []*Upstream, _ *http.Request) *Upstream {
	p.mu.Lock()
	defer p.mu.Unlock()
	var (
		best  *Upstream
		total int64
	)
	for _, u := range cands {
		w := u.Weight()
		u.rrCurrent += w
		total += w
		if best == nil || u.rrCurrent > best.rrCurrent {
			best = u
		}
	}
	if best != nil {
		best.rrCurrent -= total
	}
	return best
}
