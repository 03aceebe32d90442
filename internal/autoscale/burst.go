package autoscale

import (
	"fmt"
	"slices"
	"time"
)

// The burst recommender keeps standing capacity for the bursts seen
// recently. When bursts are shorter than the cold start, no reactive
// scale-up arrives in time for the burst that triggers it; what serves a
// burst is capacity that was already there. Bursts cluster in time (a busy
// afternoon has several), so the bursts of the last hours say how much
// capacity the next ones will need. The recommender averages the load per
// bucket (1 min by default), keeps the buckets of a trailing window (8 h),
// and provisions for the load-weighted quantile of those buckets: with
// quantile 0.99 the smallest bucket load such that the buckets above it
// carried at most 1 % of the window's load. Weighting by load targets the
// share of requests (an SLO counts requests, and a burst minute carries
// many), not the share of time. The floor rises as soon as a burst bucket
// closes and falls once the burst has left the window (subject to the
// scale-down stabilisation like every other recommendation).

// BurstBucket is the mean load of one bucket of the burst window.
type BurstBucket struct {
	// Start of the bucket (the observation's time truncated to the bucket
	// length, as time.Time.Truncate does).
	Start time.Time `json:"start"`
	// Load is the mean of the observations that fell in the bucket.
	Load float64 `json:"load"`
}

// BurstState is the burst recommender's memory. While the metric is
// missing or stale the recommender keeps speaking from the buckets it has
// (they are history, not a current reading); buckets simply do not form
// for the gap.
type BurstState struct {
	// BucketSeconds identifies the layout; state saved under another
	// bucket length is discarded on import.
	BucketSeconds int64 `json:"bucketSeconds"`
	// Buckets are the completed buckets within the window, oldest first.
	Buckets []BurstBucket `json:"buckets,omitempty"`
	// Open is the bucket being filled: its start, the sum and the number
	// of its observations.
	OpenStart time.Time `json:"openStart,omitzero"`
	OpenSum   float64   `json:"openSum,omitempty"`
	OpenCount int       `json:"openCount,omitempty"`
	// FedUntil is the newest observation folded in.
	FedUntil time.Time `json:"fedUntil,omitzero"`
}

// burst is a BurstSpec resolved.
type burst struct {
	metric   metric
	target   float64 // load per instance
	quantile float64
	window   time.Duration
	bucket   time.Duration
}

func (b *burst) emptyState() *BurstState {
	return &BurstState{BucketSeconds: int64(b.bucket / time.Second)}
}

// feed folds the observations of the burst metric taken after FedUntil
// and no later than now into the open bucket, closes the buckets that have
// ended by now and drops those that have left the window. It reports
// whether the completed buckets changed.
func (b *burst) feed(st *BurstState, obs []Observation, now time.Time) bool {
	var fresh []Observation
	for _, o := range obs {
		if o.Metric == b.metric.name && valid(o.Value) && o.At.After(st.FedUntil) && !o.At.After(now) {
			fresh = append(fresh, o)
		}
	}
	slices.SortStableFunc(fresh, func(x, y Observation) int { return x.At.Compare(y.At) })
	changed := false
	for _, o := range fresh {
		if o.At.Equal(st.FedUntil) {
			continue // a duplicate of the newest
		}
		start := o.At.Truncate(b.bucket)
		if st.OpenCount > 0 && !start.Equal(st.OpenStart) {
			changed = b.close(st) || changed
		}
		if st.OpenCount == 0 {
			st.OpenStart = start
		}
		st.OpenSum += o.Value
		st.OpenCount++
		st.FedUntil = o.At
	}
	if st.OpenCount > 0 && !now.Before(st.OpenStart.Add(b.bucket)) {
		changed = b.close(st) || changed
	}
	cut := 0
	for cut < len(st.Buckets) && !st.Buckets[cut].Start.Add(b.bucket).After(now.Add(-b.window)) {
		cut++
	}
	if cut > 0 {
		st.Buckets = slices.Delete(st.Buckets, 0, cut)
		changed = true
	}
	return changed
}

// close moves the open bucket to the completed ones.
func (b *burst) close(st *BurstState) bool {
	if st.OpenCount == 0 {
		return false
	}
	st.Buckets = append(st.Buckets, BurstBucket{Start: st.OpenStart, Load: st.OpenSum / float64(st.OpenCount)})
	st.OpenStart, st.OpenSum, st.OpenCount = time.Time{}, 0, 0
	return true
}

// weightedQuantile returns the smallest load v of loads such that the
// loads up to and including v (sorted) carry at least q of the total load.
// q is in (0, 1]; q = 1 gives the maximum. It returns 0 without load.
func weightedQuantile(loads []float64, q float64) float64 {
	s := slices.Clone(loads)
	slices.Sort(s)
	total := 0.0
	for _, v := range s {
		total += v
	}
	if !(total > 0) || len(s) == 0 {
		return 0
	}
	need := q * total * (1 - 1e-12)
	acc := 0.0
	for _, v := range s {
		acc += v
		if acc >= need {
			return v
		}
	}
	return s[len(s)-1]
}

// burstResult is the burst recommender's say.
type burstResult struct {
	ok       bool
	replicas int32
	value    float64
}

// recommendBurst feeds the window and recommends the floor.
func (a *Autoscaler) recommendBurst(in []Observation, now time.Time, d *Decision) (res burstResult) {
	b := a.cfg.burst
	if b == nil {
		return res
	}
	if b.feed(a.st.Burst, in, now) || !a.burstCached {
		loads := make([]float64, len(a.st.Burst.Buckets))
		for i, x := range a.st.Burst.Buckets {
			loads[i] = x.Load
		}
		a.burstQ, a.burstCached = weightedQuantile(loads, b.quantile), true
	}
	prop := Proposal{Source: SourceBurst, Name: b.metric.name}
	n := len(a.st.Burst.Buckets)
	if n == 0 {
		prop.Abstained, prop.Reason = true, fmt.Sprintf("no completed %s bucket yet", b.bucket)
		d.Proposals = append(d.Proposals, prop)
		return res
	}
	res.ok, res.value = true, a.burstQ
	res.replicas = ceilReplicas(a.burstQ / b.target)
	prop.Value, prop.Replicas = res.value, res.replicas
	prop.Reason = b.describe(res.value, res.replicas, n)
	d.Proposals = append(d.Proposals, prop)
	return res
}

// describe says what the burst recommender saw and wants.
func (b *burst) describe(v float64, replicas int32, buckets int) string {
	return fmt.Sprintf("%s load-weighted q%g over the last %s (%d buckets of %s) is %.4g; at %.4g per instance that needs %d",
		b.metric.name, b.quantile, b.window, buckets, b.bucket, v, b.target, replicas)
}
