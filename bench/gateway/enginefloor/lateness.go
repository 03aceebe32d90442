package main

import (
	"log"
	"slices"
	"time"
)

// lateness logs, every period, how late a goroutine outside the proxy's
// loops wakes from 1 ms sleeps (p50, p99, max): what a loop that holds its
// processor (P) in a system call costs the program's other work (a probe,
// a request that left its loop, the collector's workers), which waits for
// the runtime's sysmon to take that P back (-engine corolocked and loop
// with -loops equal to GOMAXPROCS; BENCHMARKS.md, issue 19, session 29).
func lateness(period time.Duration) {
	var lates []time.Duration
	t0 := time.Now()
	for {
		a := time.Now()
		time.Sleep(time.Millisecond)
		lates = append(lates, time.Since(a)-time.Millisecond)
		if time.Since(t0) >= period {
			p50, p99, max := latenessSummary(lates)
			log.Printf("lateness of 1 ms sleeps over %d: p50 %v p99 %v max %v", len(lates), p50, p99, max)
			lates, t0 = lates[:0], time.Now()
		}
	}
}

// latenessSummary returns the median, the 99th percentile (nearest rank)
// and the maximum of d, sorting it; zeros for none.
func latenessSummary(d []time.Duration) (p50, p99, max time.Duration) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	rank := func(p int) time.Duration { return d[(len(d)*p+99)/100-1] }
	return rank(50), rank(99), d[len(d)-1]
}
