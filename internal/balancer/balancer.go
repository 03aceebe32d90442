// Package balancer turns inference signals into backend weights for an
// AIBalancer's strategy (seed 002): ResourceBased steers GPU utilisation
// toward a target, PerformanceBased favours low latency, ModelBased splits
// traffic between model versions, LeastLoad favours short queues. Pure:
// the controller gathers the signals and applies the weights.
//
// Unlike the seed, weights never come from one signal alone when more are
// fresh, a missing or stale signal gives a backend the neutral weight (never
// zero, never everything to one backend), and every weight keeps the floor.
package balancer

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Strategy names, as in the AIBalancer API.
const (
	ResourceBased    = "ResourceBased"
	PerformanceBased = "PerformanceBased"
	ModelBased       = "ModelBased"
	LeastLoad        = "LeastLoad"
)

// MaxWeight is the weight of the best backend; others are scaled below it.
const MaxWeight = 100

// Backend is one backend's signals. A nil signal is unknown.
type Backend struct {
	ID      string
	Version string
	// GPUUtil is 0..1.
	GPUUtil *float64
	// LatencyMs is a recent latency (TTFT or end-to-end) in milliseconds.
	LatencyMs *float64
	// Queue is requests waiting; InFlight requests running.
	Queue    *float64
	InFlight *float64
	// At is when the signals were read.
	At time.Time
}

// Spec is what the strategy needs.
type Spec struct {
	Strategy string
	// Target: GPU utilisation percent (ResourceBased) or latency ms
	// (PerformanceBased, optional).
	Target float64
	// Versions maps a model version to its share (ModelBased).
	Versions map[string]int32
	// MinWeight floors every backend's weight (the seed uses 10).
	MinWeight int32
	// MaxAge is how old signals may be; default 30 s.
	MaxAge time.Duration
}

// Weight is one backend's weight and why.
type Weight struct {
	ID     string `json:"id"`
	Weight int32  `json:"weight"`
	Reason string `json:"reason"`
}

// Compute returns the weights of bs under spec at now, sorted by ID. It
// reports how many backends had fresh signals.
func Compute(spec Spec, bs []Backend, now time.Time) ([]Weight, int, error) {
	switch spec.Strategy {
	case ResourceBased, PerformanceBased, LeastLoad, ModelBased:
	default:
		return nil, 0, fmt.Errorf("strategy %q: want %s, %s, %s or %s", spec.Strategy, ResourceBased, PerformanceBased, ModelBased, LeastLoad)
	}
	maxAge := spec.MaxAge
	if maxAge <= 0 {
		maxAge = 30 * time.Second
	}
	floor := float64(spec.MinWeight)
	if floor < 1 {
		floor = 1
	}
	if floor > MaxWeight {
		floor = MaxWeight
	}
	scores := make([]float64, len(bs))
	reasons := make([]string, len(bs))
	fresh := 0
	for i, b := range bs {
		stale := b.At.IsZero() || now.Sub(b.At) > maxAge
		var s float64
		var ok bool
		switch spec.Strategy {
		case ResourceBased:
			s, ok, reasons[i] = resourceScore(b, spec.Target)
		case PerformanceBased:
			s, ok, reasons[i] = latencyScore(b, spec.Target)
		case LeastLoad:
			s, ok, reasons[i] = loadScore(b)
		default: // ModelBased
			s, ok, reasons[i] = 1, true, "version "+b.Version
		}
		if spec.Strategy != ModelBased && (stale || !ok) {
			s, reasons[i] = math.NaN(), "no fresh signal: neutral weight"
		} else if spec.Strategy != ModelBased {
			fresh++
		}
		scores[i] = s
	}
	// Neutral = the mean of the known scores (or 1 when none is known), so
	// an unknown backend is treated as average, not as best or worst.
	var sum float64
	var n int
	for _, s := range scores {
		if !math.IsNaN(s) {
			sum += s
			n++
		}
	}
	neutral := 1.0
	if n > 0 {
		neutral = sum / float64(n)
	}
	for i := range scores {
		if math.IsNaN(scores[i]) {
			scores[i] = neutral
		}
	}
	if spec.Strategy == ModelBased {
		applyVersionSplit(scores, bs, spec.Versions)
	}
	best := 0.0
	for _, s := range scores {
		best = math.Max(best, s)
	}
	out := make([]Weight, len(bs))
	for i, b := range bs {
		w := floor
		if best > 0 {
			w = math.Max(floor, math.Round(MaxWeight*scores[i]/best))
		}
		out[i] = Weight{ID: b.ID, Weight: int32(w), Reason: reasons[i]}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if spec.Strategy == ModelBased {
		fresh = len(bs)
	}
	return out, fresh, nil
}

// resourceScore: headroom below the utilisation target; a backend above
// the target gets little (the floor), a cold one the most.
func resourceScore(b Backend, targetPct float64) (float64, bool, string) {
	if b.GPUUtil == nil {
		return 0, false, ""
	}
	if targetPct <= 0 {
		targetPct = 70
	}
	u := *b.GPUUtil * 100
	head := targetPct - u
	if head < 0 {
		head = 0
	}
	// Queue depth, when known, counts against the headroom too: a backend
	// at 60 % with a queue is busier than its utilisation says.
	if b.Queue != nil {
		head /= 1 + *b.Queue
	}
	return head + 1, true, fmt.Sprintf("GPU %.0f%% of target %.0f%%", u, targetPct)
}

// latencyScore: inverse latency; beyond the target the score drops faster.
func latencyScore(b Backend, targetMs float64) (float64, bool, string) {
	if b.LatencyMs == nil || *b.LatencyMs <= 0 {
		return 0, false, ""
	}
	l := *b.LatencyMs
	s := 1 / l
	if targetMs > 0 && l > targetMs {
		s *= targetMs / l
	}
	return s, true, fmt.Sprintf("latency %.0f ms", l)
}

// loadScore: inverse of queued plus running requests.
func loadScore(b Backend) (float64, bool, string) {
	if b.Queue == nil && b.InFlight == nil {
		return 0, false, ""
	}
	var q, r float64
	if b.Queue != nil {
		q = *b.Queue
	}
	if b.InFlight != nil {
		r = *b.InFlight
	}
	return 1 / (1 + 2*q + r), true, fmt.Sprintf("queue %.0f, running %.0f", q, r)
}

// applyVersionSplit gives each version its share, spread evenly over its
// backends; a backend of an unlisted version gets nothing (then the floor).
func applyVersionSplit(scores []float64, bs []Backend, versions map[string]int32) {
	count := map[string]int{}
	for _, b := range bs {
		count[b.Version]++
	}
	for i, b := range bs {
		share := float64(versions[b.Version])
		if count[b.Version] > 0 {
			scores[i] = share / float64(count[b.Version])
		}
	}
}
