package local

import (
	"log/slog"
	"sync"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// eventQueue delivers events in order on a buffered channel without ever
// blocking the sender: events that do not fit in the channel wait in an
// unbounded slice that a pump goroutine drains. Gone events are therefore
// never dropped while the queue is open; close flushes what still fits and
// closes the channel.
type eventQueue struct {
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

func newEventQueue(buffer int, log *slog.Logger) *eventQueue {
	q := &eventQueue{
		out:  make(chan provider.Event, buffer),
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
		log:  log,
	}
	go q.run()
	return q
}

// push queues ev; it never blocks. Events pushed after close are dropped.
func (q *eventQueue) push(ev provider.Event) {
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

func (q *eventQueue) run() {
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
func (q *eventQueue) flush() {
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

// close stops the pump and closes the channel; it is idempotent.
func (q *eventQueue) close() {
	q.once.Do(func() { close(q.quit) })
	<-q.done
}
