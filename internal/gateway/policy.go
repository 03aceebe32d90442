package gateway

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"

	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
)

// Policy chooses the backend for one attempt among the candidates, which
// are all eligible (not draining, healthy, not ejected, not yet tried by this
// request) and never empty. Pick must be safe for concurrent use and must
// return one of cands. It must not keep r, its Header, URL or context after
// it returns: the gateway's server reuses them for the connection's next
// request (h1.Server).
type Policy interface {
	Pick(cands []*Upstream, r *http.Request) *Upstream
}

// Policy names accepted by Options.Policy.
const (
	// PolicyPrefixAware is the default: prefix-cache affinity with bounded
	// load over the least-cost picker (PrefixAware).
	PolicyPrefixAware = "prefix-aware"
	// PolicyLeastCost is the default's load-only part: the lowest load
	// Score of all candidates (LeastCost).
	PolicyLeastCost = "least-cost"
	// PolicyP2C is power of two choices over the load Score of queue
	// depth, in-flight requests and peak-EWMA latency (P2C), the default
	// before prefix-aware.
	PolicyP2C          = "p2c"
	PolicyLeastRequest = "least-request"
	PolicyRoundRobin   = "round-robin"
	// PolicyWeighted picks at random in proportion to Backend.Weight (the
	// weights an AIBalancer computes).
	PolicyWeighted = "weighted"
)

// PolicyNames lists the names NewPolicy accepts, the default first.
var PolicyNames = []string{PolicyPrefixAware, PolicyLeastCost, PolicyP2C, PolicyLeastRequest, PolicyRoundRobin, PolicyWeighted}

// NewPolicy returns the policy with the given name; "" means prefix-aware.
func NewPolicy(name string) (Policy, error) {
	switch name {
	case "", PolicyPrefixAware:
		return &PrefixAware{}, nil
	case PolicyLeastCost:
		return &LeastCost{}, nil
	case PolicyP2C:
		return &P2C{}, nil
	case PolicyLeastRequest:
		return &LeastRequest{}, nil
	case PolicyRoundRobin:
		return &RoundRobin{}, nil
	case PolicyWeighted:
		return &Weighted{}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (want one of %q)", name, PolicyNames)
}

// Weighted picks a candidate at random with probability weight/Σweights.
// Unlike RoundRobin, which also honours weights, it keeps no state: each
// pick is independent, so shares stay proportional however the candidate
// set changes between picks (retries, ejections, weights rewritten every
// few seconds by an AIBalancer).
type Weighted struct {
	// Rand returns a uniform number in [0, n); nil means math/rand/v2.
	Rand func(n int64) int64
}

// Pick implements Policy.
func (p *Weighted) Pick(cands []*Upstream, _ *http.Request) *Upstream {
	var total int64
	for _, u := range cands {
		total += u.Weight()
	}
	if total <= 0 {
		return cands[0]
	}
	var r int64
	if p.Rand != nil {
		r = p.Rand(total)
	} else {
		r = rand.Int64N(total)
	}
	for _, u := range cands {
		if r < u.Weight() {
			return u
		}
		r -= u.Weight()
	}
	return cands[len(cands)-1] // a weight changed during the scan
}

// P2C is the power-of-two-choices policy: it draws two distinct candidates
// at random and sends the request to the one with the lower load Score
// (see Score for the formula and Compare for how missing signals are made
// neutral). Drawing two instead of scanning all keeps a stale signal from
// sending every request to the one backend it flatters, and the worst
// backend by score never gets a request while two or more candidates are
// left.
//
// When the batch size of every candidate is known (estimated from its
// metrics), the two are drawn among the candidates with a free batch slot
// (fewer requests in flight than its batch and, while its metrics are
// fresh, nothing queued), if some have one and some do not — the filter-then-score scheme of the Kubernetes Gateway API
// Inference Extension's endpoint picker
// (https://github.com/kubernetes-sigs/gateway-api-inference-extension),
// here with no threshold to tune: a request that can start at once on a
// slower backend does not wait in a faster one's queue because the draw
// happened to pair two full ones. Reading a candidate's signals is a few
// atomic loads; nothing is allocated per pick for pools of up to 32
// candidates.
type P2C struct {
	// Clock tells the age of metrics and decays latency estimates; nil
	// means the real clock. New sets it to Options.Clock.
	Clock clock.PassiveClock
	// MaxAge is the age beyond which a backend's metrics are stale; 0 means
	// DefaultMetricsMaxAge. New sets it to Options.MetricsMaxAge.
	MaxAge time.Duration
	// Decay is the peak-EWMA time constant; 0 means DefaultLatencyDecay.
	// New sets it to Options.LatencyDecay.
	Decay time.Duration
	// Rand returns a uniform number in [0, n); nil means math/rand/v2.
	Rand func(n int) int
}

// Pick implements Policy.
func (p *P2C) Pick(cands []*Upstream, _ *http.Request) *Upstream {
	n := len(cands)
	if n == 1 {
		return cands[0]
	}
	draw := p.Rand
	if draw == nil {
		draw = rand.IntN
	}
	var now time.Time
	if p.Clock != nil {
		now = p.Clock.Now()
	} else {
		now = time.Now()
	}
	maxAge, decay := p.MaxAge, p.Decay
	if maxAge <= 0 {
		maxAge = DefaultMetricsMaxAge
	}
	if decay <= 0 {
		decay = DefaultLatencyDecay
	}
	// Whether a candidate has a free slot needs no latency: the full Load
	// (two exponentials) is computed for the two drawn only.
	var buf [32]uint8
	slots := buf[:0]
	if n > len(buf) {
		slots = make([]uint8, 0, n)
	}
	for _, u := range cands {
		slots = append(slots, u.slot(now, maxAge))
	}
	return cands[p2cChoose(slots, func(i int) Load { return cands[i].Load(now, maxAge, decay) }, draw)]
}

// Slot states of a candidate for P2C's filter.
const (
	slotUnknown uint8 = iota // no fresh metrics with a batch size
	slotFull                 // queueing, or as many in flight as its batch
	slotFree                 // can start one more request at once
)

// slot tells whether u can start one more request at once (see hasSlot).
func (u *Upstream) slot(now time.Time, maxAge time.Duration) uint8 {
	l := Load{InFlight: u.inflight.Load(), Concurrency: math.Float64frombits(u.concBits.Load())}
	if m := u.ext.Load(); m != nil && m.Has&loadmetrics.FieldQueueDepth != 0 && m.Fresh(now, maxAge) {
		l.Queue, l.Fresh = m.QueueDepth, true
	}
	return hasSlot(l)
}

// hasSlot is the slot state of a backend with load l: unknown without a
// batch size estimate; free if it runs fewer requests from here than its
// batch and, if its metrics are fresh, queues nothing; else full. Pure.
func hasSlot(l Load) uint8 {
	if l.Concurrency <= 0 {
		return slotUnknown
	}
	if float64(l.InFlight)+1 <= l.Concurrency && (!l.Fresh || l.Queue < 1) {
		return slotFree
	}
	return slotFull
}

// p2cChoose returns the index P2C picks among len(slots) ≥ 2 candidates,
// given their slot states, their loads (load(i), asked for the two drawn
// only) and draw(n) uniform in [0, n): two distinct indexes among the
// candidates with a free slot if that is known of all and true of some but
// not all, else among all; the better of the two by Compare, the first
// drawn on a tie. Pure given load and draw.
func p2cChoose(slots []uint8, load func(int) Load, draw func(int) int) int {
	n := len(slots)
	free := 0
	for _, s := range slots {
		if s == slotUnknown {
			free = -1
			break
		}
		if s == slotFree {
			free++
		}
	}
	pool, nth := n, func(k int) int { return k }
	if free > 0 && free < n {
		if free == 1 {
			return nthFree(slots, 0)
		}
		pool, nth = free, func(k int) int { return nthFree(slots, k) }
	}
	i := draw(pool)
	j := draw(pool - 1)
	if j >= i {
		j++
	}
	a, b := nth(i), nth(j)
	if Compare(load(a), load(b)) <= 0 {
		return a
	}
	return b
}

// nthFree returns the index of the k-th (from 0) free slot.
func nthFree(slots []uint8, k int) int {
	for i, s := range slots {
		if s == slotFree {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return 0 // unreachable for k below the number of free ones
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
