package streamingbench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"github.com/tidegpu/tidegpu/bench/internal/peer"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Environment of the long variant.
const (
	// longEnv=1 runs the long variant: 120 tokens at 100 ms (12 s streams)
	// at N = 100 and 1,000 (nEnv overrides, e.g. "100,1000,3000").
	longEnv = "TIDEGPU_BENCH_STREAMS"
	nEnv    = "TIDEGPU_STREAMS_N"
	repsEnv = "TIDEGPU_STREAMS_REPS" // repetitions, interleaved (default 1)
	// tokenEnv: the long variant's time per token in milliseconds
	// (default 100). Servers stream at 10-50 ms per token; at 20, N = 600
	// carries the token rate of 3,000 at 100.
	tokenEnv = "TIDEGPU_STREAMS_TOKEN_MS"
	// A prebuilt tidegpu binary: peer.BinEnv (TIDEGPU_BIN; default: go
	// build ./cmd/tidegpu).
	// onlyEnv: comma-separated targets to run (direct, gateway, nginx,
	// haproxy; and nginx-alt, which runs only when named here: a second
	// nginx with the same configuration, right beside nginx, whose goal
	// table against nginx, an A/A run, shows how often nginx would meet
	// the goals set against itself on this machine).
	onlyEnv = "TIDEGPU_STREAMS_ONLY"
	// altEnv: a second tidegpu binary (another build of the gateway, such
	// as the other backend client), run as target "gateway-alt" right after
	// "gateway" in every repetition, so that the two see the same moment of
	// a shared machine.
	altEnv = "TIDEGPU_STREAMS_ALT_BIN"
	// pairedEnv: two targets, "gateway,nginx" (or "nginx,nginx-alt", an
	// A/A run), loaded at the same time instead of one after the other:
	// the N streams of a run alternate between them two by two (an NDJSON
	// and an SSE stream each), so that each carries N/2 while the machine
	// carries the load of N, and both meet the same moment of it. One at
	// a time, the tail of the TTFB follows how fast the shared machine
	// happens to be in the half minute of each run: the simulators' CPU
	// per stream, the same work each run, moved by 30 % between runs
	// minutes apart, and nginx against itself read 24-263 ms of added p99
	// where the first nginx read 11-45 ms (BENCHMARKS.md, issue 19,
	// session 32).
	pairedEnv = "TIDEGPU_STREAMS_PAIRED"
)

// maxGatewayKBPerStream is the regression guard on the gateway's resident
// memory per open stream at N >= 1,000 in the long variant, whatever peer
// ran beside it: 12.7-13.0 KB measured at 3,000 streams with streams on
// the event loop (session 11), 14.5-14.8 KB with the attempts served apart
// (session 10; 15.5-18.3 KB before), 21.6-23.5 KB with
// net/http's server and streams taken over from it (serverEngine=nethttp),
// 30.6-34.7 KB with net/http's writer (serverStreams=nethttp), 57-67 KB
// with the Transport. At 3,000 streams the gateway is also held to the
// issue's goal, no more than nginx's figure in the same run
// (nginxMemoryGoalN).
const maxGatewayKBPerStream = 25.0

// maxCPUOverNginx is the regression guard on the gateway's CPU per stream
// at nginxMemoryGoalN, against nginx's in the same run (means over the
// repetitions): 0.98x (single repetitions 0.95-1.00x) with streams packed
// onto few loops (session 14; the tree before it measured 0.99x in the
// same run, 1.02-1.07x in session 13's), 1.02-1.03x (single repetitions
// 0.96-1.08x) since the loop
// stopped giving back sockets about to close (session 12), 1.04-1.10x
// with streams on the event loop before that (sessions 11, 12), 1.13-1.21x
// without the loop; the goal is 1.0x, met by session 14's means
// on a machine whose noise is of the same size. Session 27 read
// 1.03-1.13x over nine invocations, session 14's build the same as its
// own beside it: the token path costs 0.96x nginx's, the starts and ends
// more (BENCHMARKS.md, issue 19, session 27), and the guard failed twice
// on unchanged code. Session 28, with the connections off package net:
// 0.94-1.11x per repetition, the means of four invocations 0.96-1.06x.
const maxCPUOverNginx = 1.10

// maxCPUOverNginxPaired is the same guard when the gateway and nginx were
// loaded at the same time (pairedEnv), on the median of the repetitions'
// ratios: there the ratio resolves to a few percent where one at a time
// it does not. Session 32 read 0.98-1.03x per repetition (median 1.005x
// over ten), and nginx against an identical nginx 0.99-1.03x.
const maxCPUOverNginxPaired = 1.05

// nginxMemoryGoalN is the stream count at which the gateway's memory per
// open stream, averaged over the repetitions, must not exceed nginx's.
const nginxMemoryGoalN = 3000

// params is one variant's load.
type params struct {
	ns        []int
	reps      int
	ttft      time.Duration
	tokenTime time.Duration
	tokens    int
	stagger   time.Duration // between stream starts
	idle      time.Duration // idle CPU window
}

func variant(t *testing.T) params {
	if os.Getenv(longEnv) != "1" {
		// CI-safe: a few short streams, checks that every path works.
		return params{ns: []int{20}, reps: 1, ttft: 20 * time.Millisecond, tokenTime: 20 * time.Millisecond, tokens: 10, stagger: time.Millisecond, idle: 2 * time.Second}
	}
	p := params{ns: []int{100, 1000}, reps: 1, ttft: 50 * time.Millisecond, tokenTime: 100 * time.Millisecond, tokens: 120, stagger: time.Millisecond, idle: 10 * time.Second}
	if v := os.Getenv(nEnv); v != "" {
		p.ns = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 5000 {
				t.Fatalf("%s=%q: want comma-separated stream counts in 1..5000", nEnv, v)
			}
			p.ns = append(p.ns, n)
		}
	}
	if v := os.Getenv(tokenEnv); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 1 || ms > 1000 {
			t.Fatalf("%s=%q: want the time per token in milliseconds, 1..1000", tokenEnv, v)
		}
		p.tokenTime = time.Duration(ms) * time.Millisecond
	}
	if v := os.Getenv(repsEnv); v != "" {
		r, err := strconv.Atoi(v)
		if err != nil || r < 1 || r > 10 {
			t.Fatalf("%s=%q: want repetitions in 1..10", repsEnv, v)
		}
		p.reps = r
	}
	return p
}

// target is one way to the simulators: straight, or a proxy it starts.
type target struct {
	name  string
	start func(t *testing.T) (addr string, pr *peer.Proc) // nil proc: direct
}

// inOrder is the order of the targets in repetition rep: direct first,
// then the proxies turned by rep (the first moves to the end each
// repetition), so that over as many repetitions as there are proxies each
// runs in each place once, right after direct included. A build X-alt
// (gateway-alt, nginx-alt) moves as one with X, right after it so that the
// two see the same moment, and the two swap places every k repetitions (k
// proxies, each pair counted once): an A/B over 2k repetitions has each
// build in each place as often. The place is not neutral: the same two
// builds, one after the other against the same simulators, read
// 0.90-1.17x for the second over the first (BENCHMARKS.md, issue 19,
// session 28), and the gateway, always first after direct until session
// 31, missed its TTFB goal most in that place.
func inOrder(targets []target, rep int) []target {
	var out []target
	var units [][]target
	unitOf := map[string]int{} // by the name without "-alt"
	for _, tg := range targets {
		if tg.name == "direct" {
			out = append(out, tg)
			continue
		}
		base := strings.TrimSuffix(tg.name, "-alt")
		if u, ok := unitOf[base]; ok {
			units[u] = append(units[u], tg)
			continue
		}
		unitOf[base] = len(units)
		units = append(units, []target{tg})
	}
	k := len(units)
	if k == 0 {
		return out
	}
	if (rep/k)%2 == 1 {
		for i, u := range units {
			if len(u) == 2 {
				units[i] = []target{u[1], u[0]}
			}
		}
	}
	r := rep % k
	for _, u := range slices.Concat(units[r:], units[:r]) {
		out = append(out, u...)
	}
	return out
}

func TestStreaming(t *testing.T) {
	if testing.Short() {
		t.Skip("streaming benchmark: builds tidegpu and runs real processes; runs without -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc for memory and CPU")
	}
	p := variant(t)
	bin := peer.TidegpuBinary(t)
	tmp := t.TempDir()

	var sims []string
	var simProcs []*peer.Proc
	for i := range 2 {
		addr := peer.FreeAddr(t)
		pr := peer.Start(t, filepath.Join(tmp, fmt.Sprintf("sim%d.log", i)), bin, "sim", "--addr", addr,
			"--ttft", p.ttft.String(), "--token-time", p.tokenTime.String(), "--output-tokens", strconv.Itoa(p.tokens),
			"--batch-slowdown", "0", "--max-batch", "100000", "--instance-id", fmt.Sprintf("sim-%d", i))
		peer.WaitHTTP(t, pr, "http://"+addr+"/healthz")
		sims = append(sims, addr)
		simProcs = append(simProcs, pr)
	}

	gateway := func(bin, log string) func(t *testing.T) (string, *peer.Proc) {
		return func(t *testing.T) (string, *peer.Proc) {
			addr, admin := peer.FreeAddr(t), peer.FreeAddr(t)
			args := []string{"gateway", "--addr", addr, "--admin-addr", admin, "--log-level", "warn"}
			for _, s := range sims {
				args = append(args, "--backend", "http://"+s)
			}
			pr := peer.Start(t, filepath.Join(tmp, log), bin, args...)
			peer.WaitHTTP(t, pr, "http://"+admin+"/healthz")
			return addr, pr
		}
	}
	targets := []target{
		{"direct", nil},
		{"gateway", gateway(bin, "gateway.log")},
	}
	if alt := os.Getenv(altEnv); alt != "" {
		if _, err := os.Stat(alt); err != nil {
			t.Fatalf("%s=%q: %v (want a tidegpu binary)", altEnv, alt, err)
		}
		targets = append(targets, target{"gateway-alt", gateway(alt, "gateway-alt.log")})
		t.Logf("gateway: %s; gateway-alt: %s", bin, alt)
	}
	if nginx := peer.LookBin("nginx", "/usr/sbin/nginx"); nginx != "" {
		start := func(t *testing.T) (string, *peer.Proc) {
			return peer.StartNginx(t, nginx, func(dir, addr string) string { return NginxConfig(dir, addr, sims) })
		}
		targets = append(targets, target{"nginx", start})
		if named(os.Getenv(onlyEnv), "nginx-alt") {
			targets = append(targets, target{"nginx-alt", start})
		}
	} else {
		t.Log("nginx not found (Debian package nginx): skipped")
	}
	if haproxy := peer.LookBin("haproxy", "/usr/sbin/haproxy"); haproxy != "" {
		targets = append(targets, target{"haproxy", func(t *testing.T) (string, *peer.Proc) {
			addr := peer.FreeAddr(t)
			dir := t.TempDir()
			cfg := filepath.Join(dir, "haproxy.cfg")
			if err := os.WriteFile(cfg, []byte(HAProxyConfig(addr, sims)), 0o600); err != nil {
				t.Fatal(err)
			}
			pr := peer.Start(t, filepath.Join(dir, "out.log"), haproxy, "-db", "-f", cfg)
			peer.WaitTCP(t, pr, addr)
			return addr, pr
		}})
	} else {
		t.Log("haproxy not found (Debian package haproxy): skipped")
	}
	if only := os.Getenv(onlyEnv); only != "" {
		var keep []target
		for _, tg := range targets {
			if tg.name == "direct" || named(only, tg.name) {
				keep = append(keep, tg)
			}
		}
		targets = keep
	}

	t.Logf("machine: %d CPUs, load average at start %s", runtime.NumCPU(), peer.LoadAvg())
	t.Logf("load: 2 simulators (TTFT %v, %v/token, %d tokens, no batch slowdown); streams started %v apart, half NDJSON (/api/chat), half SSE (/v1/chat/completions)",
		p.ttft, p.tokenTime, p.tokens, p.stagger)

	paired, err := pairOf(os.Getenv(pairedEnv), targets)
	if err != nil {
		t.Fatalf("%s: %v", pairedEnv, err)
	}
	if paired != nil {
		t.Logf("paired: %s and %s loaded at the same time, N/2 streams each", paired[0], paired[1])
	}

	results := map[string][]Summary{} // name/N → one per repetition
	for _, n := range p.ns {
		for rep := range p.reps {
			for _, u := range unitsOf(inOrder(targets, rep), paired) {
				for i, s := range runAtOnce(t, u, n, p, sims, simProcs) {
					key := fmt.Sprintf("%s/%d", u[i].name, n)
					results[key] = append(results[key], s)
					t.Logf("N=%d rep %d %-8s failures %d (first: %v) TTFB p50 %v p99 %v (tail started %v-%v) gap p99 %v mem/stream %.1f KB (peak RSS %.1f MB) CPU/stream %.2f ms idle CPU %.2f%% sims CPU/stream %.2f ms, machine idle in its busiest second %.0f%%",
						n, rep+1, u[i].name, s.Failures, s.FirstErr, s.TTFB50.Round(100*time.Microsecond), s.TTFB99.Round(100*time.Microsecond),
						s.TailFrom.Round(10*time.Millisecond), s.TailTo.Round(10*time.Millisecond), s.Gap99.Round(100*time.Microsecond), s.MemPerStreamKB, s.PeakRSSMB, s.CPUPerStreamMs, s.IdleCPUPercent, s.BackendCPUPerSMs, s.BusiestIdle)
				}
			}
		}
	}
	t.Logf("load average at end %s", peer.LoadAvg())

	var b strings.Builder
	b.WriteString("\n| N | target | failures | TTFB p50 | TTFB p99 | added p50 / p99 over direct | gap p99 | memory per open stream | CPU per stream | idle CPU |\n")
	b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range p.ns {
		d := results[fmt.Sprintf("direct/%d", n)]
		for _, tg := range targets {
			rs := results[fmt.Sprintf("%s/%d", tg.name, n)]
			fails := 0
			for _, r := range rs {
				fails += r.Failures
			}
			add := "—"
			if tg.name != "direct" {
				add = span(rs, func(i int, r Summary) string {
					return fmt.Sprintf("%.1f / %.1f", ms(r.TTFB50-d[i].TTFB50), ms(r.TTFB99-d[i].TTFB99))
				})
			}
			mem, cpu, idle := "—", "—", "—"
			if tg.name != "direct" {
				mem = span(rs, func(_ int, r Summary) string { return fmt.Sprintf("%.1f KB", r.MemPerStreamKB) })
				cpu = span(rs, func(_ int, r Summary) string { return fmt.Sprintf("%.2f ms", r.CPUPerStreamMs) })
				idle = span(rs, func(_ int, r Summary) string { return fmt.Sprintf("%.2f %%", r.IdleCPUPercent) })
			} else {
				cpu = span(rs, func(_ int, r Summary) string { return fmt.Sprintf("(sims %.2f ms)", r.BackendCPUPerSMs) })
			}
			fmt.Fprintf(&b, "| %d | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", n, tg.name, fails,
				span(rs, func(_ int, r Summary) string { return fmt.Sprintf("%.1f ms", ms(r.TTFB50)) }),
				span(rs, func(_ int, r Summary) string { return fmt.Sprintf("%.1f ms", ms(r.TTFB99)) }),
				add,
				span(rs, func(_ int, r Summary) string { return fmt.Sprintf("%.1f ms", ms(r.Gap99)) }),
				mem, cpu, idle)
		}
	}
	t.Log(b.String())

	// Issue 19's item 2 goals, judged per repetition against nginx in the
	// same repetition and on the median over them (the goals are set at
	// 3,000 streams); with nginx-alt, the same goals for nginx against
	// itself.
	for _, n := range p.ns {
		ngx, d := results[fmt.Sprintf("nginx/%d", n)], results[fmt.Sprintf("direct/%d", n)]
		for _, name := range []string{"gateway", "gateway-alt", "nginx-alt"} {
			if rs := results[fmt.Sprintf("%s/%d", name, n)]; len(rs) > 0 && len(ngx) > 0 && len(d) > 0 {
				label := name + " / nginx"
				if paired != nil && slices.Contains(paired, name) && slices.Contains(paired, "nginx") {
					label += fmt.Sprintf(", loaded at once, %d each", n/2)
				}
				t.Log("\n" + GoalTable(n, label, Goals(rs, ngx, d)))
				if rs[0].PooledWorst > 0 {
					var in, of int
					var per []string
					for _, r := range rs {
						in, of = in+r.InWorst, of+r.PooledWorst
						per = append(per, fmt.Sprintf("%d of %d", r.InWorst, r.PooledWorst))
					}
					t.Logf("%s's streams among the pooled worst 1 %% of TTFBs of the two loaded at once: %s; %d of %d (%.0f %%) over all repetitions (identical proxies: about half)",
						name, strings.Join(per, ", "), in, of, 100*float64(in)/float64(max(of, 1)))
				}
			}
		}
	}

	for key, rs := range results {
		for _, r := range rs {
			if r.Failures > 0 {
				t.Errorf("%s: %d failed streams; first: %v", key, r.Failures, r.FirstErr)
			}
		}
	}
	// Regression guard on the gateway's memory per open stream, the figure
	// that repeats within 2 % between runs on a shared machine (BENCHMARKS.md,
	// "Long streams": 57.7–68.6 KB at N = 1,000 and 3,000 with net/http's
	// Transport, the default; 32–43 KB with the h1 client, for which 50 KB
	// would be the guard if it becomes the default). Only the long variant:
	// at 20 streams fixed costs dominate.
	if os.Getenv(longEnv) == "1" {
		// "gateway" only: "gateway-alt" is a build compared with it.
		for _, n := range p.ns {
			for _, r := range results[fmt.Sprintf("gateway/%d", n)] {
				if n >= 1000 && r.MemPerStreamKB > maxGatewayKBPerStream {
					t.Errorf("gateway N=%d: %.1f KB per open stream, above the guard of %.0f KB", n, r.MemPerStreamKB, maxGatewayKBPerStream)
				}
			}
			gw, ngx := results[fmt.Sprintf("gateway/%d", n)], results[fmt.Sprintf("nginx/%d", n)]
			if n >= nginxMemoryGoalN && len(gw) > 0 && len(ngx) > 0 {
				mem := func(r Summary) float64 { return r.MemPerStreamKB }
				if g, x := meanOf(gw, mem), meanOf(ngx, mem); g > x {
					t.Errorf("gateway N=%d: %.1f KB per open stream on average, nginx %.1f KB: the goal is no more than nginx's", n, g, x)
				}
				cpu := func(r Summary) float64 { return r.CPUPerStreamMs }
				if slices.Contains(paired, "gateway") && slices.Contains(paired, "nginx") {
					g := Goals(gw, ngx, results[fmt.Sprintf("direct/%d", n)])[goalCPU]
					if g.MedianOf > maxCPUOverNginxPaired {
						t.Errorf("gateway N=%d, loaded at once with nginx: CPU per stream %.3fx nginx's on the median of %d repetitions: above the guard of %.2fx", n, g.MedianOf, len(g.PerRep), maxCPUOverNginxPaired)
					}
				} else if g, x := meanOf(gw, cpu), meanOf(ngx, cpu); g > maxCPUOverNginx*x {
					t.Errorf("gateway N=%d: %.2f ms of CPU per stream on average, nginx %.2f ms: above the guard of %.2fx nginx's", n, g, x, maxCPUOverNginx)
				}
			}
		}
	}

	// The simulators must not be the bottleneck: straight to them, the
	// first token comes within their TTFT plus a margin and tokens keep
	// their pace.
	for _, n := range p.ns {
		for _, d := range results[fmt.Sprintf("direct/%d", n)] {
			if d.TTFB99 > p.ttft+250*time.Millisecond || d.Gap99 > p.tokenTime+250*time.Millisecond {
				t.Errorf("direct N=%d: TTFB p99 %v, gap p99 %v: the simulators (or this machine) cannot hold the load", n, d.TTFB99, d.Gap99)
			}
		}
	}
}

// named reports whether the comma-separated list holds name.
func named(list, name string) bool {
	return slices.Contains(strings.Split(list, ","), name)
}

// pairOf parses pairedEnv's value v: "" for none, else two distinct
// proxies among targets.
func pairOf(v string, targets []target) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	names := strings.Split(v, ",")
	if len(names) != 2 || names[0] == names[1] {
		return nil, fmt.Errorf("%q: want two different targets, such as gateway,nginx", v)
	}
	for _, name := range names {
		if name == "direct" || !slices.ContainsFunc(targets, func(tg target) bool { return tg.name == name }) {
			return nil, fmt.Errorf("%q: %s is not a proxy this run has (name it in %s if it is left out; nginx-alt runs only when named there)", v, name, onlyEnv)
		}
	}
	return names, nil
}

// unitsOf groups the targets of one repetition, in order, into what runs
// at once: each alone, but the two of paired together, in the place and
// order the first of them has in order.
func unitsOf(order []target, paired []string) [][]target {
	var units [][]target
	at := -1
	for _, tg := range order {
		if !slices.Contains(paired, tg.name) {
			units = append(units, []target{tg})
			continue
		}
		if at < 0 {
			at = len(units)
			units = append(units, nil)
		}
		units[at] = append(units[at], tg)
	}
	return units
}

// slotOf is the target of unit (of k at once) that stream i goes to:
// streams go two by two, an NDJSON and an SSE one (Format(i%2)), to each.
func slotOf(i, k int) int {
	if k < 2 {
		return 0
	}
	return (i / 2) % k
}

// runAtOnce starts the targets of unit, warms them up, measures their idle
// CPU, then runs n streams spread over them (slotOf) and returns one
// Summary per target. Straight to the simulators (direct), streams
// alternate between the two.
func runAtOnce(t *testing.T, unit []target, n int, p params, sims []string, simProcs []*peer.Proc) []Summary {
	k := len(unit)
	addrs := make([]string, k)
	var pids []int
	var prs []*peer.Proc
	for i, tg := range unit {
		if tg.start == nil {
			addrs[i] = sims[0]
			continue
		}
		var pr *peer.Proc
		addrs[i], pr = tg.start(t)
		prs = append(prs, pr)
		pids = append(pids, pr.PID)
	}
	direct := len(pids) == 0
	// Warm up (connections, pools), then measure idle, then the run.
	for _, a := range addrs {
		_ = run(10, p, func(int) string { return a })
	}
	idle := idleCPU(pids, p.idle)
	pick := func(i int) string { return addrs[slotOf(i, k)] }
	if direct {
		pick = func(i int) string { return sims[i%len(sims)] }
	}
	var simTicks0 int64
	for _, sp := range simProcs {
		simTicks0 += peer.CPUTicks(sp.PID)
	}
	var streams []Stream
	m, busiestIdle := measure(pids, func() { streams = run(n, p, pick) })
	var simTicks1 int64
	for _, sp := range simProcs {
		simTicks1 += peer.CPUTicks(sp.PID)
	}
	parts := make([][]Stream, k)
	for i, st := range streams {
		parts[slotOf(i, k)] = append(parts[slotOf(i, k)], st)
	}
	out := make([]Summary, k)
	var inWorst []int
	var pooled int
	if k > 1 {
		inWorst, pooled = WorstShare(parts, p.tokens, 1)
	}
	for i := range unit {
		s := Summarize(parts[i], p.tokens)
		s.BackendCPUPerSMs = ticksMs(simTicks1-simTicks0) / float64(n)
		s.BusiestIdle = busiestIdle
		if k > 1 {
			s.InWorst, s.PooledWorst = inWorst[i], pooled
		}
		if !direct {
			c := len(parts[i])
			s.IdleCPUPercent = idle[i]
			s.MemPerStreamKB = PerStream(m[i].peakRSS, m[i].baseRSS, c)
			s.PeakRSSMB = float64(m[i].peakRSS) / (1 << 20)
			s.CPUPerStreamMs = ticksMs(m[i].ticks) / float64(c)
		}
		out[i] = s
	}
	for _, pr := range prs {
		pr.Stop()
	}
	return out
}

// span prints one value per repetition, "a" or "a–b" (min–max by text).
func span(rs []Summary, f func(int, Summary) string) string {
	if len(rs) == 0 {
		return "—"
	}
	var parts []string
	for i, r := range rs {
		parts = append(parts, f(i, r))
	}
	return strings.Join(parts, ", ")
}

// run opens n streams, stream i to addr(i), started p.stagger apart, half
// NDJSON and half SSE (Format(i%2)), and waits for them all.
func run(n int, p params, addr func(i int) string) []Stream {
	out := make([]Stream, n)
	var wg sync.WaitGroup
	limit := time.Duration(p.tokens)*p.tokenTime*4 + 30*time.Second
	begin := time.Now()
	for i := range n {
		a := addr(i)
		f := Format(i % 2)
		start := time.Since(begin)
		wg.Go(func() {
			out[i] = stream(a, f, limit)
			out[i].Start = start
		})
		time.Sleep(p.stagger) // pacing of the arrivals, not a wait for a condition
	}
	wg.Wait()
	return out
}

// stream runs one client on its own connection.
func stream(addr string, f Format, limit time.Duration) (s Stream) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return Stream{Err: err}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(limit))
	t0 := time.Now()
	if _, err := c.Write(Request(f, addr)); err != nil {
		return Stream{Err: err}
	}
	br := bufio.NewReaderSize(c, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return Stream{Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Stream{Err: fmt.Errorf("status %s: %s", resp.Status, bytes.TrimSpace(msg))}
	}
	lines := bufio.NewReaderSize(resp.Body, 4096)
	var last time.Time
	for {
		line, err := lines.ReadSlice('\n')
		if len(line) > 0 {
			tok, end := Chunk(f, line)
			now := time.Now()
			if tok {
				if s.Tokens == 0 {
					s.TTFB = now.Sub(t0)
				} else {
					s.Gaps = append(s.Gaps, now.Sub(last))
				}
				last = now
				s.Tokens++
			}
			if end {
				return s
			}
		}
		if errors.Is(err, io.EOF) {
			s.Err = fmt.Errorf("stream ended after %d tokens without its end", s.Tokens)
			return s
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			s.Err = err
			return s
		}
	}
}

// measured is what measure saw of one process.
type measured struct {
	baseRSS, peakRSS int64 // bytes
	ticks            int64 // CPU clock ticks over the run
}

// measure samples the resident set of each of pids (with its children)
// and the machine's CPU every 100 ms while f runs, and each pid's CPU time
// over it: one measured per pid, and the machine's idle share in its
// busiest second (BusiestIdle).
func measure(pids []int, f func()) ([]measured, float64) {
	m := make([]measured, len(pids))
	c0 := make([]int64, len(pids))
	peaks := make([]atomic.Int64, len(pids))
	for i, pid := range pids {
		m[i].baseRSS = peer.RSS(pid)
		peaks[i].Store(m[i].baseRSS)
		c0[i] = peer.CPUTicks(pid)
	}
	var machine []CPUSample
	sample := func() {
		if busy, total, ok := peer.MachineCPU(); ok {
			machine = append(machine, CPUSample{busy, total})
		}
	}
	sample()
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				sample()
				for i, pid := range pids {
					if r := peer.RSS(pid); r > peaks[i].Load() {
						peaks[i].Store(r)
					}
				}
			}
		}
	}()
	f()
	close(done)
	<-sampled
	for i, pid := range pids {
		m[i].peakRSS = peaks[i].Load()
		m[i].ticks = peer.CPUTicks(pid) - c0[i]
	}
	return m, BusiestIdle(machine, 10)
}

// idleCPU is each of pids' CPU over the same d, in percent of one core
// (none and no wait for no pids).
func idleCPU(pids []int, d time.Duration) []float64 {
	out := make([]float64, len(pids))
	if len(pids) == 0 {
		return out
	}
	c0 := make([]int64, len(pids))
	for i, pid := range pids {
		c0[i] = peer.CPUTicks(pid)
	}
	time.Sleep(d) // the measurement window itself
	for i, pid := range pids {
		out[i] = ticksMs(peer.CPUTicks(pid)-c0[i]) / float64(d.Milliseconds()) * 100
	}
	return out
}

func ticksMs(t int64) float64 { return float64(t) * 1000 / peer.ClkTck }

// meanOf is the mean of f over rs (0 for none).
func meanOf(rs []Summary, f func(Summary) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	sum := 0.0
	for _, r := range rs {
		sum += f(r)
	}
	return sum / float64(len(rs))
}

func TestInOrder(t *testing.T) {
	names := func(ts []target) string {
		var b []string
		for _, tg := range ts {
			b = append(b, tg.name)
		}
		return strings.Join(b, ",")
	}
	mk := func(s string) []target {
		var ts []target
		for _, n := range strings.Split(s, ",") {
			ts = append(ts, target{name: n})
		}
		return ts
	}
	for _, tc := range []struct {
		in   string
		rep  int
		want string
	}{
		{"direct,gateway,gateway-alt,nginx", 0, "direct,gateway,gateway-alt,nginx"},
		{"direct,gateway,gateway-alt,nginx", 1, "direct,nginx,gateway,gateway-alt"},
		{"direct,gateway,gateway-alt,nginx", 2, "direct,gateway-alt,gateway,nginx"},
		{"direct,gateway,gateway-alt,nginx", 3, "direct,nginx,gateway-alt,gateway"},
		{"direct,gateway,gateway-alt,nginx", 4, "direct,gateway,gateway-alt,nginx"},
		{"direct,gateway,gateway-alt", 1, "direct,gateway-alt,gateway"},
		{"direct,gateway,gateway-alt", 2, "direct,gateway,gateway-alt"},
		{"direct,gateway,nginx,haproxy", 1, "direct,nginx,haproxy,gateway"},
		{"direct,gateway,nginx,haproxy", 2, "direct,haproxy,gateway,nginx"},
		{"gateway,nginx", 1, "nginx,gateway"},
		{"direct,gateway-alt,nginx", 1, "direct,nginx,gateway-alt"},
		// nginx-alt, the A/A run, moves with nginx as gateway-alt does
		// with the gateway.
		{"direct,gateway,nginx,nginx-alt", 0, "direct,gateway,nginx,nginx-alt"},
		{"direct,gateway,nginx,nginx-alt", 1, "direct,nginx,nginx-alt,gateway"},
		{"direct,gateway,nginx,nginx-alt", 2, "direct,gateway,nginx-alt,nginx"},
		{"direct,gateway,nginx,nginx-alt", 3, "direct,nginx-alt,nginx,gateway"},
		{"direct,gateway,gateway-alt,nginx,nginx-alt", 2, "direct,gateway-alt,gateway,nginx-alt,nginx"},
		{"direct", 5, "direct"},
	} {
		in := mk(tc.in)
		if got := names(inOrder(in, tc.rep)); got != tc.want {
			t.Errorf("%s, rep %d: %s, want %s", tc.in, tc.rep, got, tc.want)
		}
		if names(in) != tc.in {
			t.Errorf("inOrder changed its argument: %s", names(in))
		}
	}
}

func TestPairedUnits(t *testing.T) {
	mk := func(s string) []target {
		var ts []target
		for _, n := range strings.Split(s, ",") {
			ts = append(ts, target{name: n})
		}
		return ts
	}
	show := func(us [][]target) string {
		var b []string
		for _, u := range us {
			var names []string
			for _, tg := range u {
				names = append(names, tg.name)
			}
			b = append(b, strings.Join(names, "+"))
		}
		return strings.Join(b, " ")
	}
	all := mk("direct,gateway,nginx,nginx-alt,haproxy")
	for _, tc := range []struct {
		env, order, want, err string
	}{
		{"", "direct,gateway,nginx", "direct gateway nginx", ""},
		{"gateway,nginx", "direct,gateway,haproxy,nginx", "direct gateway+nginx haproxy", ""},
		// The turned order decides who takes the first two streams.
		{"gateway,nginx", "direct,nginx,haproxy,gateway", "direct nginx+gateway haproxy", ""},
		{"nginx,nginx-alt", "direct,nginx-alt,nginx,gateway", "direct nginx-alt+nginx gateway", ""},
		{"gateway", "", "", "want two different targets"},
		{"nginx,nginx", "", "", "want two different targets"},
		{"gateway,nginx,haproxy", "", "", "want two different targets"},
		{"direct,nginx", "", "", "direct is not a proxy"},
		{"gateway,envoy", "", "", "envoy is not a proxy"},
	} {
		paired, err := pairOf(tc.env, all)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("pairOf(%q): %v, want an error with %q", tc.env, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("pairOf(%q): %v", tc.env, err)
		}
		if got := show(unitsOf(mk(tc.order), paired)); got != tc.want {
			t.Errorf("%q over %s: %s, want %s", tc.env, tc.order, got, tc.want)
		}
	}
	if _, err := pairOf("gateway,nginx-alt", mk("direct,gateway,nginx")); err == nil || !strings.Contains(err.Error(), onlyEnv) {
		t.Errorf("nginx-alt not named: %v, want a pointer to %s", err, onlyEnv)
	}
}

func TestSlotOf(t *testing.T) {
	// Two by two: each target gets an NDJSON (even i) and an SSE (odd i)
	// stream in turn, and half of the streams.
	var got []int
	for i := range 8 {
		got = append(got, slotOf(i, 2))
	}
	if want := []int{0, 0, 1, 1, 0, 0, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("slotOf(0..7, 2) = %v, want %v", got, want)
	}
	for i := range 4 {
		if s := slotOf(i, 1); s != 0 {
			t.Errorf("slotOf(%d, 1) = %d, want 0", i, s)
		}
	}
}

func TestNamed(t *testing.T) {
	for _, tc := range []struct {
		list, name string
		want       bool
	}{
		{"direct,gateway,nginx-alt", "nginx-alt", true},
		{"direct,gateway,nginx-alt", "nginx", false},
		{"nginx", "nginx", true},
		{"", "nginx", false},
	} {
		if got := named(tc.list, tc.name); got != tc.want {
			t.Errorf("named(%q, %q) = %v, want %v", tc.list, tc.name, got, tc.want)
		}
	}
}
