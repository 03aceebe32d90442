package gateway

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// The prefix-aware policy's experimental spill decision
// (PrefixAware.Spill, SpillTime and SpillBoundedTime) by expected time to first
// token (see PrefixAware): a request waits on a backend for the requests
// ahead of it in the queue, then prefills the blocks of its prompt the
// backend does not hold, so
//
//	expected TTFT on c ≈ ahead(c) × slotTime + (n − matched(c)) × blockTime
//
// where n is the prompt's blocks, ahead(c) is how many requests the new one
// would wait behind for a batch slot there (the queue part of Score's work:
// max(Q, I+1−B, 0)), blockTime is the prefill time of one uncached block
// and slotTime the time one queued request ahead adds. Both are learnt from
// the gateway's own measurements (prefillModel): the time to first token of
// each streamed response against the uncached blocks and the requests
// ahead when it was picked. The constant part of the TTFT (base prefill,
// network) is the same on every backend and drops out of the comparison.

// PrefixSpill names the rule by which the prefix-aware policy lets a
// request leave the backend that holds its longest prefix.
type PrefixSpill int

const (
	// SpillBound (the default): the longest match among the candidates
	// whose load is within LoadBound × the least loaded one's.
	SpillBound PrefixSpill = iota
	// SpillTime (an experiment): the lowest expected TTFT over all
	// candidates once the times are learnt (prefixChooseTime). Greedy: it
	// queues on a holder until the wait equals a whole prefill elsewhere.
	SpillTime
	// SpillBoundedTime (an experiment): the lowest expected TTFT among the
	// candidates within the load bound (prefixChooseBoundedTime): the
	// bound still caps how long a holder's queue may grow, and inside it
	// a request that would queue behind its prefix takes a free slot
	// elsewhere when the blocks it must prefill there cost less than the
	// wait.
	SpillBoundedTime
)

// String returns the rule's name, as ParsePrefixSpill reads it.
func (s PrefixSpill) String() string {
	switch s {
	case SpillBound:
		return "bound"
	case SpillTime:
		return "time"
	case SpillBoundedTime:
		return "bounded-time"
	}
	return "unknown"
}

// ParsePrefixSpill reads a rule's name ("" is SpillBound). Pure.
func ParsePrefixSpill(name string) (PrefixSpill, error) {
	for _, s := range []PrefixSpill{SpillBound, SpillTime, SpillBoundedTime} {
		if name == s.String() {
			return s, nil
		}
	}
	if name == "" {
		return SpillBound, nil
	}
	return SpillBound, fmt.Errorf("prefix spill rule %q: want bound, time or bounded-time", name)
}

// prefixPick is what the policy knew of the backend it picked for one
// request, for prefillModel.observe once the first token came.
type prefixPick struct {
	uncached int     // blocks of the prompt the backend was not expected to hold
	ahead    float64 // requests it would wait behind; < 0: unknown
	ok       bool    // the pick had a prefix signal
}

// Learning constants of prefillModel. The memories are in samples (streamed
// responses), not time, so a quiet gateway keeps what it learnt.
const (
	// prefillMemory is the memory of the TTFT-against-uncached-blocks fit:
	// the prefill speed is a property of the hardware and model.
	prefillMemory = 1024
	// slotMemory is the memory of the wait per request ahead, which follows
	// the output lengths and batch sizes of the moment.
	slotMemory = 256
	// prefillMinSamples and slotMinSamples are the samples (of unqueued
	// and of queued picks) before the model is used; until then the
	// policy bounds load (LoadBound).
	prefillMinSamples = 32
	slotMinSamples    = 8
	// prefillMinSpread is the least spread (standard deviation) of the
	// uncached blocks among the unqueued samples for a slope: without
	// prompts of different uncached lengths the fit cannot tell prefill
	// from the constant part.
	prefillMinSpread = 4.0
)

// prefillModel learns blockTime and slotTime (see above) from the TTFT of
// streamed responses. Responses picked with nothing ahead fit
// ttft = base + blockTime × uncached by least squares with exponential
// forgetting; each response picked with requests ahead (ahead ≥ 1) gives
// one sample of its wait, (ttft − base − blockTime × uncached) / ahead,
// averaged into slotTime. Safe for concurrent use; the zero value is
// empty.
type prefillModel struct {
	mu sync.Mutex
	// Exponentially weighted sums of the unqueued samples: weight, x
	// (uncached blocks), y (TTFT seconds), x², xy.
	w, sx, sy, sxx, sxy float64
	n0                  int // unqueued samples seen
	base, block         float64
	hasFit              bool
	slot                float64 // EWMA of the wait per request ahead, seconds
	n1                  int     // queued samples seen
}

// observe adds the TTFT of a response picked as pick.
func (m *prefillModel) observe(pick prefixPick, ttft time.Duration) {
	if !pick.ok || pick.ahead < 0 || ttft <= 0 {
		return
	}
	y, x := ttft.Seconds(), float64(pick.uncached)
	m.mu.Lock()
	defer m.mu.Unlock()
	if pick.ahead < 1 {
		m.n0++
		f := 1 - 1.0/prefillMemory
		m.w, m.sx, m.sy, m.sxx, m.sxy = f*m.w+1, f*m.sx+x, f*m.sy+y, f*m.sxx+x*x, f*m.sxy+x*y
		if base, block, ok := fitLine(m.w, m.sx, m.sy, m.sxx, m.sxy); ok {
			m.base, m.block, m.hasFit = base, block, true
		}
		return
	}
	if !m.hasFit {
		return
	}
	wait := max(y-m.base-m.block*x, 0) / pick.ahead
	m.n1++
	a := max(1.0/slotMemory, 1/float64(m.n1)) // a plain mean until slotMemory samples
	m.slot += a * (wait - m.slot)
}

// times returns blockTime and slotTime in seconds, and whether both are
// known.
func (m *prefillModel) times() (block, slot float64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.hasFit || m.n0 < prefillMinSamples || m.n1 < slotMinSamples || !(m.slot > 0) {
		return 0, 0, false
	}
	return m.block, m.slot, true
}

// fitLine is the least-squares line y = a + b·x through weighted sums
// (weight w, Σx, Σy, Σx², Σxy); false if the x spread is below
// prefillMinSpread or the slope is not positive. Pure.
func fitLine(w, sx, sy, sxx, sxy float64) (a, b float64, ok bool) {
	if w <= 0 {
		return 0, 0, false
	}
	mx, my := sx/w, sy/w
	varx := sxx/w - mx*mx
	if !(varx >= prefillMinSpread*prefillMinSpread) {
		return 0, 0, false
	}
	b = (sxy/w - mx*my) / varx
	if !(b > 0) || math.IsInf(b, 0) {
		return 0, 0, false
	}
	return my - b*mx, b, true
}

// ahead is how many requests one more request would wait behind for a
// batch slot on a backend with load l, as Score counts them: max(Q, I+1−B,
// 0) with Q only if basis.Metrics; −1 if the batch size B is unknown. Pure.
func ahead(l Load, basis Basis) float64 {
	if !basis.Concurrency || l.Concurrency <= 0 {
		return -1
	}
	var q float64
	if basis.Metrics {
		q = max(l.Queue, 0)
	}
	return max(q, float64(l.InFlight)+1-max(l.Concurrency, 1), 0)
}

// prefixChooseTime returns the index of the candidate with the lowest
// expected TTFT for a prompt of n blocks (see above), blockTime and
// slotTime in seconds; on a tie, the longest match, then the lowest cost
// (or the highest rank where nothing matched), as in better. Every
// candidate's ahead must be known (≥ 0). Pure.
func prefixChooseTime(cs []prefixCand, n int, blockTime, slotTime float64) int {
	best, bestT := -1, 0.0
	for i, c := range cs {
		t := c.ahead*slotTime + float64(max(n-c.matched, 0))*blockTime
		if best < 0 || t < bestT || t == bestT && better(c, cs[best]) {
			best, bestT = i, t
		}
	}
	return best
}

// prefixChooseBoundedTime returns the index of the candidate with the
// lowest expected TTFT (as prefixChooseTime) among those whose load is at
// most bound × the lowest (as prefixChoose); ties as in better. Every
// candidate's ahead must be known (≥ 0). Pure.
func prefixChooseBoundedTime(cs []prefixCand, bound float64, n int, blockTime, slotTime float64) int {
	minLoad := cs[0].load
	for _, c := range cs[1:] {
		minLoad = min(minLoad, c.load)
	}
	limit := bound * minLoad
	best, bestT := -1, 0.0
	for i, c := range cs {
		if c.load > limit && c.load != minLoad {
			continue
		}
		t := c.ahead*slotTime + float64(max(n-c.matched, 0))*blockTime
		if best < 0 || t < bestT || t == bestT && better(c, cs[best]) {
			best, bestT = i, t
		}
	}
	return best
}
