package metrics

import (
	"math"
	"slices"
)

// Bucket is one cumulative bucket of a classic Prometheus histogram: Count
// observations were at most UpperBound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// HistogramQuantile estimates the q-quantile (0 ≤ q ≤ 1) of the
// observations in cumulative buckets the way PromQL's histogram_quantile
// does for classic histograms
// (https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile):
// buckets sorted by upper bound, a +Inf bucket required (NaN without one),
// counts made monotonic, linear interpolation inside the bucket the rank
// falls in with 0 as the lower bound of the first bucket, and the largest
// finite upper bound when the rank falls in the +Inf bucket. It returns NaN
// when there are no observations or fewer than two buckets, -Inf for q < 0
// and +Inf for q > 1. buckets is not modified. Pure.
func HistogramQuantile(q float64, buckets []Bucket) float64 {
	switch {
	case math.IsNaN(q):
		return math.NaN()
	case q < 0:
		return math.Inf(-1)
	case q > 1:
		return math.Inf(1)
	}
	bs := slices.Clone(buckets)
	slices.SortStableFunc(bs, func(a, b Bucket) int {
		switch {
		case a.UpperBound < b.UpperBound:
			return -1
		case a.UpperBound > b.UpperBound:
			return 1
		}
		return 0
	})
	// Buckets with the same bound (from several series) add up.
	out := bs[:0]
	for _, b := range bs {
		if math.IsNaN(b.UpperBound) || math.IsNaN(b.Count) {
			continue
		}
		if n := len(out); n > 0 && out[n-1].UpperBound == b.UpperBound {
			out[n-1].Count += b.Count
			continue
		}
		out = append(out, b)
	}
	bs = out
	if len(bs) < 2 || !math.IsInf(bs[len(bs)-1].UpperBound, 1) {
		return math.NaN()
	}
	for i := 1; i < len(bs); i++ {
		if bs[i].Count < bs[i-1].Count {
			bs[i].Count = bs[i-1].Count
		}
	}
	total := bs[len(bs)-1].Count
	if !(total > 0) {
		return math.NaN()
	}
	rank := q * total
	b, _ := slices.BinarySearchFunc(bs[:len(bs)-1], rank, func(x Bucket, r float64) int {
		if x.Count >= r {
			return 1 // x is at or after the first bucket reaching the rank
		}
		return -1
	})
	if b == len(bs)-1 {
		return bs[len(bs)-2].UpperBound
	}
	if b == 0 && bs[0].UpperBound <= 0 {
		return bs[0].UpperBound
	}
	start, end, count := 0.0, bs[b].UpperBound, bs[b].Count
	if b > 0 {
		start = bs[b-1].UpperBound
		count -= bs[b-1].Count
		rank -= bs[b-1].Count
	}
	if count <= 0 {
		return end
	}
	return start + (end-start)*(rank/count)
}

// bucketDelta returns the observations made between two scrapes of the same
// cumulative histogram: cur minus prev bucket by bucket. If prev is missing,
// has other bounds, or any count went down (the backend restarted and its
// counters reset), every observation in cur is new and cur is returned.
// Pure; the result does not alias its arguments.
func bucketDelta(prev, cur []Bucket) []Bucket {
	out := slices.Clone(cur)
	if len(prev) != len(cur) {
		return out
	}
	for i := range cur {
		if prev[i].UpperBound != cur[i].UpperBound || prev[i].Count > cur[i].Count {
			return slices.Clone(cur)
		}
		out[i].Count = cur[i].Count - prev[i].Count
	}
	return out
}
