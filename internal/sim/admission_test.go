package sim

import (
	"context"
	"errors"
	"testing"
	"time"
)

// testCtx returns a context bounding a test's waits.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitLoad(t *testing.T, a *admission, want load) {
	t.Helper()
	if !a.waitFor(testCtx(t), func(l load) bool { return l == want }) {
		t.Fatalf("load = %+v, want %+v", a.stats(), want)
	}
}

func TestAdmissionFIFO(t *testing.T) {
	a := newAdmission(1, 0)
	first, err := a.acquire(testCtx(t), "m")
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	slots := make(chan *slot, 3)
	for i := range 3 {
		go func() {
			s, err := a.acquire(context.Background(), "m")
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			slots <- s
		}()
		// Enqueue in a known order.
		waitLoad(t, a, load{running: 1, waiting: i + 1})
	}
	first.release()
	first.release() // extra releases are no-ops
	for want := range 3 {
		if got := <-order; got != want {
			t.Fatalf("granted waiter %d, want %d", got, want)
		}
		(<-slots).release()
	}
	waitLoad(t, a, load{})
}

func TestAdmissionQueueFull(t *testing.T) {
	a := newAdmission(1, 1)
	s1, err := a.acquire(testCtx(t), "m")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := a.acquire(ctx, "m")
		done <- err
	}()
	waitLoad(t, a, load{running: 1, waiting: 1})
	if _, err := a.acquire(testCtx(t), "m"); !errors.Is(err, errQueueFull) {
		t.Fatalf("acquire with full queue: %v, want errQueueFull", err)
	}
	// A cancelled waiter leaves the queue and frees its place.
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	waitLoad(t, a, load{running: 1})
	s1.release()
	waitLoad(t, a, load{})
}

func TestAdmissionPerModelAndClose(t *testing.T) {
	a := newAdmission(1, 0)
	changes := map[string]load{}
	a.onChange = func(model string, m load, total load) { changes[model] = m }
	s, err := a.acquire(testCtx(t), "a")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.acquire(context.Background(), "b")
		done <- err
	}()
	waitLoad(t, a, load{running: 1, waiting: 1})
	a.mu.Lock()
	if changes["a"] != (load{running: 1}) || changes["b"] != (load{waiting: 1}) {
		t.Errorf("per-model loads = %+v", changes)
	}
	a.mu.Unlock()
	a.close()
	if err := <-done; !errors.Is(err, errClosed) {
		t.Fatalf("waiter after close: %v, want errClosed", err)
	}
	if _, err := a.acquire(testCtx(t), "a"); !errors.Is(err, errClosed) {
		t.Fatalf("acquire after close: %v, want errClosed", err)
	}
	s.release()
	waitLoad(t, a, load{})
	a.mu.Lock()
	defer a.mu.Unlock()
	if changes["a"] != (load{}) || changes["b"] != (load{}) {
		t.Errorf("per-model loads after close = %+v", changes)
	}
}

func TestAdmissionCancelledContext(t *testing.T) {
	a := newAdmission(1, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.acquire(ctx, "m"); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with cancelled context: %v", err)
	}
	if got := a.stats(); got != (load{}) {
		t.Fatalf("load = %+v", got)
	}
}
