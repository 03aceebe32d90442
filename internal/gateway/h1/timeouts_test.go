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

	// Without a ReadHeaderTimeout, the idle timeout bounds a head that
	// stalls: the sweep closes only idle connections, and this one is
	// reading a request.
	idleOnly := serve(t, &Server{Handler: http.HandlerFunc(echo), IdleTimeout: 100 * time.Millisecond})
	if out := closedBy(t, idleOnly, "GET /b HTTP/1.1\r\nHo", 5*time.Second); out != "" {
		t.Errorf("a partial head was answered: %q", out)
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
		Detach(r.Context()) // off a serve loop: the watch is the sweep's
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

// TestSweepPeriod: the sweep's rounds are half of WatchAfter or an eighth
// of IdleTimeout apart, whichever is shorter, within 1 ms to 1 s; a watch
// starts after enough rounds to make WatchAfter, an idle connection closes
// after enough to make IdleTimeout; 0 rounds means never.
func TestSweepPeriod(t *testing.T) {
	for _, tc := range []struct {
		watch, idle   time.Duration
		period        time.Duration
		watchN, idleN int64
	}{
		{0, 0, 125 * time.Millisecond, 2, 0},
		{0, 2 * time.Minute, 125 * time.Millisecond, 2, 960},
		{-1, 2 * time.Minute, time.Second, 0, 120},
		{-1, 0, time.Second, 0, 0},
		{-1, 100 * time.Millisecond, 12500 * time.Microsecond, 0, 8},
		{time.Millisecond, 0, time.Millisecond, 1, 0},
		{10 * time.Millisecond, time.Minute, 5 * time.Millisecond, 2, 12000},
		{300 * time.Millisecond, 2 * time.Millisecond, time.Millisecond, 300, 2},
		{time.Hour, 0, time.Second, 3600, 0},
		// Rounds are whole: 3 s of idle at 125 ms is 24, 1 s at 300 ms 4.
		{250 * time.Millisecond, 3 * time.Second, 125 * time.Millisecond, 2, 24},
		{600 * time.Millisecond, time.Second, 125 * time.Millisecond, 5, 8},
	} {
		s := &Server{WatchAfter: tc.watch, IdleTimeout: tc.idle}
		period, watchN, idleN := s.sweepPeriod()
		if period != tc.period || watchN != tc.watchN || idleN != tc.idleN {
			t.Errorf("WatchAfter %v, IdleTimeout %v: got %v, %d, %d rounds; want %v, %d, %d",
				tc.watch, tc.idle, period, watchN, idleN, tc.period, tc.watchN, tc.idleN)
		}
	}
}

// TestSweepRunsOnlyWithConnections: the sweep stops once the server has no
// connection left (an idle gateway has nothing ticking), and starts again
// with the next one, whose idle timeout it then enforces. It fails if the
// sweep is not started again (the second connection is never closed) or
// never stops.
func TestSweepRunsOnlyWithConnections(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(echo), IdleTimeout: 50 * time.Millisecond}
	addr := serve(t, s)
	sweeping := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.sweeping
	}
	for i := range 2 {
		if out := closedBy(t, addr, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", 5*time.Second); !strings.Contains(out, "GET /a host=x") {
			t.Fatalf("connection %d: the request was not answered: %q", i, out)
		}
		if !waitFor(func() bool { return !sweeping() }) {
			t.Fatalf("connection %d: the sweep still runs with no connection left", i)
		}
	}
}
