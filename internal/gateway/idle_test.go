package gateway

import (
	"testing"
	"time"

	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
)

func TestBackoff(t *testing.T) {
	const base, maxEvery = time.Second, 30 * time.Second
	for _, tt := range []struct {
		name   string
		prev   time.Duration
		steady bool
		want   time.Duration
	}{
		{"first read", 0, true, base},
		{"steady doubles", base, true, 2 * base},
		{"steady doubles again", 8 * base, true, 16 * base},
		{"up to the cap", 16 * base, true, maxEvery},
		{"at the cap", maxEvery, true, maxEvery},
		{"a change snaps back", maxEvery, false, base},
		{"not steady at base", base, false, base},
		{"below base (a shorter base before)", base / 2, true, base},
	} {
		if got := backoff(tt.prev, tt.steady, base, maxEvery); got != tt.want {
			t.Errorf("%s: backoff(%v, %v) = %v, want %v", tt.name, tt.prev, tt.steady, got, tt.want)
		}
	}
	if got := backoff(time.Minute, true, time.Minute, 30*time.Second); got != time.Minute {
		t.Errorf("a cap below base: %v, want base", got)
	}
}

func TestProbeDue(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const base = time.Second
	backedOff := probeState{probed: true, at: t0, every: 16 * time.Second, failures: 3}
	idle := probeView{healthy: true, failures: 3}
	for _, tt := range []struct {
		name string
		st   probeState
		v    probeView
		now  time.Time
		want bool
	}{
		{"never probed", probeState{}, idle, t0, true},
		{"backed off, not yet", backedOff, idle, t0.Add(15 * time.Second), false},
		{"backed off, due", backedOff, idle, t0.Add(16 * time.Second), true},
		{"unhealthy: base", backedOff, probeView{failures: 3}, t0.Add(base), true},
		{"in flight: base (a hung backend is caught)", backedOff, probeView{healthy: true, inFlight: 1, failures: 3}, t0.Add(base), true},
		{"a passive failure since: base", backedOff, probeView{healthy: true, failures: 4}, t0.Add(base), true},
		{"a success since is a sign of life", backedOff, probeView{healthy: true, failures: 3, lastOK: t0.Add(10 * time.Second)}, t0.Add(16 * time.Second), false},
		{"... for an interval from it", backedOff, probeView{healthy: true, failures: 3, lastOK: t0.Add(10 * time.Second)}, t0.Add(26 * time.Second), true},
		{"a success keeps a busy backend from probes", probeState{probed: true, at: t0, every: base}, probeView{healthy: true, inFlight: 2, lastOK: t0.Add(900 * time.Millisecond)}, t0.Add(1500 * time.Millisecond), false},
		{"not while unhealthy", probeState{probed: true, at: t0, every: base}, probeView{lastOK: t0.Add(900 * time.Millisecond)}, t0.Add(base), true},
	} {
		if got := probeDue(tt.st, tt.v, tt.now, base); got != tt.want {
			t.Errorf("%s: probeDue = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestProbed(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const base, maxEvery = time.Second, 30 * time.Second
	prev := probeState{probed: true, at: t0, every: 4 * time.Second, answer: 7, failures: 2}
	idle := probeView{healthy: true, failures: 2}
	now := t0.Add(4 * time.Second)
	for _, tt := range []struct {
		name   string
		st     probeState
		v      probeView
		ok     bool
		answer uint64
		want   time.Duration
	}{
		{"first probe", probeState{}, idle, true, 7, base},
		{"same answer, idle, healthy: doubles", prev, idle, true, 7, 8 * time.Second},
		{"a failed probe", prev, idle, false, 7, base},
		{"a changed answer", prev, idle, true, 8, base},
		{"was unhealthy", prev, probeView{failures: 2}, true, 7, base},
		{"requests in flight", prev, probeView{healthy: true, inFlight: 1, failures: 2}, true, 7, base},
		{"a passive failure since", prev, probeView{healthy: true, failures: 5}, true, 7, base},
	} {
		got := probed(tt.st, tt.v, now, tt.ok, tt.answer, base, maxEvery)
		if got.every != tt.want || !got.at.Equal(now) || !got.probed || got.answer != tt.answer || got.failures != tt.v.failures {
			t.Errorf("%s: probed = %+v, want every %v at %v", tt.name, got, tt.want, now)
		}
	}
}

func TestReadSchedule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const base, maxEvery = 250 * time.Millisecond, 5 * time.Second
	q0 := loadmetrics.BackendMetrics{Has: loadmetrics.FieldQueueDepth | loadmetrics.FieldRunning, ObservedAt: t0}
	q1 := q0
	q1.Running = 1
	st := readState{read: true, at: t0, every: 2 * time.Second, requests: 10, last: q0}
	for _, tt := range []struct {
		name string
		v    readView
		now  time.Time
		want bool
	}{
		{"backed off, not yet", readView{requests: 10}, t0.Add(time.Second), false},
		{"backed off, due", readView{requests: 10}, t0.Add(2 * time.Second), true},
		{"a request went to it: base", readView{requests: 11}, t0.Add(base), true},
		{"a request in flight: base", readView{requests: 10, inFlight: 1}, t0.Add(base), true},
		{"base is the least", readView{requests: 11}, t0.Add(base - 1), false},
	} {
		if got := readDue(st, tt.v, tt.now, base); got != tt.want {
			t.Errorf("readDue %s = %v, want %v", tt.name, got, tt.want)
		}
	}
	if !readDue(readState{}, readView{}, t0, base) {
		t.Error("a backend never read is not due")
	}

	now := t0.Add(2 * time.Second)
	for _, tt := range []struct {
		name string
		st   readState
		v    readView
		m    loadmetrics.BackendMetrics
		ok   bool
		want time.Duration
	}{
		{"first read", readState{}, readView{}, q0, true, base},
		{"same values, idle: doubles", st, readView{requests: 10}, q0, true, 4 * time.Second},
		{"up to the cap", readState{read: true, every: 4 * time.Second, requests: 10, last: q0}, readView{requests: 10}, q0, true, maxEvery},
		{"values changed", st, readView{requests: 10}, q1, true, base},
		{"a request went to it", st, readView{requests: 12}, q0, true, base},
		{"a request in flight", st, readView{requests: 10, inFlight: 1}, q0, true, base},
		{"the read failed", st, readView{requests: 10}, loadmetrics.BackendMetrics{}, false, base},
	} {
		got := readDone(tt.st, tt.v, now, tt.m, tt.ok, base, maxEvery)
		if got.every != tt.want || !got.read || !got.at.Equal(now) || got.requests != tt.v.requests {
			t.Errorf("readDone %s = %+v, want every %v", tt.name, got, tt.want)
		}
		if tt.ok && !sameLoad(got.last, tt.m) || !tt.ok && !sameLoad(got.last, tt.st.last) {
			t.Errorf("readDone %s: last = %+v", tt.name, got.last)
		}
	}
}

func TestHeldKeepsBackedOffMetricsFresh(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const base, maxAge = 250 * time.Millisecond, time.Second
	m := loadmetrics.BackendMetrics{Has: loadmetrics.FieldQueueDepth, ObservedAt: t0}

	h := held(m, 5*time.Second, base)
	if !h.HeldUntil.Equal(t0.Add(5*time.Second - base)) {
		t.Fatalf("HeldUntil = %v", h.HeldUntil)
	}
	// Fresh until the next read is due, plus the max age (as at base).
	for _, tt := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {4 * time.Second, true}, {5*time.Second - base + maxAge, true}, {5*time.Second - base + maxAge + 1, false}} {
		if got := h.Fresh(t0.Add(tt.at), maxAge); got != tt.want {
			t.Errorf("held metrics %v after the read: fresh %v, want %v", tt.at, got, tt.want)
		}
	}
	if b := held(h, base, base); !b.HeldUntil.IsZero() {
		t.Errorf("a read at base holds until %v", b.HeldUntil)
	}
	// A failed read ends the hold: the values age from their observation.
	if u := unheld(h); !u.HeldUntil.IsZero() || u.Fresh(t0.Add(maxAge+1), maxAge) {
		t.Errorf("unheld: %v", u.HeldUntil)
	}
}

func TestSameLoad(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	a := loadmetrics.BackendMetrics{Has: loadmetrics.FieldQueueDepth | loadmetrics.FieldLoaded, Loaded: []string{"m"}, ObservedAt: t0}
	b := a
	b.ObservedAt = t0.Add(time.Minute)
	b.Loaded = []string{"m"}
	if !sameLoad(a, b) {
		t.Error("the same values at other times differ")
	}
	b.GPUUtil, b.KVCacheUsage = 0.0099, 0.005 // a smoothed utilisation decaying
	if !sameLoad(a, b) {
		t.Error("a change of a fraction below the tolerance counts")
	}
	for name, f := range map[string]func(*loadmetrics.BackendMetrics){
		"queue":   func(m *loadmetrics.BackendMetrics) { m.QueueDepth = 1 },
		"running": func(m *loadmetrics.BackendMetrics) { m.Running = 1 },
		"kv":      func(m *loadmetrics.BackendMetrics) { m.KVCacheUsage = 0.01 },
		"gpu":     func(m *loadmetrics.BackendMetrics) { m.GPUUtil = 0.01 },
		"ttft":    func(m *loadmetrics.BackendMetrics) { m.TTFTP99 = time.Second },
		"loaded":  func(m *loadmetrics.BackendMetrics) { m.Loaded = []string{"m", "n"} },
		"has":     func(m *loadmetrics.BackendMetrics) { m.Has |= loadmetrics.FieldRunning },
		"family":  func(m *loadmetrics.BackendMetrics) { m.Family = "vllm" },
	} {
		c := a
		f(&c)
		if sameLoad(a, c) {
			t.Errorf("a change of %s is not seen", name)
		}
	}
}

func TestAlignedNext(t *testing.T) {
	const base = 250 * time.Millisecond
	at := func(s float64) time.Time { return time.Unix(1_000_000, 0).Add(time.Duration(s * float64(time.Second))) }
	for _, tt := range []struct {
		name  string
		now   time.Time
		every time.Duration
		want  time.Time
	}{
		{"base: not aligned", at(0.1), base, at(0.35)},
		{"on the grid: a whole interval", at(0), 5 * time.Second, at(5)},
		{"off the grid: the multiple before now+every", at(1.3), 5 * time.Second, at(5)},
		{"the multiple is less than base away: the one after", at(4.9), 5 * time.Second, at(10)},
		{"exactly base away is enough", at(4.75), 5 * time.Second, at(5)},
		{"2 s grid", at(3.1), 2 * time.Second, at(4)},
	} {
		got := alignedNext(tt.now, tt.every, base)
		if !got.Equal(tt.want) {
			t.Errorf("%s: alignedNext(%v, %v) = %v, want %v", tt.name, tt.now.Sub(at(0)), tt.every, got.Sub(at(0)), tt.want.Sub(at(0)))
		}
		if gap := got.Sub(tt.now); gap < min(base, tt.every) || gap >= tt.every+base {
			t.Errorf("%s: gap %v outside [base, every+base)", tt.name, gap)
		}
	}
	// Two backends read at different times in one interval are next read
	// at the same instant.
	g := alignedNext(at(0), 4*time.Second, base) // a point of the 4 s grid
	if a, b := alignedNext(g.Add(300*time.Millisecond), 4*time.Second, base), alignedNext(g.Add(1900*time.Millisecond), 4*time.Second, base); !a.Equal(b) || !a.Equal(g.Add(4*time.Second)) {
		t.Errorf("not aligned: %v and %v, want both %v", a.Sub(at(0)), b.Sub(at(0)), g.Add(4*time.Second).Sub(at(0)))
	}
}

func TestSleepFor(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	if _, ok := sleepFor(nil, now); ok {
		t.Error("nothing due: want to sleep until woken")
	}
	if d, ok := sleepFor([]time.Time{now.Add(3 * time.Second), now.Add(time.Second), now.Add(2 * time.Second)}, now); !ok || d != time.Second {
		t.Errorf("sleepFor = %v, %v; want the earliest, 1s", d, ok)
	}
	if d, ok := sleepFor([]time.Time{now.Add(time.Second), {}}, now); !ok || d != 0 {
		t.Errorf("a backend due at once (zero time): %v, %v; want 0", d, ok)
	}
}

// TestNextFollowsTheAlignedSchedule: the due times of a backed-off backend
// are the aligned ones while it idles, and the base interval from the last
// read or probe as soon as something happens on it.
func TestNextFollowsTheAlignedSchedule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0).Add(300 * time.Millisecond)
	const base, maxEvery = time.Second, 30 * time.Second
	// Probes.
	idle := probeView{healthy: true, failures: 1}
	st := probed(probeState{probed: true, at: t0.Add(-4 * time.Second), every: 4 * time.Second, answer: 9, failures: 1}, idle, t0, true, 9, base, maxEvery)
	if want := alignedNext(t0, 8*time.Second, base); st.every != 8*time.Second || !st.next.Equal(want) || !probeNext(st, idle, base).Equal(want) {
		t.Errorf("probe: every %v, next %v; want 8s, %v", st.every, st.next, want)
	}
	if got := probeNext(st, probeView{healthy: true, failures: 1, inFlight: 1}, base); !got.Equal(t0.Add(base)) {
		t.Errorf("probe with a request in flight due at %v, want base after the last", got)
	}
	// Reads.
	q := loadmetrics.BackendMetrics{Has: loadmetrics.FieldQueueDepth}
	rs := readDone(readState{read: true, at: t0.Add(-2 * time.Second), every: 2 * time.Second, requests: 5, last: q}, readView{requests: 5}, t0, q, true, base, maxEvery)
	if want := alignedNext(t0, 4*time.Second, base); !rs.next.Equal(want) || !readNext(rs, readView{requests: 5}, base).Equal(want) {
		t.Errorf("read: next %v, want %v", rs.next, want)
	}
	if got := readNext(rs, readView{requests: 6}, base); !got.Equal(t0.Add(base)) {
		t.Errorf("read after a request due at %v, want base after the last", got)
	}
	if !readNext(readState{}, readView{}, base).IsZero() || !probeNext(probeState{}, idle, base).IsZero() {
		t.Error("never read or probed: want due at once (the zero time)")
	}
}
