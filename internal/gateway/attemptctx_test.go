package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// closeCount is an io.Closer that counts its closes.
type closeCount struct{ n atomic.Int32 }

func (c *closeCount) Close() error { c.n.Add(1); return nil }

// TestAttemptCtx runs an attempt's context through the ways it ends and
// checks its cause, its error, its Done channel and the watched
// connection.
func TestAttemptCtx(t *testing.T) {
	errOther := errors.New("other")
	tests := []struct {
		name      string
		doneFirst bool  // Done is asked for before the end
		watch     bool  // a connection is watched
		unwatch   bool  // and taken back before the end
		cause     error // the attempt's own end; nil: the parent's
		parent    error // the parent's cancel cause, if it ends
		wantCause error
		wantErr   error
		wantClose int32
	}{
		{"settled", false, false, false, context.Canceled, nil, context.Canceled, context.Canceled, 0},
		{"backend down while watched", true, true, false, errBackendDown, nil, errBackendDown, context.Canceled, 1},
		{"idle stream, Done asked after", false, true, false, errStreamIdle, nil, errStreamIdle, context.Canceled, 1},
		{"unwatched before the end", false, true, true, errServerClosed, nil, errServerClosed, context.Canceled, 0},
		{"client gone", true, true, false, nil, errOther, errOther, context.Canceled, 1},
		{"client gone, nothing watched", false, false, false, nil, errOther, errOther, context.Canceled, 0},
		{"ended, then the client goes", true, false, false, errBackendDown, errOther, errBackendDown, context.Canceled, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent, cancelParent := context.WithCancelCause(context.Background())
			defer cancelParent(nil)
			a := newAttemptCtx(parent)
			if a.Err() != nil || a.Cause() != nil {
				t.Fatalf("a new attempt ended: %v, %v", a.Err(), a.Cause())
			}
			var done <-chan struct{}
			if tt.doneFirst {
				done = a.Done()
			}
			var c closeCount
			if tt.watch && !a.Watch(&c) {
				t.Fatal("Watch on a running attempt = false")
			}
			if tt.unwatch && !a.Unwatch(&c) {
				t.Fatal("Unwatch on a running attempt = false")
			}
			if tt.cause != nil {
				a.cancel(tt.cause)
			}
			if tt.parent != nil {
				cancelParent(tt.parent)
			}
			if done == nil {
				done = a.Done()
			}
			<-done // the parent's end reaches the attempt on another goroutine
			if got := a.Cause(); !errors.Is(got, tt.wantCause) {
				t.Errorf("Cause = %v, want %v", got, tt.wantCause)
			}
			if got := a.Err(); !errors.Is(got, tt.wantErr) {
				t.Errorf("Err = %v, want %v", got, tt.wantErr)
			}
			if got := c.n.Load(); got != tt.wantClose {
				t.Errorf("the watched connection closed %d times, want %d", got, tt.wantClose)
			}
			if tt.watch && !tt.unwatch && a.Unwatch(&c) {
				t.Error("Unwatch after the end closed it = true")
			}
			if a.Watch(&c) {
				t.Error("Watch on an ended attempt = true")
			}
			a.cancel(errOther)
			if got := a.Cause(); !errors.Is(got, tt.wantCause) {
				t.Errorf("a second end changed the cause to %v", got)
			}
		})
	}
}

// TestAttemptCtxParentEndedBefore: an attempt of a request whose client
// has gone already ends at once.
func TestAttemptCtxParentEndedBefore(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	cancel()
	a := newAttemptCtx(parent)
	<-a.Done()
	if !errors.Is(a.Err(), context.Canceled) || !errors.Is(a.Cause(), context.Canceled) {
		t.Fatalf("Err %v, Cause %v; want context.Canceled", a.Err(), a.Cause())
	}
	type key struct{}
	vp := context.WithValue(context.Background(), key{}, "v")
	if got := newAttemptCtx(vp).Value(key{}); got != "v" {
		t.Fatalf("Value = %v, want the request's", got)
	}
}

// TestAttemptCtxAllocations holds an attempt's cancellation to its cost
// (it was about ten allocations with a WithCancelCause child and the h1
// client's AfterFunc on it): the attempt, its watch of the request's
// context, and nothing per watched connection or end.
func TestAttemptCtxAllocations(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	newAttemptCtx(parent).cancel(nil) // the parent's Done channel and child map exist, as on a connection's second request
	var c closeCount
	allocs := testing.AllocsPerRun(200, func() {
		a := newAttemptCtx(parent)
		a.Watch(&c)
		a.Unwatch(&c)
		a.cancel(nil)
	})
	if allocs > 4 {
		t.Fatalf("an attempt's context costs %.1f allocations, want at most 4", allocs)
	}
	t.Logf("%.1f allocations per attempt", allocs)
}

// TestAttemptCtxDerived: a context derived from an attempt (net/http's
// Transport derives one per request) ends with it, through AfterFunc
// rather than a goroutine of its own, and one cancelled first is
// forgotten.
func TestAttemptCtxDerived(t *testing.T) {
	a := newAttemptCtx(context.Background())
	child, cancelChild := context.WithCancel(a)
	_, cancelGone := context.WithCancel(a)
	cancelGone() // stops its AfterFunc
	a.mu.Lock()
	n := len(a.afters)
	a.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d derived contexts registered, want 1 (one was cancelled first)", n)
	}
	a.cancel(errBackendDown)
	if !errors.Is(child.Err(), context.Canceled) {
		t.Fatalf("the derived context's Err = %v when the attempt ended, want context.Canceled", child.Err())
	}
	cancelChild()

	late := make(chan struct{})
	stop := a.AfterFunc(func() { close(late) })
	<-late // registered after the end: runs at once
	if stop() {
		t.Error("stop of a func that ran = true")
	}
	b := newAttemptCtx(context.Background())
	ran := false
	stop = b.AfterFunc(func() { ran = true })
	if !stop() {
		t.Error("stop before the end = false")
	}
	b.cancel(nil)
	if ran {
		t.Error("a stopped func ran")
	}
}

// TestAttemptCtxUnderTheH1Server: under the h1 server, whose request
// context watches what it is handed (h1.Abortable), an attempt costs its
// own allocation only, and still ends when the client leaves.
func TestAttemptCtxUnderTheH1Server(t *testing.T) {
	type result struct {
		allocs  float64
		watched bool
	}
	got := make(chan result, 1)
	gone := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/allocs" {
			_, ok := r.Context().(watcher)
			allocs := testing.AllocsPerRun(200, func() {
				newAttemptCtx(r.Context()).cancel(nil)
			})
			got <- result{allocs, ok}
			return
		}
		// /gone: the client leaves while the attempt waits.
		a := newAttemptCtx(r.Context())
		h1.Detach(r.Context()) // the wait below is not for a socket (h1.Detach)
		<-a.Done()
		gone <- a.Cause()
	})
	srv := &h1.Server{Handler: h, WatchAfter: time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	resp, err := http.Get("http://" + ln.Addr().String() + "/allocs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := <-got
	if !r.watched {
		t.Fatal("the h1 server's request context is not a watcher: attempts fall back to context.AfterFunc")
	}
	if r.allocs > 1 {
		t.Errorf("an attempt under the h1 server costs %.1f allocations, want 1", r.allocs)
	}

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the attempt ended with %v when the client left, want context.Canceled", err)
	}
}
