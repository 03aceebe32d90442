package balancer

import (
	"reflect"
	"testing"
	"time"
)

func f(v float64) *float64 { return &v }

func TestCompute(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old := now.Add(-time.Minute)
	cases := []struct {
		name  string
		spec  Spec
		bs    []Backend
		want  map[string]int32
		fresh int
	}{
		{
			name: "resource: the cold backend gets the most, the hot one the floor",
			spec: Spec{Strategy: ResourceBased, Target: 70, MinWeight: 10},
			bs: []Backend{{ID: "a", GPUUtil: f(0.10), At: now}, {ID: "b", GPUUtil: f(0.40), At: now},
				{ID: "c", GPUUtil: f(0.95), At: now}},
			want:  map[string]int32{"a": 100, "b": 51, "c": 10},
			fresh: 3,
		},
		{
			name: "resource: a queue counts against headroom",
			spec: Spec{Strategy: ResourceBased, Target: 70, MinWeight: 10},
			bs: []Backend{{ID: "a", GPUUtil: f(0.30), Queue: f(0), At: now},
				{ID: "b", GPUUtil: f(0.30), Queue: f(3), At: now}},
			// a: 40+1 = 41; b: 40/(1+3)+1 = 11 → 100*11/41 = 26.8
			want:  map[string]int32{"a": 100, "b": 27},
			fresh: 2,
		},
		{
			name: "stale signals give the neutral (mean) weight, never zero",
			spec: Spec{Strategy: ResourceBased, Target: 70, MinWeight: 10},
			bs: []Backend{{ID: "a", GPUUtil: f(0.10), At: now}, {ID: "b", GPUUtil: f(0.60), At: now},
				{ID: "c", GPUUtil: f(0.0), At: old}},
			want:  map[string]int32{"a": 100, "b": 18, "c": 59},
			fresh: 2,
		},
		{
			name:  "no signal at all: everyone equal",
			spec:  Spec{Strategy: PerformanceBased, MinWeight: 10},
			bs:    []Backend{{ID: "a"}, {ID: "b"}},
			want:  map[string]int32{"a": 100, "b": 100},
			fresh: 0,
		},
		{
			name: "performance: inverse latency, penalised past the target",
			spec: Spec{Strategy: PerformanceBased, Target: 200, MinWeight: 10},
			bs: []Backend{{ID: "a", LatencyMs: f(100), At: now}, {ID: "b", LatencyMs: f(200), At: now},
				{ID: "c", LatencyMs: f(400), At: now}},
			want:  map[string]int32{"a": 100, "b": 50, "c": 13},
			fresh: 3,
		},
		{
			name: "least load: queue counts double",
			spec: Spec{Strategy: LeastLoad, MinWeight: 5},
			bs: []Backend{{ID: "a", Queue: f(0), InFlight: f(1), At: now},
				{ID: "b", Queue: f(2), InFlight: f(3), At: now}},
			want:  map[string]int32{"a": 100, "b": 25},
			fresh: 2,
		},
		{
			name: "model versions split 90/10 across their backends",
			spec: Spec{Strategy: ModelBased, Versions: map[string]int32{"v1": 90, "v2": 10}, MinWeight: 1},
			bs: []Backend{{ID: "a", Version: "v1"}, {ID: "b", Version: "v1"}, {ID: "c", Version: "v2"},
				{ID: "d", Version: "v3"}},
			want:  map[string]int32{"a": 100, "b": 100, "c": 22, "d": 1},
			fresh: 4,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws, fresh, err := Compute(tc.spec, tc.bs, now)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int32{}
			for _, w := range ws {
				got[w.ID] = w.Weight
				if w.Weight < tc.spec.MinWeight || w.Weight > MaxWeight {
					t.Errorf("%s: weight %d outside [%d, %d]", w.ID, w.Weight, tc.spec.MinWeight, MaxWeight)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("weights = %v, want %v", got, tc.want)
			}
			if fresh != tc.fresh {
				t.Errorf("fresh = %d, want %d", fresh, tc.fresh)
			}
		})
	}
	if _, _, err := Compute(Spec{Strategy: "Random"}, nil, now); err == nil {
		t.Error("unknown strategy accepted")
	}
}
