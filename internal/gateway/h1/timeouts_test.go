package h1

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestHeadComplete(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"", false},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", true},
		{"GET / HTTP/1.1\nHost: x\n\n", true},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody", true},
		{"GET / HTTP/1.1\r\nHost: x\r\n", false},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r", false},
		// Empty lines before a request are skipped, and do not end its head.
		{"\r\n\r\n", false},
		{"\r\n\r\nGET / HTTP/1.1\r\n", false},
		{"\n\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", true},
	} {
		if got := headComplete([]byte(tc.in)); got != tc.want {
			t.Errorf("headComplete(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestServerTimeouts: a client that sends part of a head and stops, after
// empty lines or after a request it was answered, and a client idle after
// its answer, are let go.
func TestServerTimeouts(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(echo), ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: time.Minute})
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n",
		"\r\n\r\nGET / HT",
		"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\n",
	} {
		out := closedBy(t, addr, req, 5*time.Second)
		if strings.HasPrefix(req, "GET /1") && !strings.Contains(out, "GET /1 host=x") {
			t.Errorf("the whole first request was not answered: %q", out)
		}
		if strings.Contains(out, "GET /2") || strings.Contains(out, "GET / host") {
			t.Errorf("a partial head was answered: %q", out)
		}
	}

	idle := serve(t, &Server{Handler: http.HandlerFunc(echo), ReadHeaderTimeout: time.Minute, IdleTimeout: 100 * time.Millisecond})
	if out := closedBy(t, idle, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", 5*time.Second); !strings.Contains(out, "GET /a host=x") {
		t.Errorf("the request before the idle time was not answered: %q", out)
	}
}
