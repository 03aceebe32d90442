package spotsim

import (
	"sync"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// eventQueue delivers events in order on a buffered channel without ever
// blocking the sender: what does not fit waits in a slice that a pump
// goroutine drains. close drops what nobody read and closes the channel.
type eventQueue struct {
	out  chan provider.Event
	wake chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	pending []provider.Event
	closed  bool
}

func newEventQueue(buffer int) *eventQueue {
	q := &eventQueue{
		out:  make(chan provider.Event, buffer),
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
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
	defer close(q.out)
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.pending = nil
			q.mu.Unlock()
			select {
			case <-q.wake:
				continue
			case <-q.quit:
				return
			}
		}
		ev := q.pending[0]
		q.mu.Unlock()
		select {
		case q.out <- ev:
			// Only this goroutine removes from pending, so ev is still
			// its head.
			q.mu.Lock()
			q.pending[0] = provider.Event{}
			q.pending = q.pending[1:]
			q.mu.Unlock()
		case <-q.quit:
			return
		}
	}
}

// close stops the pump and closes the channel; it is idempotent.
func (q *eventQueue) close() {
	q.once.Do(func() {
		q.mu.Lock()
		q.closed = true // pending is dropped by run, its only consumer
		q.mu.Unlock()
		close(q.quit)
	})
	<-q.done
}
