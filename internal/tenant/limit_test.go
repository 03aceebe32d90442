package tenant

import (
	"strings"
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	type step struct {
		at     time.Duration // after t0
		take   int64         // 0: give back -give
		give   int64
		ok     bool
		retry  time.Duration
		remain int64
	}
	for _, tc := range []struct {
		name  string
		limit int64
		steps []step
	}{
		{"ten per minute then refill", 10, []step{
			{at: 0, take: 10, ok: true, remain: 0},
			{at: 0, take: 1, ok: false, retry: 6 * time.Second, remain: 0},
			{at: 3 * time.Second, take: 1, ok: false, retry: 3 * time.Second, remain: 0},
			{at: 6 * time.Second, take: 1, ok: true, remain: 0},
			{at: 66 * time.Second, take: 1, ok: true, remain: 9},
		}},
		{"larger than the bucket passes on a full one", 100, []step{
			{at: 0, take: 500, ok: true, remain: 0},
			{at: 30 * time.Second, take: 1, ok: false, retry: 3*time.Minute + 30600*time.Millisecond, remain: 0},
		}},
		{"credit back, capped", 100, []step{
			{at: 0, take: 80, ok: true, remain: 20},
			{at: 0, give: 70, remain: 90},
			{at: 0, give: 50, remain: 100},
		}},
		{"debt from an answer over its estimate", 60, []step{
			{at: 0, take: 10, ok: true, remain: 50},
			{at: 0, give: -80, remain: 0},
			{at: 0, take: 1, ok: false, retry: 31 * time.Second},
			{at: 31 * time.Second, take: 1, ok: true, remain: 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Bucket{Limit: tc.limit}
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				if s.take > 0 {
					ok, retry := b.Take(s.take, now)
					if ok != s.ok || retry != s.retry {
						t.Fatalf("step %d: Take(%d) = %v, %v; want %v, %v", i, s.take, ok, retry, s.ok, s.retry)
					}
				} else {
					b.Give(s.give, now)
				}
				if got := b.Remaining(now); got != s.remain {
					t.Fatalf("step %d: Remaining = %d, want %d", i, got, s.remain)
				}
			}
		})
	}
}

// The limits are the tenant's: every key of a tenant draws on one set of
// buckets and one count of requests in flight.
func TestLimiter(t *testing.T) {
	const file = "keys:\n" +
		// Two keys of one tenant; the second shares the first's limits.
		"- {name: a1, sha256: %a1, tenant: a, limits: {requestsPerMinute: 3}}\n" +
		"- {name: a2, sha256: %a2, tenant: a}\n" +
		"- {name: c1, sha256: %c1, tenant: c, limits: {concurrent: 1}}\n" +
		"- {name: c2, sha256: %c2, tenant: c, limits: {concurrent: 1}}\n" +
		"- {name: k1, sha256: %k1, tenant: k, limits: {requestsPerMinute: 5, tokensPerMinute: 100}}\n" +
		"- {name: k2, sha256: %k2, tenant: k}\n" +
		"- {name: n, sha256: %n, tenant: n}\n"
	type step struct {
		at     time.Duration // after t0
		key    string
		tokens int64
		denied string // "": admitted
		retry  time.Duration
		// done: end the request at once with this many tokens used (-1:
		// leave it in flight until a later step ends it by index).
		used int64
		end  int // > 0: first end the request of step end-1
		// rem is the requests and tokens remaining after the decision
		// (-1: no such limit).
		remR, remT int64
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"two keys share requests per minute", []step{
			{key: "a1", remR: 2, remT: -1},
			{key: "a2", remR: 1, remT: -1},
			{key: "a1", remR: 0, remT: -1},
			{key: "a2", denied: LimitRequests, retry: 20 * time.Second, remR: 0, remT: -1},
			{key: "a1", denied: LimitRequests, retry: 20 * time.Second, remR: 0, remT: -1},
			{at: 20 * time.Second, key: "a2", remR: 0, remT: -1},
		}},
		{"two keys share one concurrent slot", []step{
			{key: "c1", used: -1, remR: -1, remT: -1},
			{key: "c2", denied: LimitConcurrent, retry: time.Second, remR: -1, remT: -1},
			{key: "c1", denied: LimitConcurrent, retry: time.Second, remR: -1, remT: -1},
			{key: "c2", end: 1, remR: -1, remT: -1},
		}},
		{"two keys share tokens, settled on the real count", []step{
			{key: "k1", tokens: 60, used: 20, remR: 4, remT: 40},
			// 60 estimated, 20 used: 80 left; 90 is refused without
			// taking a request.
			{key: "k2", tokens: 90, denied: LimitTokens, retry: 6 * time.Second, remR: 4, remT: 80},
			{key: "k2", tokens: 80, used: 80, remR: 3, remT: 0},
			{key: "k1", tokens: 1, denied: LimitTokens, retry: 600 * time.Millisecond, remR: 3, remT: 0},
		}},
		{"no limits", []step{
			{key: "n", tokens: 1e9, remR: -1, remT: -1},
			{key: "n", tokens: 1e9, used: -1, remR: -1, remT: -1},
			{key: "n", tokens: 1e9, used: -1, remR: -1, remT: -1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := file
			for _, n := range []string{"a1", "a2", "c1", "c2", "k1", "k2", "n"} {
				src = strings.ReplaceAll(src, "%"+n+",", Hash(n)+",")
			}
			ks, err := Parse([]byte(src))
			if err != nil {
				t.Fatal(err)
			}
			l := NewLimiter(ks)
			t0 := time.Unix(1_000_000, 0)
			decisions := make([]Decision, len(tc.steps))
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				if s.end > 0 {
					l.Done(decisions[s.end-1], tc.steps[s.end-1].tokens, 0, now)
				}
				d := l.Admit(ks.Lookup(s.key), s.tokens, now)
				decisions[i] = d
				if d.OK != (s.denied == "") || d.Denied != s.denied || d.Retry != s.retry {
					t.Fatalf("step %d (%s): %+v, want denied %q retry %s", i, s.key, d, s.denied, s.retry)
				}
				for _, w := range []struct {
					name string
					w    *Window
					want int64
				}{{"requests", d.Requests, s.remR}, {"tokens", d.Tokens, s.remT}} {
					if (w.w == nil) != (w.want < 0) || (w.w != nil && w.w.Remaining != w.want) {
						t.Fatalf("step %d (%s): %s window %+v, want remaining %d", i, s.key, w.name, w.w, w.want)
					}
				}
				if d.OK && s.used >= 0 {
					l.Done(d, s.tokens, s.used, now)
				}
			}
		})
	}
}

func TestBucketSetLimit(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name            string
		limit, take     int64 // take at t0
		at              time.Duration
		to              int64
		remain          int64 // at the change
		retryOne        time.Duration
		remainAfterMin1 int64 // a minute after the change
	}{
		{"unused bucket takes the new limit", 10, 0, 0, 20, 20, 0, 20},
		{"lowered: the use counts against the new limit", 10, 4, 0, 5, 1, 0, 5},
		{"lowered below the use: empty, not in debt", 10, 8, 0, 1, 0, time.Minute, 1},
		{"raised: the use counts, the rest is there", 10, 10, 0, 60, 50, 0, 60},
		{"refilled at the old rate until the change", 10, 10, 30 * time.Second, 100, 95, 0, 100},
		{"debt carries over", 10, 30, 0, 20, 0, 33 * time.Second, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Bucket{Limit: tc.limit}
			if tc.take > 0 {
				if ok, _ := b.Take(tc.take, t0); !ok {
					t.Fatal("first take refused")
				}
			}
			now := t0.Add(tc.at)
			b.SetLimit(tc.to, now)
			if b.Limit != tc.to || b.Remaining(now) != tc.remain {
				t.Fatalf("after SetLimit(%d): limit %d, remaining %d; want %d", tc.to, b.Limit, b.Remaining(now), tc.remain)
			}
			if tc.remain == 0 {
				if ok, retry := b.Take(1, now); ok || retry != tc.retryOne {
					t.Fatalf("Take(1) = %v, %s; want false, %s", ok, retry, tc.retryOne)
				}
			}
			if got := b.Remaining(now.Add(time.Minute)); got != tc.remainAfterMin1 {
				t.Fatalf("a minute later: remaining %d, want %d", got, tc.remainAfterMin1)
			}
		})
	}
}

// A reload keeps the state of the tenants that stay, under their new
// limits, starts new tenants full and drops the others; a request in
// flight across the reload ends on the state it started with.
func TestLimiterUpdate(t *testing.T) {
	parse := func(src string) *Keys {
		t.Helper()
		src = strings.NewReplacer("%a1", Hash("a1"), "%a2", Hash("a2"), "%b", Hash("b"), "%c", Hash("c")).Replace(src)
		ks, err := Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	v1 := parse("keys:\n- {name: a1, sha256: %a1, tenant: a, limits: {requestsPerMinute: 4, concurrent: 2}}\n" +
		"- {name: b, sha256: %b, tenant: b, limits: {requestsPerMinute: 2}}\n")
	l := NewLimiter(v1)
	t0 := time.Unix(1_000_000, 0)
	var inflight Decision
	for i := range 4 {
		d := l.Admit(v1.Lookup("a1"), 0, t0)
		if !d.OK {
			t.Fatalf("a request %d refused: %+v", i, d)
		}
		if i == 0 {
			inflight = d
		} else {
			l.Done(d, 0, 0, t0)
		}
	}
	for range 2 {
		l.Admit(v1.Lookup("b"), 0, t0)
	}

	// v2: tenant a gets a second key and a raised limit of 8; b is gone
	// and comes back later; c is new.
	v2 := parse("keys:\n- {name: a1, sha256: %a1, tenant: a}\n" +
		"- {name: a2, sha256: %a2, tenant: a, limits: {requestsPerMinute: 8, concurrent: 2}}\n" +
		"- {name: c, sha256: %c, tenant: c, limits: {requestsPerMinute: 1}}\n")
	l.Update(v2, t0)
	// a used 4: 4 of 8 remain, and one of its two slots is still taken.
	d := l.Admit(v2.Lookup("a2"), 0, t0)
	if !d.OK || d.Requests.Limit != 8 || d.Requests.Remaining != 3 {
		t.Fatalf("a after the reload: %+v %+v; want 3 of 8 left", d, d.Requests)
	}
	if d2 := l.Admit(v2.Lookup("a1"), 0, t0); d2.OK || d2.Denied != LimitConcurrent {
		t.Fatalf("a's two slots (one from before the reload): %+v", d2)
	}
	l.Done(inflight, 0, 0, t0)
	if d2 := l.Admit(v2.Lookup("a1"), 0, t0); !d2.OK {
		t.Fatalf("a slot freed by a request from before the reload: %+v", d2)
	}
	if d := l.Admit(v2.Lookup("c"), 0, t0); !d.OK || d.Requests.Remaining != 0 {
		t.Fatalf("new tenant c: %+v %+v", d, d.Requests)
	}

	// b comes back: its old state was dropped, so it starts full.
	v3 := parse("keys:\n- {name: b, sha256: %b, tenant: b, limits: {requestsPerMinute: 2}}\n")
	l.Update(v3, t0)
	if d := l.Admit(v3.Lookup("b"), 0, t0); !d.OK || d.Requests.Remaining != 1 {
		t.Fatalf("b back after a reload without it: %+v %+v", d, d.Requests)
	}
	// A key of the replaced set still being served (a request that read
	// the keys just before the reload) gets its tenant's limits.
	if d := l.Admit(v2.Lookup("c"), 0, t0); !d.OK || d.Requests.Limit != 1 {
		t.Fatalf("a key of the replaced set: %+v", d)
	}
}
