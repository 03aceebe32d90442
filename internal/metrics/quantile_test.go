package metrics

import (
	"math"
	"testing"
)

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	// The example of ClickHouse's quantilePrometheusHistogram, which follows
	// PromQL: bounds 0, 0.5, 1, +Inf with cumulative counts 6, 11, 14, 19;
	// the median is 0.35.
	example := []Bucket{{0, 6}, {0.5, 11}, {1, 14}, {inf, 19}}
	tests := []struct {
		name    string
		q       float64
		buckets []Bucket
		want    float64 // NaN: want NaN
	}{
		{"median of the documented example", 0.5, example, 0.35},
		{"rank in the first bucket with bound 0", 0.1, example, 0},
		{"rank in +Inf bucket takes the largest finite bound", 0.99, example, 1},
		{"interpolates from 0 in the first bucket", 0.5, []Bucket{{1, 10}, {2, 10}, {inf, 10}}, 0.5},
		{"interpolates inside a later bucket", 0.75, []Bucket{{1, 10}, {2, 20}, {inf, 20}}, 1.5},
		{"q = 0 is the lower bound", 0, []Bucket{{1, 10}, {2, 20}, {inf, 20}}, 0},
		{"q = 1 is the bound of the last populated bucket", 1, []Bucket{{1, 10}, {2, 20}, {inf, 20}}, 2},
		{"unsorted input is sorted", 0.75, []Bucket{{inf, 20}, {2, 20}, {1, 10}}, 1.5},
		{"same bounds add up", 0.5, []Bucket{{1, 5}, {1, 5}, {2, 10}, {2, 10}, {inf, 10}, {inf, 10}}, 1},
		{"non-monotonic counts are flattened", 0.75, []Bucket{{1, 10}, {2, 8}, {3, 20}, {inf, 20}}, 2.5},
		{"no observations", 0.5, []Bucket{{1, 0}, {inf, 0}}, math.NaN()},
		{"no +Inf bucket", 0.5, []Bucket{{1, 3}, {2, 4}}, math.NaN()},
		{"only the +Inf bucket", 0.5, []Bucket{{inf, 4}}, math.NaN()},
		{"empty", 0.5, nil, math.NaN()},
		{"q below 0", -0.1, example, math.Inf(-1)},
		{"q above 1", 1.1, example, math.Inf(1)},
		{"q NaN", math.NaN(), example, math.NaN()},
		{"NaN bucket ignored", 0.5, []Bucket{{math.NaN(), 4}, {1, 10}, {inf, 10}}, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]Bucket(nil), tt.buckets...)
			got := HistogramQuantile(tt.q, tt.buckets)
			switch {
			case math.IsNaN(tt.want):
				if !math.IsNaN(got) {
					t.Fatalf("got %v, want NaN", got)
				}
			case math.Abs(got-tt.want) > 1e-9 && got != tt.want:
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range before {
				if before[i] != tt.buckets[i] && !math.IsNaN(before[i].UpperBound) {
					t.Fatalf("input modified: %v -> %v", before, tt.buckets)
				}
			}
		})
	}
}

func TestBucketDelta(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name      string
		prev, cur []Bucket
		want      []Bucket
	}{
		{"first scrape: everything is new", nil, []Bucket{{1, 3}, {inf, 4}}, []Bucket{{1, 3}, {inf, 4}}},
		{"difference per bucket", []Bucket{{1, 3}, {inf, 4}}, []Bucket{{1, 5}, {inf, 9}}, []Bucket{{1, 2}, {inf, 5}}},
		{"nothing new", []Bucket{{1, 3}, {inf, 4}}, []Bucket{{1, 3}, {inf, 4}}, []Bucket{{1, 0}, {inf, 0}}},
		{"counter reset: current taken whole", []Bucket{{1, 30}, {inf, 40}}, []Bucket{{1, 1}, {inf, 2}}, []Bucket{{1, 1}, {inf, 2}}},
		{"different bounds: current taken whole", []Bucket{{2, 1}, {inf, 1}}, []Bucket{{1, 5}, {inf, 9}}, []Bucket{{1, 5}, {inf, 9}}},
		{"different length: current taken whole", []Bucket{{inf, 1}}, []Bucket{{1, 5}, {inf, 9}}, []Bucket{{1, 5}, {inf, 9}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := bucketDelta(tt.prev, tt.cur)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
			if len(tt.cur) > 0 {
				got[0].Count = -42
				if tt.cur[0].Count == -42 {
					t.Fatal("result aliases cur")
				}
			}
		})
	}
}
