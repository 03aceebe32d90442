package fairq

import (
	"math/rand/v2"
	"testing"
)

// drain dispatches every waiting request and returns their tenants in order.
func drain(q *Queue) []string {
	var out []string
	for {
		h, ok := q.Head()
		if !ok {
			return out
		}
		if !q.Dispatch(h.ID) {
			panic("head not waiting")
		}
		out = append(out, h.Tenant)
	}
}

func join(ss []string) string {
	s := ""
	for _, x := range ss {
		s += x
	}
	return s
}

func TestOrder(t *testing.T) {
	type push struct {
		tenant string
		weight int
		prio   Priority
	}
	p := func(tenant string, n, weight int, prio Priority) []push {
		var out []push
		for range n {
			out = append(out, push{tenant, weight, prio})
		}
		return out
	}
	cat := func(xs ...[]push) []push {
		var out []push
		for _, x := range xs {
			out = append(out, x...)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		pushes []push
		want   string
	}{
		{"one tenant is FIFO", p("a", 5, 1, Normal), "aaaaa"},
		{"the default tenant is FIFO", p("", 3, 0, Normal), ""},
		{"a burst then a late tenant interleaves", cat(p("a", 6, 1, Normal), p("b", 3, 1, Normal)), "abababaaa"},
		{"weight 2 gets two for one", cat(p("a", 6, 2, Normal), p("b", 6, 1, Normal)), "aabaabaabbbb"},
		{"weight 3 against 1", cat(p("b", 4, 1, Normal), p("a", 6, 3, Normal)), "aaabaaabbb"},
		{"high before normal before low", cat(p("l", 2, 1, Low), p("n", 2, 1, Normal), p("h", 2, 1, High)), "hhnnll"},
		{"fair within a class, strict across", cat(p("a", 3, 1, Low), p("b", 2, 1, High), p("c", 2, 1, High)), "bcbcaaa"},
		{"a weight out of range is clamped", cat(p("a", 4, 5000, Normal), p("b", 2, -1, Normal)), "aaaabb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New(100)
			for i, x := range tc.pushes {
				if ok, _, shed := q.Push(Request{ID: uint64(i), Tenant: x.tenant, Weight: x.weight, Priority: x.prio}); !ok || shed {
					t.Fatalf("push %d refused or shed", i)
				}
			}
			got := drain(q)
			if tc.want == "" {
				if len(got) != len(tc.pushes) {
					t.Fatalf("got %d dispatches, want %d", len(got), len(tc.pushes))
				}
				return
			}
			if join(got) != tc.want {
				t.Errorf("order %q, want %q", join(got), tc.want)
			}
			if q.Len() != 0 || len(q.byID) != 0 {
				t.Errorf("left %d waiting", q.Len())
			}
		})
	}
}

func TestDefaultTenantFIFO(t *testing.T) {
	q := New(10)
	for i := range 5 {
		q.Push(Request{ID: uint64(i)})
	}
	q.Remove(2)
	var ids []uint64
	for {
		h, ok := q.Head()
		if !ok {
			break
		}
		q.Dispatch(h.ID)
		ids = append(ids, h.ID)
	}
	if len(ids) != 4 || ids[0] != 0 || ids[1] != 1 || ids[2] != 3 || ids[3] != 4 {
		t.Errorf("order %v, want [0 1 3 4]", ids)
	}
}

func TestShed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fill     []Request // fills a queue of len(fill)
		arrive   Request
		admitted bool
		shed     int64 // ID shed, -1: none
	}{
		{"the burst tenant's newest goes for a light tenant",
			[]Request{{ID: 1, Tenant: "a"}, {ID: 2, Tenant: "a"}, {ID: 3, Tenant: "a"}},
			Request{ID: 9, Tenant: "b"}, true, 3},
		{"the burst tenant's own arrival is refused",
			[]Request{{ID: 1, Tenant: "a"}, {ID: 2, Tenant: "a"}, {ID: 3, Tenant: "b"}},
			Request{ID: 9, Tenant: "a"}, false, -1},
		{"one tenant, FIFO: the arrival is refused",
			[]Request{{ID: 1}, {ID: 2}},
			Request{ID: 9}, false, -1},
		{"low goes first, even with a smaller finish tag",
			[]Request{{ID: 1, Tenant: "a", Priority: Low}, {ID: 2, Tenant: "b"}, {ID: 3, Tenant: "b"}},
			Request{ID: 9, Tenant: "c"}, true, 1},
		{"a low arrival into a full queue of normal is refused",
			[]Request{{ID: 1, Tenant: "a"}, {ID: 2, Tenant: "b"}},
			Request{ID: 9, Tenant: "c", Priority: Low}, false, -1},
		{"a high arrival sheds normal",
			[]Request{{ID: 1, Tenant: "a"}, {ID: 2, Tenant: "a"}},
			Request{ID: 9, Tenant: "a", Priority: High}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New(len(tc.fill))
			for _, r := range tc.fill {
				if ok, _, _ := q.Push(r); !ok {
					t.Fatalf("fill %d refused", r.ID)
				}
			}
			ok, shed, did := q.Push(tc.arrive)
			if ok != tc.admitted {
				t.Errorf("admitted %v, want %v", ok, tc.admitted)
			}
			switch {
			case tc.shed < 0 && did:
				t.Errorf("shed %d, want none", shed)
			case tc.shed >= 0 && (!did || shed != uint64(tc.shed)):
				t.Errorf("shed %d (%v), want %d", shed, did, tc.shed)
			}
			if q.Len() > q.Limit() {
				t.Errorf("len %d over limit %d", q.Len(), q.Limit())
			}
		})
	}
}

func TestShedDoesNotCharge(t *testing.T) {
	// A burst tenant whose newest requests are shed is not charged for
	// them: after the shedding it is not pushed further behind.
	q := New(2)
	q.Push(Request{ID: 1, Tenant: "a"})
	q.Push(Request{ID: 2, Tenant: "a"})
	if _, shed, _ := q.Push(Request{ID: 3, Tenant: "b"}); shed != 2 {
		t.Fatalf("shed %d, want a's newest (2)", shed)
	}
	q.Dispatch(1)                       // a's first; virtual time 1
	q.limit = 3                         // room for what follows
	q.Push(Request{ID: 5, Tenant: "a"}) // finish 2, had a paid for 2: 3
	q.Push(Request{ID: 6, Tenant: "c"}) // finish 2, after a's
	if got := join(drain(q)); got != "bac" {
		t.Errorf("order %q, want \"bac\"", got)
	}
}

func TestForgetsIdleFlows(t *testing.T) {
	q := New(10)
	for i := range 100 {
		q.Push(Request{ID: uint64(i), Tenant: string(rune('a' + i%26))})
		h, _ := q.Head()
		q.Dispatch(h.ID)
	}
	if n := len(q.class(Normal).flows); n > 1 {
		t.Errorf("%d flows kept with nothing waiting", n)
	}
}

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]Priority{"": Normal, "low": Low, "normal": Normal, "high": High} {
		if got, err := ParsePriority(in); err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"High", "urgent", " low"} {
		if _, err := ParsePriority(in); err == nil {
			t.Errorf("ParsePriority(%q): no error", in)
		}
	}
}

// checkWeights keeps every tenant backlogged (a tenant's requests are
// refilled as they are served, arriving at random) and checks that over n
// dispatches each got its weighted share within the SCFQ bound: for two
// backlogged flows i, j, |served_i/w_i - served_j/w_j| <= 1/w_i + 1/w_j
// (in requests over weights), plus one request of slack for the refill.
func checkWeights(t *testing.T, weights []int, n int, rng *rand.Rand) {
	q := New(len(weights) * 4)
	served := make([]int, len(weights))
	id := uint64(0)
	tenant := func(i int) string { return string(rune('a' + i)) }
	idx := map[string]int{}
	for i := range weights {
		idx[tenant(i)] = i
		for range 2 {
			id++
			if ok, _, _ := q.Push(Request{ID: id, Tenant: tenant(i), Weight: weights[i]}); !ok {
				t.Fatal("refused")
			}
		}
	}
	for range n {
		h, ok := q.Head()
		if !ok {
			t.Fatal("empty")
		}
		q.Dispatch(h.ID)
		i := idx[h.Tenant]
		served[i]++
		// Refill the served tenant, and sometimes another, in a random
		// order: every tenant keeps at least one request waiting.
		id++
		q.Push(Request{ID: id, Tenant: h.Tenant, Weight: weights[i]})
		if j := rng.IntN(len(weights)); rng.IntN(2) == 0 && q.Waiting()[tenant(j)] < 3 {
			id++
			q.Push(Request{ID: id, Tenant: tenant(j), Weight: weights[j]})
		}
	}
	for i := range weights {
		for j := range weights {
			wi, wj := float64(clampWeight(weights[i])), float64(clampWeight(weights[j]))
			gap := float64(served[i])/wi - float64(served[j])/wj
			if bound := 2/wi + 2/wj; gap > bound || -gap > bound {
				t.Fatalf("weights %v over %d dispatches: served %v; tenants %d and %d differ by %.3f normalised (bound %.3f)",
					weights, n, served, i, j, gap, bound)
			}
		}
	}
}

func TestWeightsHonoured(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, w := range [][]int{{1, 1}, {1, 10}, {3, 2, 1}, {1, 1, 1, 1, 1, 7}, {1000, 1}} {
		checkWeights(t, w, 2000, rng)
	}
}

// FuzzWeights checks the weighted shares on weights and an arrival order
// the fuzzer chooses, and the queue's invariants on any operations.
func FuzzWeights(f *testing.F) {
	f.Add([]byte{1, 1}, uint64(7))
	f.Add([]byte{1, 10, 3}, uint64(9))
	f.Add([]byte{255, 1, 0, 2}, uint64(1))
	f.Fuzz(func(t *testing.T, ws []byte, seed uint64) {
		if len(ws) < 2 || len(ws) > 8 {
			return
		}
		weights := make([]int, len(ws))
		for i, b := range ws {
			weights[i] = int(b)%20 + 1
		}
		checkWeights(t, weights, 500, rand.New(rand.NewPCG(seed, 3)))
	})
}

// FuzzOps runs random pushes, removals and dispatches and checks the
// invariants: the bound, the head is the least tag of the highest class,
// every ID once.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, uint8(3))
	f.Fuzz(func(t *testing.T, ops []byte, limit uint8) {
		q := New(int(limit%16) + 1)
		live := map[uint64]bool{}
		var id uint64
		for _, op := range ops {
			switch op % 4 {
			case 0, 1:
				id++
				ok, shed, did := q.Push(Request{ID: id, Tenant: string(rune('a' + op/4%4)), Weight: int(op / 16), Priority: Priority(op/4%3) + Low})
				if did {
					if !live[shed] {
						t.Fatalf("shed %d not waiting", shed)
					}
					delete(live, shed)
				}
				if ok {
					live[id] = true
				}
			case 2:
				if h, ok := q.Head(); ok {
					for p := h.Priority + 1; p <= High; p++ {
						if len(q.class(p).heap) > 0 {
							t.Fatalf("head of class %v while class %v waits", h.Priority, p)
						}
					}
					if !q.Dispatch(h.ID) {
						t.Fatal("head not dispatched")
					}
					delete(live, h.ID)
				}
			case 3:
				for x := range live {
					q.Remove(x)
					delete(live, x)
					break
				}
			}
			if q.Len() != len(live) || q.Len() > q.Limit() || len(q.byID) != q.Len() {
				t.Fatalf("len %d, live %d, limit %d", q.Len(), len(live), q.Limit())
			}
		}
	})
}

func TestHeadWhere(t *testing.T) {
	// Waiting, in order: a1 (high), a2 b1 a3 c1 (normal), d1 (low).
	q := New(16)
	id := uint64(0)
	push := func(tenant string, p Priority) {
		id++
		if ok, _, _ := q.Push(Request{ID: id, Tenant: tenant, Priority: p}); !ok {
			t.Fatalf("push %s refused", tenant)
		}
	}
	push("a", High)
	push("a", Normal)
	push("b", Normal)
	push("a", Normal)
	push("c", Normal)
	push("d", Low)
	for _, tc := range []struct {
		refuse string // tenants pass refuses
		want   string // the tenant of the head, "" for none
		wantID uint64
	}{
		{"", "a", 1},
		{"a", "b", 3},
		{"ab", "c", 5},
		{"abc", "d", 6},
		{"b", "a", 1},
		{"abcd", "", 0},
	} {
		asked := map[string]int{}
		h, ok := q.HeadWhere(func(r Request) bool {
			asked[r.Tenant+r.Priority.String()]++
			for _, c := range tc.refuse {
				if r.Tenant == string(c) {
					return false
				}
			}
			return true
		})
		if got := h.Tenant; ok != (tc.want != "") || got != tc.want || h.ID != tc.wantID {
			t.Errorf("refusing %q: head %q (id %d, %v), want %q (id %d)", tc.refuse, got, h.ID, ok, tc.want, tc.wantID)
		}
		for k, n := range asked {
			if n > 1 {
				t.Errorf("refusing %q: pass asked %d times for %s, want once per tenant and class", tc.refuse, n, k)
			}
		}
	}
	if q.Len() != 6 {
		t.Errorf("HeadWhere changed the queue: %d waiting", q.Len())
	}
}
