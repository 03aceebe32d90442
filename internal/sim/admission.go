package sim

import (
	"container/list"
	"context"
	"errors"
	"sync"
)

var (
	// errQueueFull is returned by acquire when MaxQueue requests already wait.
	errQueueFull = errors.New("server busy, please try again.  maximum pending requests exceeded")
	// errClosed is returned by acquire once the server is closed.
	errClosed = errors.New("server is shutting down")
)

// load is the number of running and waiting requests of one model.
type load struct {
	running, waiting int
}

// admission hands out batch slots: at most maxRunning requests hold a slot,
// the others wait in FIFO order, and at most maxQueue (0: unlimited) wait.
type admission struct {
	maxRunning int
	maxQueue   int
	// onChange, if set, runs under the lock after every change with the
	// totals and the load of the model that changed.
	onChange func(model string, m load, total load)

	mu       sync.Mutex
	total    load
	perModel map[string]*load
	queue    list.List // of *waiter, front is next
	closed   bool
	changed  chan struct{} // closed and replaced on every change
}

// waiter is one request in the queue.
type waiter struct {
	model   string
	ready   chan struct{} // closed when granted or rejected
	granted bool          // set under the lock before ready is closed
	err     error         // set under the lock before ready is closed
	elem    *list.Element
}

// slot is a granted batch slot. Release it exactly once (extra calls are
// no-ops).
type slot struct {
	a     *admission
	model string
	once  sync.Once
}

func newAdmission(maxRunning, maxQueue int) *admission {
	if maxRunning < 1 {
		maxRunning = 1
	}
	if maxQueue < 0 {
		maxQueue = 0
	}
	return &admission{
		maxRunning: maxRunning,
		maxQueue:   maxQueue,
		perModel:   map[string]*load{},
		changed:    make(chan struct{}),
	}
}

// modelLoad returns the counters of model; a.mu must be held.
func (a *admission) modelLoad(model string) *load {
	l := a.perModel[model]
	if l == nil {
		l = &load{}
		a.perModel[model] = l
	}
	return l
}

// notify reports a change of model's counters; a.mu must be held.
func (a *admission) notify(model string) {
	if a.onChange != nil {
		a.onChange(model, *a.modelLoad(model), a.total)
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

// acquire waits for a batch slot for a request of model. It fails at once
// with errQueueFull when the queue is full, with errClosed once closed, and
// with ctx.Err() when ctx ends first (the request then leaves the queue).
func (a *admission) acquire(ctx context.Context, model string) (*slot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, errClosed
	}
	if a.total.running < a.maxRunning && a.queue.Len() == 0 {
		a.total.running++
		a.modelLoad(model).running++
		a.notify(model)
		a.mu.Unlock()
		return &slot{a: a, model: model}, nil
	}
	if a.maxQueue > 0 && a.queue.Len() >= a.maxQueue {
		a.mu.Unlock()
		return nil, errQueueFull
	}
	w := &waiter{model: model, ready: make(chan struct{})}
	w.elem = a.queue.PushBack(w)
	a.total.waiting++
	a.modelLoad(model).waiting++
	a.notify(model)
	a.mu.Unlock()

	select {
	case <-w.ready:
	case <-ctx.Done():
		a.mu.Lock()
		if !w.granted && w.err == nil {
			a.queue.Remove(w.elem)
			a.total.waiting--
			a.modelLoad(model).waiting--
			a.notify(model)
			a.mu.Unlock()
			return nil, ctx.Err()
		}
		a.mu.Unlock()
		// Granted or rejected concurrently with the cancellation.
		if w.granted {
			(&slot{a: a, model: model}).release()
			return nil, ctx.Err()
		}
	}
	if w.err != nil {
		return nil, w.err
	}
	return &slot{a: a, model: model}, nil
}

// release frees the slot and hands it to the first waiter, if any.
func (s *slot) release() {
	s.once.Do(func() {
		a := s.a
		a.mu.Lock()
		defer a.mu.Unlock()
		a.total.running--
		a.modelLoad(s.model).running--
		a.notify(s.model)
		a.promote()
	})
}

// promote grants free slots to waiters in FIFO order; a.mu must be held.
func (a *admission) promote() {
	for a.total.running < a.maxRunning && a.queue.Len() > 0 {
		w := a.queue.Remove(a.queue.Front()).(*waiter)
		w.granted = true
		a.total.waiting--
		a.total.running++
		l := a.modelLoad(w.model)
		l.waiting--
		l.running++
		a.notify(w.model)
		close(w.ready)
	}
}

// close rejects every waiting request and all later ones with errClosed.
// Running requests keep their slots until they release them.
func (a *admission) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	for a.queue.Len() > 0 {
		w := a.queue.Remove(a.queue.Front()).(*waiter)
		w.err = errClosed
		a.total.waiting--
		a.modelLoad(w.model).waiting--
		a.notify(w.model)
		close(w.ready)
	}
}

// stats returns the current totals.
func (a *admission) stats() load {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total
}

// running returns the number of sequences holding a slot.
func (a *admission) running() int {
	return a.stats().running
}

// waitFor blocks until cond holds for the totals or ctx ends; it returns
// whether cond held. It is a condition wait on state changes, no polling.
func (a *admission) waitFor(ctx context.Context, cond func(total load) bool) bool {
	for {
		a.mu.Lock()
		ok := cond(a.total)
		ch := a.changed
		a.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}
