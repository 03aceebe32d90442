package main

import (
	"log"
	"time"

	routingbench "github.com/tidegpu/tidegpu/bench/routing"
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
			log.Printf("lateness of 1 ms sleeps over %d: p50 %v p99 %v max %v", len(lates),
				routingbench.Percentile(lates, 50), routingbench.Percentile(lates, 99), routingbench.Percentile(lates, 100))
			lates, t0 = lates[:0], time.Now()
		}
	}
}
