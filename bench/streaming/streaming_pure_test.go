package streamingbench

import (
	"errors"
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
