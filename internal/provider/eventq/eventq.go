// Package eventq is the event queue providers report instance events
// through: in order, on a buffered channel, without ever blocking the
// sender. Events that do not fit in the channel wait in an unbounded slice
// that a pump goroutine drains, so a Gone event is never dropped while the
// queue is open. Written here because no library offers an unbounded,
// order-keeping, non-blocking channel.
package eventq

import (
	"log/slog"
	"sync"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// Queue is an unbounded, non-blocking event queue.
type Queue struct {
	out  chan provider.Event
	wake chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once
	log  *slog.Logger

	mu      sync.Mutex
	pending []provider.Event
	closed  bool
}

// New starts a queue whose channel holds buffer events; log may be nil.
func New(buffer int, log *slog.Logger) *Queue {
	if log == nil {
		log = slog.Default()
	}
	q := &Queue{
		out:  make(chan provider.Event, buffer),
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
		log:  log,
	}
	go q.run()
	return q
}

// C is the channel events arrive on; it is closed by Close.
func (q *Queue) C() <-chan provider.Event { return q.out }

// Push queues ev; it never blocks. Events pushed after Close are dropped.
func (q *Queue) Push(ev provider.Event) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.pending = append(q.pending, ev)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Pending is the number of events pushed that are not yet on the channel
// (an event being handed over counts): once it is 0, every event pushed
// before can be received from C without waiting. A caller that pushes and
// reads on one goroutine (a replay on a fake clock) uses it to receive
// every event so far, deterministically.
func (q *Queue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

func (q *Queue) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.pending = nil
			q.mu.Unlock()
			select {
			case <-q.wake:
				continue
			case <-q.quit:
				q.flush()
				return
			}
		}
		ev := q.pending[0]
		q.mu.Unlock()
		select {
		case q.out <- ev:
			q.mu.Lock()
			q.pending[0] = provider.Event{}
			q.pending = q.pending[1:]
			q.mu.Unlock()
		case <-q.quit:
			q.flush()
			return
		}
	}
}

// flush moves what still fits into the channel, drops the rest (nobody is
// reading) and closes the channel.
func (q *Queue) flush() {
	q.mu.Lock()
	q.closed = true
	pending := q.pending
	q.pending = nil
	q.mu.Unlock()
	for i, ev := range pending {
		select {
		case q.out <- ev:
		default:
			q.log.Warn("events channel full at close; dropping the rest", "dropped", len(pending)-i)
			close(q.out)
			return
		}
	}
	close(q.out)
}

// Close stops the pump and closes the channel; it is idempotent.
func (q *Queue) Close() {
	q.once.Do(func() { close(q.quit) })
	<-q.done
}
