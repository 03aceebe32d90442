// Package streamingbench measures what a proxy costs for long token streams
// (issue 19, item 1): N concurrent streaming clients, half Ollama NDJSON
// (/api/chat) and half OpenAI SSE (/v1/chat/completions), against two real
// `tidegpu sim` processes — straight (the baseline, which also shows that
// the simulators are not the bottleneck), through `tidegpu gateway`, through
// nginx (proxy_buffering off, keep-alive upstream) and through HAProxy
// (http mode). Per target it reports failures, TTFB p50/p99 and what the
// proxy adds over direct, the p99 gap between chunks, the proxy's resident
// memory per open stream, its CPU time per stream and its idle CPU.
//
// This file holds the pure parts: the peers' configurations, the client's
// request, the summary of a run (with when its TTFB tail started) and the
// judgement of issue 19's item 2 goals per repetition and on the median
// over them (Goals, GoalTable); streaming_test.go runs the experiment.
package streamingbench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Format is a stream's wire format.
type Format int

const (
	NDJSON Format = iota // Ollama /api/chat
	SSE                  // OpenAI /v1/chat/completions
)

func (f Format) String() string {
	if f == SSE {
		return "sse"
	}
	return "ndjson"
}

// Request returns the raw HTTP/1.1 request of one streaming client of
// format f to host (host:port): a chat with one message, streamed, on a
// connection closed after the answer. Pure.
func Request(f Format, host string) []byte {
	path, body := "/api/chat", `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"Tell me about the sea."}],"stream":true}`
	if f == SSE {
		path, body = "/v1/chat/completions", `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"Tell me about the sea."}],"stream":true}`
	}
	return fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		path, host, len(body), body)
}

// Chunk classifies one line of a stream's body: whether it carries a token
// (an NDJSON object or an SSE data line other than [DONE]) and whether it
// ends the stream (NDJSON "done":true, SSE [DONE]). Pure.
func Chunk(f Format, line []byte) (token, end bool) {
	s := strings.TrimRight(string(line), "\r\n")
	if f == NDJSON {
		if s == "" {
			return false, false
		}
		if strings.Contains(s, `"done":true`) {
			return false, true
		}
		return true, false
	}
	data, ok := strings.CutPrefix(s, "data:")
	if !ok {
		return false, false
	}
	data = strings.TrimSpace(data)
	if data == "[DONE]" {
		return false, true
	}
	return true, false
}

// Stream is one client's outcome.
type Stream struct {
	Err    error
	TTFB   time.Duration   // request sent → first token line
	Gaps   []time.Duration // between consecutive token lines
	Tokens int
	Start  time.Duration // when it started, from the start of its run
}

// Summary is one target's row for one N.
type Summary struct {
	N, Failures      int
	TTFB50, TTFB99   time.Duration
	Gap99            time.Duration
	FirstErr         error
	TokensPerStream  int // the most common count, for the check
	ShortStreams     int // streams with fewer tokens than wantTokens
	MemPerStreamKB   float64
	CPUPerStreamMs   float64
	IdleCPUPercent   float64 // of one core
	PeakRSSMB        float64
	BackendCPUPerSMs float64 // the simulators' CPU per stream (the bottleneck check)
	// TailFrom and TailTo bound when the streams of the TTFB tail (at or
	// above the p99) started, from their 10th to their 90th percentile: a
	// narrow window is one stall of the proxy, a wide one a slow machine.
	TailFrom, TailTo time.Duration
	// InWorst is how many of the run's pooled worst 1 % of TTFBs
	// (WorstShare) were this target's, of PooledWorst, when two targets
	// were loaded at once (PooledWorst 0 otherwise).
	InWorst, PooledWorst int
	// BusiestIdle is the whole machine's idle share, in percent, in the
	// busiest second of the run (BusiestIdle): near 0, every core was
	// taken and the TTFB tail is the kernel's choice of who waits.
	BusiestIdle float64
}

// Summarize folds the streams of one run; a stream failed if it has an
// error or fewer than wantTokens tokens. Pure.
func Summarize(streams []Stream, wantTokens int) Summary {
	s := Summary{N: len(streams)}
	var ttfb, gaps []time.Duration
	for _, st := range streams {
		if st.Err == nil && st.Tokens < wantTokens {
			s.ShortStreams++
		}
		if st.Err != nil || st.Tokens < wantTokens {
			s.Failures++
			if s.FirstErr == nil {
				s.FirstErr = st.Err
				if st.Err == nil {
					s.FirstErr = fmt.Errorf("%d of %d tokens", st.Tokens, wantTokens)
				}
			}
			continue
		}
		ttfb = append(ttfb, st.TTFB)
		gaps = append(gaps, st.Gaps...)
	}
	s.TTFB50, s.TTFB99 = Percentile(ttfb, 50), Percentile(ttfb, 99)
	s.Gap99 = Percentile(gaps, 99)
	var tail []time.Duration
	for _, st := range streams {
		if st.Err == nil && st.Tokens >= wantTokens && st.TTFB >= s.TTFB99 {
			tail = append(tail, st.Start)
		}
	}
	s.TailFrom, s.TailTo = Percentile(tail, 10), Percentile(tail, 90)
	return s
}

// WorstShare pools the streams of targets loaded at the same time (parts,
// one per target) and counts, per target, its streams among the pool's
// worst p percent by TTFB (at least one stream; a failed stream counts
// as worse than any), and returns the counts and the number of worst.
// Two p99s, one per target, each rest on the few streams of one target's
// tail, and move by as much between identical proxies side by side; who
// owns the pooled tail compares the two on all of it, and identical
// proxies share it about evenly. Pure.
func WorstShare(parts [][]Stream, wantTokens int, p float64) (counts []int, worst int) {
	type entry struct {
		part int
		bad  bool
		ttfb time.Duration
	}
	var pool []entry
	for i, ss := range parts {
		for _, st := range ss {
			pool = append(pool, entry{i, st.Err != nil || st.Tokens < wantTokens, st.TTFB})
		}
	}
	counts = make([]int, len(parts))
	if len(pool) == 0 {
		return counts, 0
	}
	slices.SortStableFunc(pool, func(a, b entry) int {
		if a.bad != b.bad {
			if a.bad {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.ttfb, a.ttfb)
	})
	worst = max(1, int(math.Ceil(p/100*float64(len(pool)))))
	for _, e := range pool[:worst] {
		counts[e.part]++
	}
	return counts, worst
}

// CPUSample is one reading of the machine's cumulative CPU ticks.
type CPUSample struct{ Busy, Total int64 }

// BusiestIdle is the lowest idle share, in percent, over any span of
// window consecutive intervals between samples (cumulative readings taken
// at a fixed pace, in order); over the whole run when it has fewer.
// -1 when there are not two samples. Pure.
func BusiestIdle(samples []CPUSample, window int) float64 {
	if len(samples) < 2 {
		return -1
	}
	window = max(1, min(window, len(samples)-1))
	least := -1.0
	for i := 0; i+window < len(samples); i++ {
		a, b := samples[i], samples[i+window]
		total := b.Total - a.Total
		if total <= 0 {
			continue
		}
		idle := 100 * float64(total-(b.Busy-a.Busy)) / float64(total)
		if least < 0 || idle < least {
			least = idle
		}
	}
	return least
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of xs by the
// nearest rank; 0 for none. xs is not modified. Pure.
func Percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// PerStream returns the memory per open stream in KB: the peak resident
// set while the streams were open less the resident set before, over n. Pure.
func PerStream(peakRSS, baseRSS int64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(peakRSS-baseRSS) / 1024 / float64(n)
}

// NginxConfig is an nginx configuration (prefix dir for its pid, logs and
// temp files) listening on listen that proxies to servers over keep-alive
// upstream connections with proxy_buffering off, so each chunk is passed
// on as it arrives. Two workers: the machine's cores, as the gateway's
// GOMAXPROCS. Pure.
func NginxConfig(prefix, listen string, servers []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
daemon off;
worker_processes 2;
worker_rlimit_nofile 20000;
events { worker_connections 10000; }
http {
    access_log off;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    upstream be {
        least_conn;
`, prefix)
	for _, s := range servers {
		fmt.Fprintf(&b, "        server %s;\n", s)
	}
	fmt.Fprintf(&b, `        keepalive 256;
    }
    server {
        listen %s backlog=4096;
        location / {
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
        }
    }
}
`, listen)
	return b.String()
}

// HAProxyConfig is an HAProxy configuration in http mode listening on
// listen, balancing leastconn over servers, each chunk sent at once
// (http-no-delay) and server connections reused. maxconn 8,000: HAProxy
// wants two descriptors per connection and the limit here is 20,000. Pure.
func HAProxyConfig(listen string, servers []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    maxconn 8000

defaults
    mode http
    maxconn 8000
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    option http-keep-alive
    http-reuse always
    option http-no-delay

frontend fe
    bind %s
    default_backend be

backend be
    balance leastconn
`, listen)
	for i, s := range servers {
		fmt.Fprintf(&b, "    server s%d %s\n", i, s)
	}
	return b.String()
}

// TTFBMargin is what issue 19's item 2 lets the gateway add to the TTFB
// p99 beyond what nginx adds, in the same repetition.
const TTFBMargin = 5 * time.Millisecond

// Goal is one of item 2's goals judged per repetition.
type Goal struct {
	Name   string
	PerRep []string // the figures each repetition was judged on
	Met    int      // repetitions that met it
	Worst  string   // the worst repetition's figure
	// Median is the goal judged once over all repetitions: the median of
	// the figure each was judged on (the total, for failures), and
	// MedianMet whether that meets it. On a machine whose tail moves by
	// more than the margin between repetitions minutes apart, for nginx
	// against itself too (an A/A run, nginx-alt), this is the judgement
	// that says which proxy is leaner; the per-repetition count says how
	// often one repetition alone would say so.
	Median    string
	MedianMet bool
	MedianOf  float64 // the median itself: failures in all, ms over nginx's, or a ratio
}

// The goals in the order Goals returns them.
const (
	goalFailures = iota
	goalTTFB
	goalMemory
	goalCPU
)

// Goals judges the gateway against nginx per repetition on issue 19's
// item 2 goals: no failures, added TTFB p99 no more than nginx's plus
// TTFBMargin (both over direct in the same repetition), and memory and
// CPU per stream no more than nginx's. gw, ngx and direct are one
// Summary per repetition, in the same order; repetitions missing from
// any of them are left out. Pure.
func Goals(gw, ngx, direct []Summary) []Goal {
	n := min(len(gw), len(ngx), len(direct))
	failures := Goal{Name: "no failures"}
	ttfb := Goal{Name: fmt.Sprintf("added TTFB p99 ≤ nginx's + %v", TTFBMargin)}
	mem := Goal{Name: "memory per open stream ≤ nginx's"}
	cpu := Goal{Name: "CPU per stream ≤ nginx's"}
	var worstFail, totalFail int
	var worstOver time.Duration
	var worstMem, worstCPU float64
	var overs []time.Duration
	var memRs, cpuRs []float64
	for i := range n {
		g, x, d := gw[i], ngx[i], direct[i]

		failures.PerRep = append(failures.PerRep, fmt.Sprintf("%d / %d", g.Failures, x.Failures))
		if g.Failures == 0 {
			failures.Met++
		}
		totalFail += g.Failures
		if i == 0 || g.Failures > worstFail {
			worstFail = g.Failures
			failures.Worst = fmt.Sprintf("%d", g.Failures)
		}

		ga, xa := g.TTFB99-d.TTFB99, x.TTFB99-d.TTFB99
		ttfb.PerRep = append(ttfb.PerRep, fmt.Sprintf("%.1f / %.1f ms", ms(ga), ms(xa)))
		over := ga - xa
		overs = append(overs, over)
		if over <= TTFBMargin {
			ttfb.Met++
		}
		if i == 0 || over > worstOver {
			worstOver = over
			ttfb.Worst = fmt.Sprintf("%+.1f ms over nginx's", ms(over))
		}

		judge := func(goal *Goal, worst *float64, rs *[]float64, gv, xv float64, unit string, prec int) {
			r := ratio(gv, xv)
			*rs = append(*rs, r)
			goal.PerRep = append(goal.PerRep, fmt.Sprintf("%.*f / %.*f %s (%.2fx)", prec, gv, prec, xv, unit, r))
			if gv <= xv {
				goal.Met++
			}
			if i == 0 || r > *worst {
				*worst = r
				goal.Worst = fmt.Sprintf("%.2fx", r)
			}
		}
		judge(&mem, &worstMem, &memRs, g.MemPerStreamKB, x.MemPerStreamKB, "KB", 1)
		judge(&cpu, &worstCPU, &cpuRs, g.CPUPerStreamMs, x.CPUPerStreamMs, "ms", 2)
	}
	if n > 0 {
		failures.Median, failures.MedianMet, failures.MedianOf = fmt.Sprintf("%d in all", totalFail), totalFail == 0, float64(totalFail)
		m := median(overs)
		ttfb.Median, ttfb.MedianMet, ttfb.MedianOf = fmt.Sprintf("%+.1f ms over nginx's", ms(m)), m <= TTFBMargin, ms(m)
		for _, p := range []struct {
			g  *Goal
			rs []float64
		}{{&mem, memRs}, {&cpu, cpuRs}} {
			r := median(p.rs)
			p.g.Median, p.g.MedianMet, p.g.MedianOf = fmt.Sprintf("%.2fx", r), r <= 1, r
		}
	}
	return []Goal{goalFailures: failures, goalTTFB: ttfb, goalMemory: mem, goalCPU: cpu}
}

// median is the median of vs (the mean of the middle two for an even
// count; zero for none). It sorts a copy.
func median[T time.Duration | float64](vs []T) T {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	h := len(s) / 2
	if len(s)%2 == 0 {
		return (s[h-1] + s[h]) / 2
	}
	return s[h]
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio is a/b, or 0 when b is not positive.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// GoalTable renders goals as a markdown table: one column per
// repetition, how many met each goal, the worst repetition, and the goal
// judged on the median over them. pair names the two compared ("gateway
// / nginx"). Pure.
func GoalTable(n int, pair string, goals []Goal) string {
	var b strings.Builder
	reps := 0
	for _, g := range goals {
		reps = max(reps, len(g.PerRep))
	}
	fmt.Fprintf(&b, "| at %d streams (%s) |", n, pair)
	for i := range reps {
		fmt.Fprintf(&b, " rep %d |", i+1)
	}
	b.WriteString(" met | worst | median of all | met on the median |\n|" + strings.Repeat(" --- |", reps+5) + "\n")
	for _, g := range goals {
		fmt.Fprintf(&b, "| %s |", g.Name)
		for i := range reps {
			v := "—"
			if i < len(g.PerRep) {
				v = g.PerRep[i]
			}
			fmt.Fprintf(&b, " %s |", v)
		}
		verdict := "no"
		if g.MedianMet {
			verdict = "yes"
		}
		if g.Median == "" {
			verdict = "—"
		}
		fmt.Fprintf(&b, " %d of %d | %s | %s | %s |\n", g.Met, len(g.PerRep), g.Worst, cmp.Or(g.Median, "—"), verdict)
	}
	return b.String()
}
