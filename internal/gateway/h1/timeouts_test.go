package h1

import (
	"fmt"
	"io"
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

// TestServerIdleTimeoutCountsFromTheLastRequest: a connection is closed
// one idle timeout after its last request, not after its first: the client
// asks again a fifth of the timeout after its first request, and once more
// past one timeout after the first (within one of the second), which must
// be answered. It fails if the idle deadline set before the first request
// is left in place for the second (checked: a deadline moved only when it
// is more than a quarter of the timeout early fails it).
func TestServerIdleTimeoutCountsFromTheLastRequest(t *testing.T) {
	const d = 2 * time.Second
	addr := serve(t, &Server{Handler: http.HandlerFunc(echo), IdleTimeout: d})
	c, br := dialRaw(t, addr)
	ask := func(path string) error {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return err
	}
	start := time.Now()
	if err := ask("/a"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d / 5) // the client's own pause, not a wait for a condition
	if err := ask("/b"); err != nil {
		t.Fatal(err)
	}
	second := time.Now()
	time.Sleep(time.Until(start.Add(d + d/10))) // past the deadline set before /a, within d of /b
	if since := time.Since(second); since >= d {
		t.Skipf("the machine stalled: %v since the second request", since)
	}
	if err := ask("/c"); err != nil {
		t.Fatalf("the connection was closed %v after its last request, before the idle timeout of %v: %v", time.Since(second), d, err)
	}
	third := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(3 * d))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the idle timeout, a read got %v, want io.EOF", err)
	}
	if idle := time.Since(third); idle < d {
		t.Errorf("closed after %v idle, before the idle timeout of %v", idle, d)
	}
}

// TestServerWatchesARequestArmedWhileTheTimerRuns: a request that follows
// a short one at once on the same connection, while the watch timer the
// short one set may still run, is watched too: the client leaving it is
// noticed. It fails if a timer set for an earlier request is taken for
// the later one's without being set again (checked).
func TestServerWatchesARequestArmedWhileTheTimerRuns(t *testing.T) {
	cancelled, read := make(chan error, 1), make(chan struct{})
	addr := serve(t, &Server{WatchAfter: 300 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/short" {
			fmt.Fprint(w, "ok")
			return
		}
		close(read)
		<-r.Context().Done()
		cancelled <- r.Context().Err()
	})})
	c, br := dialRaw(t, addr)
	_, _ = io.WriteString(c, "GET /short HTTP/1.1\r\nHost: x\r\n\r\n")
	readUntil(t, br, "\r\n\r\nok")
	_, _ = io.WriteString(c, "GET /long HTTP/1.1\r\nHost: x\r\n\r\n")
	<-read
	c.Close()
	wantCancelled(t, cancelled, "the second request")
}
