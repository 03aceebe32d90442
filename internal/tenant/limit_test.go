package tenant

import (
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

func TestLimiter(t *testing.T) {
	ks, err := Parse([]byte("keys:\n" +
		"- {name: r, sha256: " + Hash("r") + ", tenant: t, limits: {requestsPerMinute: 2}}\n" +
		"- {name: c, sha256: " + Hash("c") + ", tenant: t, limits: {concurrent: 1}}\n" +
		"- {name: k, sha256: " + Hash("k") + ", tenant: t, limits: {requestsPerMinute: 5, tokensPerMinute: 100}}\n" +
		"- {name: n, sha256: " + Hash("n") + ", tenant: t}\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := NewLimiter(ks)
	now := time.Unix(1_000_000, 0)
	r, c, k, n := ks.Lookup("r"), ks.Lookup("c"), ks.Lookup("k"), ks.Lookup("n")

	for i, want := range []bool{true, true, false} {
		d := l.Admit(r, 0, now)
		if d.OK != want {
			t.Fatalf("rpm request %d: OK = %v", i, d.OK)
		}
		if d.OK {
			l.Done(r, 0, 0, now)
		} else if d.Denied != LimitRequests || d.Retry != 30*time.Second || d.Requests.Remaining != 0 || d.Requests.Reset != time.Minute {
			t.Fatalf("rpm denial = %+v %+v", d, d.Requests)
		}
	}

	if d := l.Admit(c, 0, now); !d.OK || d.Requests != nil {
		t.Fatalf("first concurrent = %+v", d)
	}
	if d := l.Admit(c, 0, now); d.OK || d.Denied != LimitConcurrent {
		t.Fatalf("second concurrent = %+v", d)
	}
	l.Done(c, 0, 0, now)
	if d := l.Admit(c, 0, now); !d.OK {
		t.Fatalf("concurrent after Done = %+v", d)
	}

	// Tokens: 60 estimated, 20 used → 80 left; 90 estimated is refused
	// without taking a request.
	d := l.Admit(k, 60, now)
	if !d.OK || d.Tokens.Remaining != 40 || d.Requests.Remaining != 4 {
		t.Fatalf("token admit = %+v %+v", d.Tokens, d.Requests)
	}
	l.Done(k, 60, 20, now)
	if d := l.Admit(k, 90, now); d.OK || d.Denied != LimitTokens || d.Requests.Remaining != 4 || d.Tokens.Remaining != 80 {
		t.Fatalf("token denial = %+v %+v %+v", d, d.Tokens, d.Requests)
	}

	for range 1000 {
		if d := l.Admit(n, 1e9, now); !d.OK || d.Requests != nil || d.Tokens != nil {
			t.Fatalf("unlimited key = %+v", d)
		}
	}
}
