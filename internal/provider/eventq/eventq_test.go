package eventq

import (
	"fmt"
	"testing"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// Events arrive in order however far the reader lags; a push never
// blocks; Close never panics, and pushes after it are dropped.
func TestQueueOrderAndClose(t *testing.T) {
	for i := range 200 {
		q := New(1, nil)
		for j := range 50 {
			q.Push(provider.Event{Message: fmt.Sprint(j)})
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			next := 0
			for ev := range q.C() {
				if ev.Message != fmt.Sprint(next) {
					t.Errorf("queue %d: got event %s, want %d", i, ev.Message, next)
					return
				}
				next++
			}
		}()
		q.Close()
		q.Push(provider.Event{Message: "after close"})
		<-done
	}
}

// With a reader, nothing pushed before Close is lost.
func TestQueueDeliversEverything(t *testing.T) {
	q := New(4, nil)
	got := make(chan int)
	go func() {
		n := 0
		for range q.C() {
			n++
			if n == 1000 {
				got <- n
			}
		}
	}()
	for j := range 1000 {
		q.Push(provider.Event{Message: fmt.Sprint(j)})
	}
	if n := <-got; n != 1000 {
		t.Fatalf("delivered %d, want 1000", n)
	}
	q.Close()
}

// Once Pending is 0, every event pushed so far is on the channel: a reader
// on the pushing goroutine receives them all without waiting.
func TestQueuePendingMeansOnTheChannel(t *testing.T) {
	for i := range 100 {
		q := New(8, nil)
		for j := range 20 { // more than the buffer: the reader must wait for the pump
			q.Push(provider.Event{Message: fmt.Sprint(j)})
		}
		n := 0
		for {
			pending := q.Pending()
			for drained := false; !drained; {
				select {
				case ev := <-q.C():
					if ev.Message != fmt.Sprint(n) {
						t.Fatalf("queue %d: got %s, want %d", i, ev.Message, n)
					}
					n++
				default:
					drained = true
				}
			}
			if pending == 0 {
				break
			}
		}
		if n != 20 {
			t.Fatalf("queue %d: received %d once nothing was pending, want 20", i, n)
		}
		q.Close()
	}
}
