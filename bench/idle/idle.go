// Package idlebench measures what an idle proxy costs (issue 19, item 4):
// the CPU time `tidegpu gateway` (the product's binary, as deployed: the
// default scrape of each backend's /metrics, the active probe, the admin
// server with its dashboard sampler) spends over a window in which no
// request arrives, with 2 and with 10 `tidegpu sim` backends, beside nginx,
// HAProxy and HAProxy with active health checks on the same backends, all
// measured over the same window from /proc/PID/stat (the process and its
// children: nginx's workers). The simulators' own CPU is reported apart, so
// that what is measured is the proxy.
//
// This file holds the pure parts; idle_test.go runs the experiment.
package idlebench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// ClockTicks is the kernel's USER_HZ, 100 on Linux (sysconf(_SC_CLK_TCK)).
const ClockTicks = 100

// CPUPercent is ticks of CPU time over the window d, in percent of one
// core. Pure.
func CPUPercent(ticks int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(ticks) * 1000 / ClockTicks / float64(d.Milliseconds()) * 100
}

// WithChecks returns an HAProxy configuration with an active health check
// (GET every inter) on every server line of cfg: HAProxy doing the work
// the gateway's probe does. Pure.
func WithChecks(cfg string, inter time.Duration) string {
	lines := strings.Split(cfg, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "server ") {
			lines[i] = l + fmt.Sprintf(" check inter %dms", inter.Milliseconds())
		}
		if strings.TrimSpace(l) == "balance leastconn" {
			lines[i] = l + "\n    option httpchk GET /"
		}
	}
	return strings.Join(lines, "\n")
}

// Span prints the values as "min–max (n)" with unit, or "—" for none. Pure.
func Span(vs []float64, format string) string {
	if len(vs) == 0 {
		return "—"
	}
	lo, hi := slices.Min(vs), slices.Max(vs)
	if lo == hi {
		return fmt.Sprintf(format+" (%d)", lo, len(vs))
	}
	return fmt.Sprintf(format+"–"+format+" (%d)", lo, hi, len(vs))
}
