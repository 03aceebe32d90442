package gateway

import (
	"context"
	"io"
	"sync"
)

// attemptCtx is the context of one attempt (try) and the means to end it.
// It ends, with a cause, when the client goes away (its parent, the
// request's context, ends), when the probe declares the backend down while
// the attempt waits for the response head (errBackendDown), when a stream's
// backend falls silent (errStreamIdle), when the Server closes
// (errServerClosed), and when the attempt is settled (cause nil).
//
// It replaces a context.WithCancelCause child of the request's context,
// which with the h1 client's context.AfterFunc on it cost about ten
// allocations per attempt and two entries in the contexts' child maps
// (BENCHMARKS.md, issue 19 eighth increment). Here an attempt costs its own
// allocation: the h1 server's request context watches it (h1.Abortable;
// other request contexts through a context.AfterFunc), the h1 client hands
// it the backend connection to close instead of starting an AfterFunc of
// its own, and Done's channel is made only for a reader that asks
// (net/http's Transport, a dial).
type attemptCtx struct {
	context.Context // the request's

	mu     sync.Mutex
	ended  bool
	cause  error         // why it ended; context.Canceled for a plain end
	closer io.Closer     // the backend connection in use (Watch)
	done   chan struct{} // made by Done, closed when it ends
	stop   func() bool   // ends the watch of the request's context
	parent watcher       // or the request's context that watches the attempt
	afters []*afterFn    // AfterFunc's, not yet stopped
}

type afterFn struct{ f func() }

// newAttemptCtx returns the context of an attempt of the request whose
// context is parent.
func newAttemptCtx(parent context.Context) *attemptCtx {
	a := &attemptCtx{Context: parent}
	if w, ok := parent.(watcher); ok {
		// The h1 server's request context: it closes the attempt (Close)
		// when the client leaves, with no allocation.
		if w.Watch(a) {
			a.parent = w
		} else {
			a.parentDone()
		}
		return a
	}
	a.stop = context.AfterFunc(parent, a.parentDone)
	return a
}

// watcher is a request context that closes what it is handed when it ends
// (h1.Abortable, which the h1 server's request contexts implement).
type watcher interface {
	Watch(c io.Closer) bool
	Unwatch(c io.Closer) bool
}

func (a *attemptCtx) parentDone() { a.end(context.Cause(a.Context), true) }

// Close ends the attempt as its request's context ending does (it is what
// a watcher closes).
func (a *attemptCtx) Close() error {
	a.parentDone()
	return nil
}

// cancel ends the attempt with cause (nil: a plain end, context.Canceled),
// unless it has ended already. Its backend connection, if one is watched,
// is closed.
func (a *attemptCtx) cancel(cause error) { a.end(cause, false) }

func (a *attemptCtx) end(cause error, fromParent bool) {
	a.mu.Lock()
	if a.ended {
		a.mu.Unlock()
		return
	}
	if cause == nil {
		cause = context.Canceled
	}
	a.ended, a.cause = true, cause
	c := a.closer
	a.closer = nil
	if a.done != nil {
		close(a.done)
	}
	afters := a.afters
	a.afters = nil
	a.mu.Unlock()
	if !fromParent {
		switch {
		case a.parent != nil:
			a.parent.Unwatch(a)
		case a.stop != nil:
			a.stop()
		}
	}
	if c != nil {
		_ = c.Close()
	}
	for _, af := range afters {
		af.f()
	}
}

// AfterFunc calls f once the attempt has ended, unless stopped before; the
// context package uses it for the contexts derived from the attempt
// (net/http's Transport derives one per request), which would otherwise
// each start a goroutine to wait for Done. f runs on the goroutine that
// ends the attempt (the context package's own f only cancels a child).
func (a *attemptCtx) AfterFunc(f func()) (stop func() bool) {
	af := &afterFn{f: f}
	a.mu.Lock()
	if a.ended {
		a.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	a.afters = append(a.afters, af)
	a.mu.Unlock()
	return func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for i, x := range a.afters {
			if x == af {
				a.afters = append(a.afters[:i], a.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}

// Done implements context.Context.
func (a *attemptCtx) Done() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		a.done = make(chan struct{})
		if a.ended {
			close(a.done)
		}
	}
	return a.done
}

// Err implements context.Context: the request's error if that ended the
// attempt, else context.Canceled once it ended.
func (a *attemptCtx) Err() error {
	a.mu.Lock()
	ended := a.ended
	a.mu.Unlock()
	if !ended {
		return nil
	}
	if err := a.Context.Err(); err != nil {
		return err
	}
	return context.Canceled
}

// Cause returns why the attempt ended, nil while it runs. (context.Cause
// does not know this type: it would answer for the request's context.)
func (a *attemptCtx) Cause() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cause
}

// Watch implements h1.Abortable: c is closed when the attempt ends, until
// Unwatch. It returns false, without keeping c, if the attempt has ended.
func (a *attemptCtx) Watch(c io.Closer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		return false
	}
	a.closer = c
	return true
}

// Unwatch implements h1.Abortable: false if the attempt ended while c was
// watched (c is closed or being closed).
func (a *attemptCtx) Unwatch(c io.Closer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closer == c {
		a.closer = nil
		return true
	}
	return !a.ended
}
