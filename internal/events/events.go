// Package events records what happened to pools and instances (launched,
// ready, lost, reclaimed, drained, replaced, errors) in a bounded in-memory
// log that the admin API, the dashboard and `tidegpu status` read, and that
// subscribers can follow live.
package events

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Types of events.
const (
	TypeNormal  = "Normal"
	TypeWarning = "Warning"
)

// Event is one thing that happened.
type Event struct {
	// Seq increases by one per event; use it to ask for what is newer.
	Seq uint64 `json:"seq"`
	// Time the event was recorded.
	Time time.Time `json:"time"`
	// Type is Normal or Warning.
	Type string `json:"type"`
	// Reason is a short CamelCase cause, such as Launched or InstanceLost.
	Reason string `json:"reason"`
	// Pool and Instance the event is about (Instance may be empty).
	Pool     string `json:"pool"`
	Instance string `json:"instance,omitempty"`
	// Message is for people.
	Message string `json:"message"`
}

// Recorder keeps the newest events in a ring and fans them out to
// subscribers. The zero value is not usable; call NewRecorder.
type Recorder struct {
	clock  clock.PassiveClock
	logger *slog.Logger

	mu   sync.Mutex
	ring []Event
	next int
	full bool
	seq  uint64
	subs map[chan Event]struct{}
}

// NewRecorder keeps the newest size events. logger may be nil.
func NewRecorder(size int, clk clock.PassiveClock, logger *slog.Logger) *Recorder {
	if size <= 0 {
		size = 1000
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Recorder{clock: clk, logger: logger, ring: make([]Event, size), subs: map[chan Event]struct{}{}}
}

// Eventf records an event and returns it.
func (r *Recorder) Eventf(typ, reason, pool, instance, format string, args ...any) Event {
	r.mu.Lock()
	r.seq++
	e := Event{Seq: r.seq, Time: r.clock.Now(), Type: typ, Reason: reason, Pool: pool, Instance: instance,
		Message: fmt.Sprintf(format, args...)}
	r.ring[r.next] = e
	r.next = (r.next + 1) % len(r.ring)
	if r.next == 0 {
		r.full = true
	}
	for ch := range r.subs {
		select {
		case ch <- e:
		default: // a slow subscriber misses events rather than stalling the engine
		}
	}
	r.mu.Unlock()
	if r.logger != nil {
		level := slog.LevelInfo
		if typ == TypeWarning {
			level = slog.LevelWarn
		}
		r.logger.Log(context.Background(), level, e.Message, "reason", reason, "pool", pool, "instance", instance)
	}
	return e
}

// List returns the kept events newer than since, oldest first, optionally
// only those of one pool ("" for all).
func (r *Recorder) List(since uint64, pool string) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	n := r.next
	if r.full {
		n = len(r.ring)
	}
	start := 0
	if r.full {
		start = r.next
	}
	for i := 0; i < n; i++ {
		e := r.ring[(start+i)%len(r.ring)]
		if e.Seq > since && (pool == "" || e.Pool == pool) {
			out = append(out, e)
		}
	}
	return out
}

// Subscribe returns a channel that receives every event recorded from now
// on, and a function that ends the subscription. Events are dropped for a
// subscriber that does not keep up; it can catch up with List.
func (r *Recorder) Subscribe(buffer int) (<-chan Event, func()) {
	ch := make(chan Event, buffer)
	r.mu.Lock()
	r.subs[ch] = struct{}{}
	r.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.subs, ch)
			r.mu.Unlock()
		})
	}
}
