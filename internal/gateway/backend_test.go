package gateway

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestBackendClientSwitch checks that the build-time switch selects the
// client of the proxied requests, so that a suite run with it is known to
// have run on that client. Run the package's tests on the h1 client with
//
//	GOFLAGS=-ldflags=-X=github.com/tidegpu/tidegpu/internal/gateway.backendClient=h1 go test ./internal/gateway/...
func TestBackendClientSwitch(t *testing.T) {
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	t.Logf("backend client of this build: %q", backendClient)
	switch backendClient {
	case "h1":
		if g.h1 == nil || g.transport != g.h1 {
			t.Fatalf("backendClient %q: the proxied requests do not go through the h1 client", backendClient)
		}
	case "transport":
		if g.h1 != nil || g.transport != g.ownTransport {
			t.Fatalf("backendClient %q: the proxied requests do not go through the Transport", backendClient)
		}
	default:
		t.Fatalf("backendClient %q: New accepted an unknown client", backendClient)
	}
	if g.probeTransport() == g.transport {
		t.Fatal("probes share the data plane's client")
	}

	// An unknown value is an error naming the switch.
	defer func(old string) { backendClient = old }(backendClient)
	backendClient = "h2"
	if _, err := New(Options{}); err == nil {
		t.Fatal(`backendClient "h2": New did not fail`)
	}
}

// A backend that takes the request and sends no headers within
// ResponseHeaderTimeout fails the attempt, which is retried on another
// backend before the client sees a byte; nothing stays in flight.
func TestBackendHeaderTimeoutRetries(t *testing.T) {
	release := make(chan struct{})
	slow := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done(): // the gateway gave up and closed the connection
		}
	})
	t.Cleanup(func() { close(release) }) // before the backend's Close, which waits for the handler
	fast := newBackend(t, "fast", echoHandler("fast"))
	h := newHarness(t, Options{Policy: PolicyRoundRobin, ResponseHeaderTimeout: 200 * time.Millisecond, EjectAfter: -1})
	h.g.SetBackends("p", []Backend{slow.backend("p"), fast.backend("p")})
	for i := range 4 {
		start := time.Now()
		code, by := h.post(t)
		if code != http.StatusOK || by != "fast" {
			t.Fatalf("request %d: %d from %q, want 200 from fast", i, code, by)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("request %d took %v", i, took)
		}
	}
	s := status(t, h.g, "slow")
	if s.Failures == 0 || s.Failures != s.Requests || !strings.Contains(s.LastError, "timeout") {
		t.Fatalf("slow: %d requests, %d failures, last error %q: want every attempt failed on the header timeout", s.Requests, s.Failures, s.LastError)
	}
	for _, id := range []string{"slow", "fast"} {
		if n := status(t, h.g, id).InFlight; n != 0 {
			t.Fatalf("%s: %d in flight after every request ended", id, n)
		}
	}
}

// A backend that closes its idle keep-alive connections (uvicorn after 5 s,
// here at once): the next request, which finds that connection in the
// gateway's pool, is answered and counts no failure.
//
// Only on the h1 client: the Transport usually sees the close first (its
// read loop) and dials anew, but when it writes before it has seen it, it
// does not retry a POST whose bytes went out, and the attempt fails (1 of
// 80 such requests here under -race, none of 120 without).
func TestBackendClosedIdleConnectionIsNoFailure(t *testing.T) {
	if backendClient != "h1" {
		t.Skip("the Transport fails a POST sent on a connection the backend closed an instant before; see the comment")
	}
	var closed atomic.Int64
	b := &testBackend{id: "b"}
	b.Server = httptest.NewUnstartedServer(echoHandler("b"))
	b.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	b.Config.IdleTimeout = time.Millisecond
	b.Start()
	t.Cleanup(b.Close)
	h := newHarness(t, Options{EjectAfter: 1})
	h.g.SetBackends("p", []Backend{b.backend("p")})
	for i := range 5 {
		before := closed.Load()
		if code, _ := h.post(t); code != http.StatusOK {
			t.Fatalf("request %d: %d", i, code)
		}
		// The backend closes the connection the gateway pooled.
		deadline := time.Now().Add(5 * time.Second)
		for closed.Load() == before {
			if time.Now().After(deadline) {
				t.Fatalf("request %d: the backend did not close its idle connection", i)
			}
			time.Sleep(5 * time.Millisecond) // polling the condition above
		}
	}
	if s := status(t, h.g, "b"); s.Failures != 0 || s.Ejected || s.InFlight != 0 {
		t.Fatalf("b: %d failures (last %q), ejected %v, %d in flight: want none", s.Failures, s.LastError, s.Ejected, s.InFlight)
	}
}
