package tenant

import (
	"sync"
	"time"
)

// Limit names a limit, as OpenAI's headers and error types do.
const (
	LimitRequests   = "requests"
	LimitTokens     = "tokens"
	LimitConcurrent = "concurrent"
)

// Limiter holds the state of every tenant's limits. The keys of a tenant
// share it: one request bucket, one token bucket and one count of requests
// in flight per tenant. Its decisions are pure functions of the times it is
// given.
type Limiter struct {
	mu    sync.Mutex
	state map[string]*tenantState
}

type tenantState struct {
	concurrent int64 // 0: no limit
	rpm, tpm   *Bucket
	inflight   int64
}

// NewLimiter returns a limiter for ks's tenants.
func NewLimiter(ks *Keys) *Limiter {
	l := &Limiter{state: map[string]*tenantState{}}
	l.Update(ks, time.Time{})
	return l
}

// newState is the state of a tenant with limits lim, every bucket full.
func newState(lim Limits) *tenantState {
	s := &tenantState{}
	s.set(lim, time.Time{})
	return s
}

// set makes lim the state's limits at now, keeping what is used of the
// buckets that stay (Bucket.SetLimit) and the requests in flight.
func (s *tenantState) set(lim Limits, now time.Time) {
	s.concurrent = lim.Concurrent
	s.rpm = resize(s.rpm, lim.RequestsPerMinute, now)
	s.tpm = resize(s.tpm, lim.TokensPerMinute, now)
}

func resize(b *Bucket, n int64, now time.Time) *Bucket {
	switch {
	case n <= 0:
		return nil
	case b == nil:
		return &Bucket{Limit: n}
	}
	b.SetLimit(n, now)
	return b
}

// Update makes ks's tenants the limiter's at now, as a reload of the keys
// file does. A tenant that stays keeps its state (what its buckets have
// used, its requests in flight) under its new limits; a new tenant starts
// with full buckets; a tenant no longer in ks is dropped (its requests in
// flight end on the state they started with).
func (l *Limiter) Update(ks *Keys, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := make(map[string]*tenantState, len(l.state))
	for _, k := range ks.keys {
		if _, done := next[k.Tenant]; done {
			continue // its keys all have the same limits
		}
		s := l.state[k.Tenant]
		if s == nil {
			s = newState(k.Limits)
		} else {
			s.set(k.Limits, now)
		}
		next[k.Tenant] = s
	}
	l.state = next
}

// Window is one rate limit's state, for the x-ratelimit-* headers.
type Window struct {
	Limit, Remaining int64
	Reset            time.Duration
}

// Decision is the answer to Admit.
type Decision struct {
	OK bool
	// Denied is the limit that said no (LimitRequests, LimitTokens,
	// LimitConcurrent), if !OK; Retry is how long until it would pass.
	Denied string
	Retry  time.Duration
	// Requests and Tokens are the tenant's rate limits after the decision
	// (nil: no such limit).
	Requests, Tokens *Window

	state *tenantState // the tenant's, for Done
}

// Admit decides whether a request of k's tenant estimated at tokens tokens
// may start at now; if so, it takes one request and tokens from the
// tenant's buckets and one concurrent slot, which Done gives back. Nothing
// is taken from any limit when one of them says no.
func (l *Limiter) Admit(k *Key, tokens int64, now time.Time) (d Decision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state[k.Tenant]
	if s == nil {
		// k is of a keys set a reload has just replaced and its tenant
		// was new or is gone: its limits come with it.
		s = newState(k.Limits)
		l.state[k.Tenant] = s
	}
	d.state = s
	windows := func() {
		if s.rpm != nil {
			d.Requests = &Window{Limit: s.rpm.Limit, Remaining: s.rpm.Remaining(now), Reset: s.rpm.Reset(now)}
		}
		if s.tpm != nil {
			d.Tokens = &Window{Limit: s.tpm.Limit, Remaining: s.tpm.Remaining(now), Reset: s.tpm.Reset(now)}
		}
	}
	defer windows()
	if s.concurrent > 0 && s.inflight >= s.concurrent {
		d.Denied, d.Retry = LimitConcurrent, time.Second
		return d
	}
	if s.rpm != nil {
		if ok, retry := s.rpm.Take(1, now); !ok {
			d.Denied, d.Retry = LimitRequests, retry
			return d
		}
	}
	if s.tpm != nil {
		if ok, retry := s.tpm.Take(tokens, now); !ok {
			if s.rpm != nil {
				s.rpm.Give(1, now) // the request did not happen
			}
			d.Denied, d.Retry = LimitTokens, retry
			return d
		}
	}
	s.inflight++
	d.OK = true
	return d
}

// Done ends a request that Admit let start (d is its decision) with the
// estimate estimated: it frees its concurrent slot and settles its tokens,
// giving back what the estimate took beyond used (or taking what used went
// beyond it).
func (l *Limiter) Done(d Decision, estimated, used int64, now time.Time) {
	if !d.OK || d.state == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := d.state
	s.inflight--
	if s.tpm != nil && estimated != used {
		s.tpm.Give(estimated-used, now)
	}
}
