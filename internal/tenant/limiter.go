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

// Limiter holds the state of every key's limits. Each key has its own
// state: keys sharing a tenant do not share limits. Its decisions are pure
// functions of the times it is given.
type Limiter struct {
	mu    sync.Mutex
	state map[*Key]*keyState
}

type keyState struct {
	rpm, tpm *Bucket
	inflight int64
}

// NewLimiter returns a limiter for ks.
func NewLimiter(ks *Keys) *Limiter {
	l := &Limiter{state: map[*Key]*keyState{}}
	for _, k := range ks.keys {
		s := &keyState{}
		if n := k.Limits.RequestsPerMinute; n > 0 {
			s.rpm = &Bucket{Limit: n}
		}
		if n := k.Limits.TokensPerMinute; n > 0 {
			s.tpm = &Bucket{Limit: n}
		}
		l.state[k] = s
	}
	return l
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
	// Requests and Tokens are the rate limits after the decision (nil: no
	// such limit).
	Requests, Tokens *Window
}

// Admit decides whether k may start a request estimated at tokens tokens
// at now; if so, it takes one request and tokens from k's buckets and one
// concurrent slot, which Done gives back. Nothing is taken from any limit
// when one of them says no.
func (l *Limiter) Admit(k *Key, tokens int64, now time.Time) (d Decision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state[k]
	windows := func() {
		if s.rpm != nil {
			d.Requests = &Window{Limit: s.rpm.Limit, Remaining: s.rpm.Remaining(now), Reset: s.rpm.Reset(now)}
		}
		if s.tpm != nil {
			d.Tokens = &Window{Limit: s.tpm.Limit, Remaining: s.tpm.Remaining(now), Reset: s.tpm.Reset(now)}
		}
	}
	defer windows()
	if c := k.Limits.Concurrent; c > 0 && s.inflight >= c {
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

// Done ends a request Admit let start with the estimate estimated: it frees
// its concurrent slot and settles its tokens, giving back what the estimate
// took beyond used (or taking what used went beyond it).
func (l *Limiter) Done(k *Key, estimated, used int64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state[k]
	s.inflight--
	if s.tpm != nil && estimated != used {
		s.tpm.Give(estimated-used, now)
	}
}
