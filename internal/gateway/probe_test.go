package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestOneShotAnswersAsATransport: the probes' round tripper gives the
// status and body a Transport with keep-alives off gives, on a new
// connection each time, closed with the body.
func TestOneShotAnswersAsATransport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"content length", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }},
		{"chunked", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "one ")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "two")
		}},
		{"no body", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }},
		{"error status", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusInternalServerError) }},
		{"large body", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, strings.Repeat("x", 100<<10)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns atomic.Int64
			var sawClose, sawUA atomic.Bool
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sawClose.Store(r.Close)
				sawUA.Store(r.Header.Get("User-Agent") == "tidegpu-gateway-probe")
				tc.handler(w, r)
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			get := func(rt http.RoundTripper) (int, string) {
				t.Helper()
				req, err := http.NewRequest(http.MethodGet, srv.URL+"/healthz", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("User-Agent", "tidegpu-gateway-probe")
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
				if err != nil {
					t.Fatal(err)
				}
				if err := resp.Body.Close(); err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode, string(body)
			}
			wantCode, wantBody := get(&http.Transport{DisableKeepAlives: true})
			d := &net.Dialer{}
			rt := &oneShot{dial: d.DialContext}
			for i := range 3 {
				conns.Store(0)
				code, body := get(rt)
				if code != wantCode || body != wantBody {
					t.Fatalf("probe %d: %d %q, a Transport got %d %q", i, code, body, wantCode, wantBody)
				}
				if !sawClose.Load() || !sawUA.Load() {
					t.Fatalf("probe %d: Connection: close %v, the caller's User-Agent %v", i, sawClose.Load(), sawUA.Load())
				}
				if n := conns.Load(); n != 1 {
					t.Fatalf("probe %d: %d new connections, want 1", i, n)
				}
			}
		})
	}
}

// TestOneShotCloseDoesNotReadOn: closing the body of an answer that does
// not end closes the connection; it does not read the rest.
func TestOneShotCloseDoesNotReadOn(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		defer close(gone)
		chunk := []byte(strings.Repeat("x", 32<<10))
		for {
			if _, err := w.Write(chunk); err != nil {
				return // the probe closed the connection
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	d := &net.Dialer{}
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&oneShot{dial: d.DialContext}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- resp.Body.Close() }()
	if err := within(t, closed, 5*time.Second, "Close of an endless body"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	within(t, gone, 5*time.Second, "the server seeing the connection closed")
}

// TestOneShotFailures: a refused connection is a connect failure (the
// backend is marked down at once), a backend that never answers fails at
// the context's deadline, and one that closes without an answer fails.
func TestOneShotFailures(t *testing.T) {
	d := &net.Dialer{}
	rt := &oneShot{dial: d.DialContext}
	get := func(ctx context.Context, addr string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	if err := get(context.Background(), refused); err == nil || !isConnectFailure(err) {
		t.Errorf("refused: %v, want a connect failure", err)
	}

	// Accepts, reads, never answers: the deadline ends it.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := get(ctx, hang.Addr().String()); !errors.Is(err, context.DeadlineExceeded) || isConnectFailure(err) {
		t.Errorf("no answer: %v, want the context's deadline, not a connect failure", err)
	}

	// Closes at once: an error, not a connect failure.
	shut, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shut.Close() })
	go func() {
		for {
			c, err := shut.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := get(context.Background(), shut.Addr().String()); err == nil || isConnectFailure(err) {
		t.Errorf("closed without an answer: %v, want an error that is not a connect failure", err)
	}
}

// BenchmarkProbeRoundTrip compares a probe's round trip on the probes' own
// round tripper with one on a Transport with keep-alives off (what probes
// used before), against a server in the same process (its share included).
func BenchmarkProbeRoundTrip(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }))
	b.Cleanup(srv.Close)
	d := &net.Dialer{}
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"transport", &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext}},
		{"oneShot", &oneShot{dial: d.DialContext}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/healthz", nil)
				resp, err := tc.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
