package notice

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Sink takes a notice for a pool's instance (the engines' Notice).
type Sink interface {
	Notice(pool, id string, at time.Time, source string) error
}

// Supersede is how much earlier a second notice for the same instance
// must say the instance goes for it to be handed on: a rebalance
// recommendation's chosen deadline followed by the interruption warning
// that moves it earlier is news; the same interruption seen by the agent
// and by the event queue, whose times differ by clock skew, is not.
const Supersede = 5 * time.Second

// Forget is how long after its interruption time a notice is remembered.
const Forget = 30 * time.Minute

// Key identifies a notice: one per instance of a pool.
type Key struct{ Pool, Instance string }

// Fresh decides whether a notice at "at" is to be handed on, given the
// interruption time already handed on for the instance (nil: none). Pure.
func Fresh(handled *time.Time, at time.Time) bool {
	return handled == nil || handled.Sub(at) >= Supersede
}

// Router hands each notice to the sink once per instance, whichever
// source brings it first. Safe for concurrent use.
type Router struct {
	sink  Sink
	clock clock.PassiveClock

	mu      sync.Mutex
	handled map[Key]time.Time
}

// NewRouter returns a Router over sink; clk nil is the real clock.
func NewRouter(sink Sink, clk clock.PassiveClock) *Router {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Router{sink: sink, clock: clk, handled: map[Key]time.Time{}}
}

// Deliver hands the notice on unless one for the same instance was
// handed on already (then it returns false, nil: acknowledged, nothing
// done). An error from the sink is returned and nothing is remembered, so
// a retry can deliver it.
func (r *Router) Deliver(pool, id string, at time.Time, source string) (bool, error) {
	k := Key{pool, id}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for kk, t := range r.handled {
		if now.Sub(t) > Forget {
			delete(r.handled, kk)
		}
	}
	var prev *time.Time
	if t, ok := r.handled[k]; ok {
		prev = &t
	}
	if !Fresh(prev, at) {
		return false, nil
	}
	if err := r.sink.Notice(pool, id, at, source); err != nil {
		return false, err
	}
	r.handled[k] = at
	return true, nil
}
