package gateway

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// errBackendDown is the cancellation cause of attempts that were waiting for
// response headers on a backend the active probe declared dead.
var errBackendDown = errors.New("gateway: backend declared down by probe")

// Upstream is the gateway's live view of one backend: its identity, its
// weight and draining flag, its load and its health. Policies read it through
// its methods; all of them are safe for concurrent use.
//
// ID, pool and address never change; a backend whose address or pool changes
// under the same ID gets a new Upstream.
type Upstream struct {
	id      string
	pool    string
	address string
	// idHeader is the value of BackendHeader on responses from this
	// backend, shared by all of them (net/http only reads it).
	idHeader []string

	weight   atomic.Int64
	draining atomic.Bool
	removed  atomic.Bool // no longer in any pool's set
	healthy  atomic.Bool // according to the active probe
	inflight atomic.Int64

	requests     atomic.Uint64 // attempts sent
	failures     atomic.Uint64 // attempts that failed (passive health)
	ejectedUntil atomic.Int64  // unix nanoseconds on Options.Clock; 0 = not ejected
	consecutive  atomic.Int32  // consecutive passive failures
	ewmaBits     atomic.Uint64 // math.Float64bits of the EWMA of time to headers, in seconds

	// life is cancelled when the probe declares the backend down; attempts
	// waiting for headers hang their cancellation on it.
	life atomic.Pointer[lifeSignal]

	mu         sync.Mutex // serializes passive and active health transitions
	ejections  int        // ejections since the last success (exponent of the backoff)
	probeFails int        // consecutive failed probes
	lastErr    string     // last failure, for the admin view

	// rrCurrent is the smooth weighted round-robin state, guarded by the
	// RoundRobin policy's mutex.
	rrCurrent int64
}

type lifeSignal struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newLife() *lifeSignal {
	ctx, cancel := context.WithCancel(context.Background())
	return &lifeSignal{ctx: ctx, cancel: cancel}
}

func newUpstream(id, pool, address string, weight int64, healthy bool) *Upstream {
	u := &Upstream{id: id, pool: pool, address: address, idHeader: []string{id}}
	u.weight.Store(weight)
	u.healthy.Store(healthy)
	u.life.Store(newLife())
	return u
}

// ID returns the backend's instance ID.
func (u *Upstream) ID() string { return u.id }

// Pool returns the name of the pool the backend belongs to.
func (u *Upstream) Pool() string { return u.pool }

// Address returns the backend's host:port.
func (u *Upstream) Address() string { return u.address }

// Weight returns the backend's weight (always > 0).
func (u *Upstream) Weight() int64 { return u.weight.Load() }

// InFlight returns the number of requests currently being served by the
// backend: from the moment it was picked until its response was fully copied
// (or the attempt was abandoned).
func (u *Upstream) InFlight() int64 { return u.inflight.Load() }

// ejected reports whether the backend is passively ejected at now (unix ns).
func (u *Upstream) ejected(now int64) bool {
	until := u.ejectedUntil.Load()
	return until != 0 && now < until
}

// EWMA returns the exponentially weighted moving average of the time from
// sending a request to receiving the response headers.
func (u *Upstream) EWMA() time.Duration {
	return time.Duration(math.Float64frombits(u.ewmaBits.Load()) * float64(time.Second))
}

// ewmaAlpha is the weight of the newest sample in the latency EWMA.
const ewmaAlpha = 0.3

func (u *Upstream) observeLatency(d time.Duration) {
	s := d.Seconds()
	for {
		old := u.ewmaBits.Load()
		v := s
		if old != 0 {
			v = ewmaAlpha*s + (1-ewmaAlpha)*math.Float64frombits(old)
		}
		if u.ewmaBits.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}
