package h1

import "time"

// How streams are spread over event loops (loop_linux.go).
//
// Streams are packed onto as few loops as carry them: a new stream goes to
// the first loop that is busy less than loopBusy of the time, and another
// loop is started only when every running one is past it. One loop per
// core, the earlier rule, cost 7-14 % more CPU per stream at 1,000 streams
// on two cores (BENCHMARKS.md, issue 19, eleventh increment): each token woke one
// of two half-idle loops, so the scheduler woke and parked a thread per
// token where one loop takes the tokens that came in while it worked in
// one wake-up, as an nginx worker does. A loop past loopBusy is a core
// mostly spent on tokens, and a stream added to it would wait for the
// others' turns: then a second loop runs on another core, up to one per
// core (GOMAXPROCS). A loop's business is measured over windows of
// loopWindow; a loop that has not closed a window for two is idle.
const (
	loopBusy   = 0.5
	loopWindow = 100 * time.Millisecond
)

// pickLoop returns the loop a new stream goes to, by index into loads,
// each running loop's busy share (0 to 1) in the order they were started:
// the first below loopBusy; else len(loads), a new loop, when fewer than
// max run; else the least busy.
func pickLoop(loads []float64, max int) int {
	least := -1
	for i, b := range loads {
		if b < loopBusy {
			return i
		}
		if least < 0 || b < loads[least] {
			least = i
		}
	}
	if len(loads) < max || least < 0 {
		return len(loads)
	}
	return least
}

// loopMeter measures one loop's busy share: the time its goroutine spends
// running streams' turns, over windows of loopWindow. It is the loop
// goroutine's own; times are monotonic readings in nanoseconds.
type loopMeter struct {
	winStart int64 // start of the current window (0: none yet)
	busy     int64 // busy nanoseconds in it
}

// record counts a turn that ran from t0 to t1. Once the window is
// loopWindow long it closes it and reports its busy share, to publish.
func (m *loopMeter) record(t0, t1 int64) (share float64, closed bool) {
	if m.winStart == 0 {
		m.winStart = t0
	}
	m.busy += t1 - t0
	span := t1 - m.winStart
	if span < int64(loopWindow) {
		return 0, false
	}
	share = min(1, float64(m.busy)/float64(span))
	m.winStart, m.busy = t1, 0
	return share, true
}

// shareAt is a loop's busy share as of now, from the last window it closed
// (at, with share): 0 when it closed none in the last two windows (the
// loop is idle, or never was busy).
func shareAt(share float64, at, now int64) float64 {
	if at == 0 || now-at > 2*int64(loopWindow) {
		return 0
	}
	return share
}
