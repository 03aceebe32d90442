// Package stall tells a benchmark whether its process or its host stalled
// while it measured: a goroutine that wakes every period and records how
// late each wake-up came. A pause of the whole process (a host that
// deschedules the virtual machine, a stop of the process) delays every
// part of an in-process benchmark at once — the simulated backends, the
// balancer and the load generator — and the open-loop schedule then
// releases every request that was due during it in one burst. That burst
// is the machine's, not the balancer's, and a benchmark comparing
// balancers measured one after the other should not judge one of them on
// it (bench/routing measures such a row again).
//
// Written here: the standard library and the Go ecosystem have no
// stall detector of this shape (jHiccup is the Java tool that does the
// same).
package stall

import (
	"sync"
	"time"
)

// Watch records the longest stall since Start.
type Watch struct {
	period time.Duration
	stop   chan struct{}
	done   chan struct{}

	mu    sync.Mutex
	last  time.Time
	worst time.Duration
}

// Start starts a watch that wakes every period (10 ms is fine: a wake-up
// costs a few microseconds).
func Start(period time.Duration) *Watch {
	w := &Watch{period: period, stop: make(chan struct{}), done: make(chan struct{}), last: time.Now()}
	go w.run()
	return w
}

func (w *Watch) run() {
	defer close(w.done)
	tk := time.NewTicker(w.period)
	defer tk.Stop()
	for {
		select {
		case <-w.stop:
			w.tick(time.Now())
			return
		case now := <-tk.C:
			w.tick(now)
		}
	}
}

// tick records a wake-up at now.
func (w *Watch) tick(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.worst = max(w.worst, Late(w.last, now, w.period))
	w.last = now
}

// Worst returns the longest stall so far.
func (w *Watch) Worst() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.worst
}

// Stop ends the watch and returns the longest stall it saw.
func (w *Watch) Stop() time.Duration {
	close(w.stop)
	<-w.done
	return w.Worst()
}

// Late is how much later than one period after prev a wake-up at now came:
// the stall between them, 0 if none. A ticker that fell behind drops ticks
// instead of queueing them, so one long gap is one stall. Pure.
func Late(prev, now time.Time, period time.Duration) time.Duration {
	return max(now.Sub(prev)-period, 0)
}
