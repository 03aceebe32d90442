package gateway

import (
	"fmt"
	"testing"
)

type upSpec struct {
	weight   int64
	inflight int64
}

func mkUps(specs ...upSpec) []*Upstream {
	ups := make([]*Upstream, len(specs))
	for i, s := range specs {
		ups[i] = newUpstream(fmt.Sprint(i), "p", fmt.Sprintf("127.0.0.1:%d", 1000+i), s.weight, true)
		ups[i].inflight.Store(s.inflight)
	}
	return ups
}

func TestLeastRequestPick(t *testing.T) {
	tests := []struct {
		name string
		ups  []upSpec
		rand []int64 // successive results of Rand; nil: Rand must not be called
		want int
	}{
		{"single", []upSpec{{100, 7}}, nil, 0},
		{"fewest in flight", []upSpec{{100, 3}, {100, 1}, {100, 2}}, nil, 1},
		{"idle wins over busy", []upSpec{{100, 1}, {100, 0}}, nil, 1},
		// (in+1)/w: 2/200 < 2/100.
		{"weight doubles capacity", []upSpec{{100, 1}, {200, 1}}, nil, 1},
		// 3/200 > 1/100: the heavy backend has more than its share.
		{"weighted share exceeded", []upSpec{{100, 0}, {200, 2}}, nil, 0},
		// 2/200 == 1/100: tie, broken by Rand in proportion to weight
		// (running tie weight 300; Rand < 200 takes the second).
		{"weighted tie takes newcomer", []upSpec{{100, 0}, {200, 1}}, []int64{150}, 1},
		{"weighted tie keeps incumbent", []upSpec{{100, 0}, {200, 1}}, []int64{250}, 0},
		// Three-way tie: reservoir draws over 200 then 300.
		{"three-way tie first", []upSpec{{100, 0}, {100, 0}, {100, 0}}, []int64{150, 250}, 0},
		{"three-way tie second", []upSpec{{100, 0}, {100, 0}, {100, 0}}, []int64{50, 250}, 1},
		{"three-way tie third", []upSpec{{100, 0}, {100, 0}, {100, 0}}, []int64{50, 20}, 2},
		{"tie after a better one resets reservoir", []upSpec{{100, 5}, {100, 0}, {100, 0}}, []int64{150}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ups := mkUps(tt.ups...)
			draws := tt.rand
			p := &LeastRequest{Rand: func(n int64) int64 {
				if len(draws) == 0 {
					t.Fatalf("unexpected Rand(%d)", n)
				}
				v := draws[0]
				draws = draws[1:]
				if v >= n {
					t.Fatalf("test draw %d out of [0,%d)", v, n)
				}
				return v
			}}
			got := p.Pick(ups, nil)
			if got != ups[tt.want] {
				t.Fatalf("picked %s, want %d", got.ID(), tt.want)
			}
			if len(draws) != 0 {
				t.Fatalf("%d draws left unused", len(draws))
			}
		})
	}
}

func TestLeastRequestTieDistribution(t *testing.T) {
	// (0+1)/100 == (1+1)/200: tied, so picks follow weight 1:2.
	ups := mkUps(upSpec{100, 0}, upSpec{200, 1})
	p := &LeastRequest{}
	counts := map[string]int{}
	const n = 40000
	for range n {
		counts[p.Pick(ups, nil).ID()]++
	}
	if c := counts["1"]; c < n*62/100 || c > n*71/100 {
		t.Fatalf("weight-200 backend got %d of %d ties, want ~2/3", c, n)
	}
}

func TestRoundRobinPick(t *testing.T) {
	tests := []struct {
		name    string
		weights []int64
		want    string // sequence of picked indexes
	}{
		{"equal", []int64{1, 1, 1}, "012012012"},
		{"single", []int64{5}, "000"},
		// nginx's example: weights 5,1,1 → a a b a c a a.
		{"smooth weighted", []int64{5, 1, 1}, "0010200" + "0010200"},
		{"two to one", []int64{2, 1}, "010010"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs := make([]upSpec, len(tt.weights))
			for i, w := range tt.weights {
				specs[i] = upSpec{weight: w}
			}
			ups := mkUps(specs...)
			p := &RoundRobin{}
			got := ""
			for range len(tt.want) {
				got += p.Pick(ups, nil).ID()
			}
			if got != tt.want {
				t.Fatalf("sequence %s, want %s", got, tt.want)
			}
		})
	}
}

func TestNewPolicy(t *testing.T) {
	for name, want := range map[string]string{
		"": "*gateway.PrefixAware", "prefix-aware": "*gateway.PrefixAware", "least-cost": "*gateway.LeastCost",
		"p2c": "*gateway.P2C", "least-request": "*gateway.LeastRequest",
		"round-robin": "*gateway.RoundRobin", "weighted": "*gateway.Weighted",
	} {
		p, err := NewPolicy(name)
		if err != nil || fmt.Sprintf("%T", p) != want {
			t.Errorf("NewPolicy(%q) = %T, %v; want %s", name, p, err, want)
		}
	}
	if _, err := NewPolicy("random"); err == nil {
		t.Error("NewPolicy(random) succeeded")
	}
}

// BenchmarkPick measures one pick among 8 candidates per policy; none may
// allocate.
func BenchmarkPick(b *testing.B) {
	specs := make([]upSpec, 8)
	for i := range specs {
		specs[i] = upSpec{weight: 100, inflight: int64(i % 3)}
	}
	for _, name := range PolicyNames {
		b.Run(name, func(b *testing.B) {
			p, err := NewPolicy(name)
			if err != nil {
				b.Fatal(err)
			}
			ups := mkUps(specs...)
			b.ReportAllocs()
			for b.Loop() {
				p.Pick(ups, nil)
			}
		})
	}
}
