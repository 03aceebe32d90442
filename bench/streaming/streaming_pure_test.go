package streamingbench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestRequest(t *testing.T) {
	for _, tt := range []struct {
		f    Format
		want string
	}{
		{NDJSON, "POST /api/chat HTTP/1.1\r\nHost: h:1\r\n"},
		{SSE, "POST /v1/chat/completions HTTP/1.1\r\nHost: h:1\r\n"},
	} {
		r := string(Request(tt.f, "h:1"))
		head, body, ok := strings.Cut(r, "\r\n\r\n")
		if !strings.HasPrefix(r, tt.want) || !ok || !strings.Contains(body, `"stream":true`) {
			t.Errorf("%v: request %q", tt.f, r)
		}
		if !strings.Contains(head, "Content-Length: "+strconv.Itoa(len(body))+"\r\n") {
			t.Errorf("%v: Content-Length does not match the %d-byte body: %q", tt.f, len(body), head)
		}
	}
}

func TestChunk(t *testing.T) {
	for _, tt := range []struct {
		f          Format
		line       string
		tok, ended bool
	}{
		{NDJSON, `{"message":{"content":"a"},"done":false}` + "\n", true, false},
		{NDJSON, `{"done":true,"eval_count":3}` + "\n", false, true},
		{NDJSON, "\n", false, false},
		{SSE, `data: {"choices":[{"delta":{"content":"a"}}]}` + "\n", true, false},
		{SSE, "data: [DONE]\n", false, true},
		{SSE, "data:[DONE]\r\n", false, true},
		{SSE, "\n", false, false},
		{SSE, ": keep-alive\n", false, false},
	} {
		tok, end := Chunk(tt.f, []byte(tt.line))
		if tok != tt.tok || end != tt.ended {
			t.Errorf("Chunk(%v, %q) = %v, %v; want %v, %v", tt.f, tt.line, tok, end, tt.tok, tt.ended)
		}
	}
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	s := Summarize([]Stream{
		{TTFB: 50 * ms, Gaps: []time.Duration{100 * ms, 101 * ms}, Tokens: 3},
		{TTFB: 60 * ms, Gaps: []time.Duration{100 * ms, 140 * ms}, Tokens: 3},
		{TTFB: 1 * ms, Tokens: 1},               // short: a failure, not counted in TTFB
		{Err: errors.New("boom"), TTFB: 1 * ms}, // error
	}, 3)
	if s.N != 4 || s.Failures != 2 || s.ShortStreams != 1 {
		t.Errorf("N %d failures %d short %d", s.N, s.Failures, s.ShortStreams)
	}
	if s.TTFB50 != 50*ms || s.TTFB99 != 60*ms || s.Gap99 != 140*ms {
		t.Errorf("TTFB %v/%v gap %v", s.TTFB50, s.TTFB99, s.Gap99)
	}
	if s.FirstErr == nil || !strings.Contains(s.FirstErr.Error(), "1 of 3 tokens") {
		t.Errorf("first error %v", s.FirstErr)
	}
	if Summarize(nil, 3).TTFB99 != 0 {
		t.Error("empty run")
	}
}

// The tail's start window: the streams at or above the p99 TTFB, by when
// they started. One stall makes the slow ones start together; a failed
// stream is not in the tail whatever its TTFB.
func TestSummarizeTailWindow(t *testing.T) {
	ms := time.Millisecond
	var streams []Stream
	for i := range 200 {
		ttfb := 50 * ms
		if i >= 120 && i < 124 { // a stall while streams 120-123 started
			ttfb = 150 * ms
		}
		streams = append(streams, Stream{TTFB: ttfb, Tokens: 3, Start: time.Duration(i) * ms})
	}
	streams = append(streams, Stream{Err: errors.New("reset"), TTFB: time.Second, Tokens: 3, Start: 5 * ms})
	s := Summarize(streams, 3)
	if s.TTFB99 != 150*ms || s.TailFrom != 120*ms || s.TailTo != 123*ms {
		t.Errorf("p99 %v, tail started %v-%v; want 150ms, 120ms-123ms", s.TTFB99, s.TailFrom, s.TailTo)
	}
}

func TestPerStream(t *testing.T) {
	if got := PerStream(20<<20, 10<<20, 1024); got != 10 {
		t.Errorf("PerStream = %v KB, want 10", got)
	}
	if PerStream(1, 0, 0) != 0 {
		t.Error("n = 0")
	}
}

func TestConfigs(t *testing.T) {
	servers := []string{"127.0.0.1:1", "127.0.0.1:2"}
	n := NginxConfig("/tmp/x", "127.0.0.1:9", servers)
	for _, want := range []string{"listen 127.0.0.1:9", "proxy_buffering off;", "keepalive 256;", "server 127.0.0.1:2;", "proxy_http_version 1.1;", `proxy_set_header Connection "";`, "pid /tmp/x/nginx.pid;"} {
		if !strings.Contains(n, want) {
			t.Errorf("nginx config lacks %q:\n%s", want, n)
		}
	}
	h := HAProxyConfig("127.0.0.1:9", servers)
	for _, want := range []string{"bind 127.0.0.1:9", "mode http", "option http-no-delay", "http-reuse always", "server s1 127.0.0.1:2\n"} {
		if !strings.Contains(h, want) {
			t.Errorf("haproxy config lacks %q:\n%s", want, h)
		}
	}
}

func TestMeanOf(t *testing.T) {
	mem := func(r Summary) float64 { return r.MemPerStreamKB }
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{14.5}, 14.5}, {[]float64{14.5, 15.5}, 15}} {
		var rs []Summary
		for _, v := range tc.in {
			rs = append(rs, Summary{MemPerStreamKB: v})
		}
		if got := meanOf(rs, mem); got != tc.want {
			t.Errorf("meanOf(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestGoals(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	row := func(fail int, ttfb99, mem, cpu float64) Summary {
		return Summary{Failures: fail, TTFB99: ms(ttfb99), MemPerStreamKB: mem, CPUPerStreamMs: cpu}
	}
	direct := []Summary{row(0, 60, 0, 0), row(0, 60, 0, 0)}
	for _, tc := range []struct {
		name           string
		gw, ngx        []Summary
		direct         []Summary
		met            [4]int // failures, TTFB, memory, CPU
		of             int
		worstTTFB      string
		worstMem, wCPU string
		median         [4]string // failures, TTFB, memory, CPU
		medianMet      [4]bool
	}{
		{
			// Session 31's first repetitions at 3,000 streams: the gateway
			// under nginx's tail, leaner in memory, CPU 0.96x and 1.01x.
			name:   "met but one CPU",
			gw:     []Summary{row(0, 101.9, 12.8, 2.93), row(0, 72.2, 12.8, 2.77)},
			ngx:    []Summary{row(0, 302.6, 17.8, 3.06), row(0, 101.4, 17.8, 2.74)},
			direct: direct,
			met:    [4]int{2, 2, 2, 1}, of: 2,
			worstTTFB: "-29.2 ms over nginx's", worstMem: "0.72x", wCPU: "1.01x",
			median:    [4]string{"0 in all", "-115.0 ms over nginx's", "0.72x", "0.98x"},
			medianMet: [4]bool{true, true, true, true},
		},
		{
			// The margin is inclusive: 5 ms over nginx's added p99 meets
			// it, 5.1 ms does not; a failure misses "no failures".
			name:   "margin edges",
			gw:     []Summary{row(0, 85, 18, 2.5), row(3, 85.1, 17, 2.5)},
			ngx:    []Summary{row(0, 80, 17.8, 2.6), row(0, 80, 17.8, 2.6)},
			direct: direct,
			met:    [4]int{1, 1, 1, 2}, of: 2,
			worstTTFB: "+5.1 ms over nginx's", worstMem: "1.01x", wCPU: "0.96x",
			// The median of +5.0 and +5.1 ms misses; of 1.01x and 0.96x
			// memory meets.
			median:    [4]string{"3 in all", "+5.0 ms over nginx's", "0.98x", "0.96x"},
			medianMet: [4]bool{false, false, true, true},
		},
		{
			// Session 31's eighth invocation: the gateway over nginx's
			// tail in two repetitions of four, under it on the median of
			// the four (odd count: the middle one).
			name:   "misses one at a time, meets on the median",
			gw:     []Summary{row(0, 131.1, 12.6, 2.92), row(0, 80.4, 12.8, 2.71), row(0, 89.2, 12.8, 2.72)},
			ngx:    []Summary{row(0, 183.3, 17.7, 2.77), row(0, 296.8, 17.8, 2.83), row(0, 79.3, 17.8, 2.84)},
			direct: []Summary{row(0, 60, 0, 0), row(0, 60, 0, 0), row(0, 60, 0, 0)},
			met:    [4]int{3, 2, 3, 2}, of: 3,
			worstTTFB: "+9.9 ms over nginx's", worstMem: "0.72x", wCPU: "1.05x",
			median:    [4]string{"0 in all", "-52.2 ms over nginx's", "0.72x", "0.96x"},
			medianMet: [4]bool{true, true, true, true},
		},
		{
			// A repetition missing from one target is left out.
			name:   "uneven",
			gw:     []Summary{row(0, 70, 12, 2)},
			ngx:    []Summary{row(0, 70, 17, 2), row(0, 70, 17, 2)},
			direct: direct,
			met:    [4]int{1, 1, 1, 1}, of: 1,
			worstTTFB: "+0.0 ms over nginx's", worstMem: "0.71x", wCPU: "1.00x",
			median:    [4]string{"0 in all", "+0.0 ms over nginx's", "0.71x", "1.00x"},
			medianMet: [4]bool{true, true, true, true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := Goals(tc.gw, tc.ngx, tc.direct)
			if len(gs) != 4 {
				t.Fatalf("%d goals, want 4", len(gs))
			}
			for i, g := range gs {
				if g.Met != tc.met[i] || len(g.PerRep) != tc.of {
					t.Errorf("%s: met %d of %d, want %d of %d", g.Name, g.Met, len(g.PerRep), tc.met[i], tc.of)
				}
			}
			if gs[1].Worst != tc.worstTTFB || gs[2].Worst != tc.worstMem || gs[3].Worst != tc.wCPU {
				t.Errorf("worst: %q, %q, %q; want %q, %q, %q", gs[1].Worst, gs[2].Worst, gs[3].Worst, tc.worstTTFB, tc.worstMem, tc.wCPU)
			}
			if got, want := fmt.Sprintf("%.2fx", gs[goalCPU].MedianOf), tc.median[goalCPU]; got != want {
				t.Errorf("CPU's median figure %s, want %s", got, want)
			}
			for i, g := range gs {
				if g.Median != tc.median[i] || g.MedianMet != tc.medianMet[i] {
					t.Errorf("%s: median %q met %v, want %q met %v", g.Name, g.Median, g.MedianMet, tc.median[i], tc.medianMet[i])
				}
			}
			table := GoalTable(3000, "gateway / nginx", gs)
			if !strings.Contains(table, "| at 3000 streams (gateway / nginx) | rep 1 |") ||
				!strings.Contains(table, fmt.Sprintf("| %d of %d |", tc.met[1], tc.of)) ||
				strings.Count(table, "\n") != 6 {
				t.Errorf("table:\n%s", table)
			}
		})
	}
	if gs := Goals(nil, nil, nil); gs[0].Met != 0 || len(gs[0].PerRep) != 0 || gs[1].Median != "" || gs[1].MedianMet {
		t.Errorf("no repetitions: %+v", gs[0])
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{1.2, 0.9}, 1.05},
	} {
		in := slices.Clone(tc.in)
		if got := median(in); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("median sorted its argument: %v", in)
		}
	}
	if got := median([]time.Duration{30, 10, 20}); got != 20 {
		t.Errorf("median of durations = %v, want 20", got)
	}
}

func TestWorstShare(t *testing.T) {
	ok := func(ms ...int) []Stream {
		var ss []Stream
		for _, m := range ms {
			ss = append(ss, Stream{TTFB: time.Duration(m) * time.Millisecond, Tokens: 3})
		}
		return ss
	}
	failed := Stream{Err: errors.New("reset"), Tokens: 0}
	short := Stream{TTFB: time.Millisecond, Tokens: 2}
	for _, tc := range []struct {
		name   string
		parts  [][]Stream
		p      float64
		counts []int
		worst  int
	}{
		{"none", nil, 1, []int{}, 0},
		{"one stream at least", [][]Stream{ok(50, 60), ok(55, 52)}, 1, []int{1, 0}, 1},
		{"the slow one owns the tail", [][]Stream{ok(50, 51, 52, 53, 54), ok(90, 91, 92, 53, 54)}, 30, []int{0, 3}, 3},
		{"shared", [][]Stream{ok(50, 95, 52, 93), ok(94, 51, 92, 53)}, 50, []int{2, 2}, 4},
		// A failed or short stream is worse than any TTFB.
		{"failures first", [][]Stream{ok(90, 91), append(ok(10), failed, short)}, 40, []int{0, 2}, 2},
	} {
		counts, worst := WorstShare(tc.parts, 3, tc.p)
		if !slices.Equal(counts, tc.counts) || worst != tc.worst {
			t.Errorf("%s: %v of %d, want %v of %d", tc.name, counts, worst, tc.counts, tc.worst)
		}
	}
}

func TestBusiestIdle(t *testing.T) {
	// Two CPUs at 100 ticks a second, read every 100 ms: 20 ticks an
	// interval; busy ticks per interval below.
	at := func(busy ...int64) []CPUSample {
		out := []CPUSample{{}}
		for _, b := range busy {
			last := out[len(out)-1]
			out = append(out, CPUSample{last.Busy + b, last.Total + 20})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		samples []CPUSample
		window  int
		want    float64
	}{
		{"none", nil, 10, -1},
		{"one reading", at(), 10, -1},
		{"shorter than the window: the whole run", at(10, 20), 10, 25},
		{"the busiest span", at(10, 10, 20, 20, 10), 2, 0},
		{"one interval", at(5, 15, 10), 1, 25},
		{"idle throughout", at(0, 0, 0), 2, 100},
		// A reading that did not move (a late ticker) is skipped, not a
		// division by zero.
		{"no time", []CPUSample{{0, 0}, {0, 0}, {10, 20}}, 1, 50},
	} {
		if got := BusiestIdle(tc.samples, tc.window); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
