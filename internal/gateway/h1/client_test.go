package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newReq(t *testing.T, ctx context.Context, method, url, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestRoundTripKeepsConnectionsAlive: bodies of every framing arrive whole
// (POST body, query, headers), and the connection is reused after each.
func TestRoundTripKeepsConnectionsAlive(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", fmt.Sprint(len(b)+len(r.URL.RawQuery)))
			fmt.Fprintf(w, "%s%s", b, r.URL.RawQuery)
		case "/chunked":
			w.Header().Set("Trailer", "X-Tokens")
			for i := range 3 {
				fmt.Fprintf(w, "line %d %s\n", i, r.Header.Get("X-Test"))
				w.(http.Flusher).Flush()
			}
			w.Header().Set("X-Tokens", "42")
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/big":
			w.Write([]byte(strings.Repeat("x", 100_000)))
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	cl := New(Options{})
	defer cl.Close()
	for range 3 {
		req := newReq(t, context.Background(), "POST", srv.URL+"/length?q=1", "hello")
		resp, err := cl.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "helloq=1" {
			t.Fatalf("length body %q, %v", b, err)
		}

		req = newReq(t, context.Background(), "GET", srv.URL+"/chunked", "")
		req.Header.Set("X-Test", "hdr")
		resp, err = cl.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			p, err := resp.Body.(*Body).Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(p))
		}
		if strings.Join(got, "") != "line 0 hdr\nline 1 hdr\nline 2 hdr\n" {
			t.Fatalf("chunked body %q", got)
		}
		if resp.Trailer.Get("X-Tokens") != "42" {
			t.Fatalf("trailer %v", resp.Trailer)
		}

		resp, err = cl.RoundTrip(newReq(t, context.Background(), "GET", srv.URL+"/empty", ""))
		if err != nil || resp.StatusCode != 204 {
			t.Fatalf("empty: %v %v", resp, err)
		}
		resp.Body.Close()

		resp, err = cl.RoundTrip(newReq(t, context.Background(), "GET", srv.URL+"/big", ""))
		if err != nil {
			t.Fatal(err)
		}
		b, err = io.ReadAll(resp.Body)
		if err != nil || len(b) != 100_000 {
			t.Fatalf("big: %d bytes, %v", len(b), err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 12 sequential requests, want 1", n)
	}
	if cl.Idle() != 1 {
		t.Errorf("%d idle connections, want 1", cl.Idle())
	}
}

// TestStaleConnectionRetried: a pooled connection the backend closed is
// not an error for the request, which goes out once more on a new one.
func TestStaleConnectionRetried(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	cl := New(Options{})
	defer cl.Close()
	for i := range 3 {
		resp, err := cl.RoundTrip(newReq(t, context.Background(), "POST", srv.URL, "body"))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "ok" {
			t.Fatalf("request %d: %q", i, b)
		}
		// The server drops its idle connections: the pooled one is stale.
		srv.CloseClientConnections()
	}
}

// TestCancelEndsWaitAndStream: the request's context ending ends a wait for
// headers and a body read, and the connection is not pooled.
// abortCtx is an Abortable request context, as a proxy's attempt is: it
// closes the watched connection itself when cancelled.
type abortCtx struct {
	context.Context
	mu      sync.Mutex
	ended   bool
	c       io.Closer
	watches int
}

func (a *abortCtx) cancel() {
	a.mu.Lock()
	a.ended = true
	c := a.c
	a.c = nil
	a.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

func (a *abortCtx) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		return context.Canceled
	}
	return nil
}

func (a *abortCtx) Watch(c io.Closer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		return false
	}
	a.c = c
	a.watches++
	return true
}

func (a *abortCtx) Unwatch(c io.Closer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.c == c {
		a.c = nil
		return true
	}
	return !a.ended
}

// cancellable returns a request context of the kind and its cancel.
func cancellable(kind string) (context.Context, func()) {
	if kind == "abortable" {
		a := &abortCtx{Context: context.Background()}
		return a, a.cancel
	}
	return context.WithCancel(context.Background())
}

// TestCancelEndsWaitAndStream: the request's context ending ends a wait
// for headers and a body read, and the connection is not pooled, whether
// the client watches the context (context.AfterFunc) or the context
// watches the connection (Abortable). An Abortable's connection is handed
// back (pooled) when the answer ends, and an ended one is not sent.
func TestCancelEndsWaitAndStream(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stream":
			io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
		case "/short":
			io.WriteString(w, "ok")
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	for _, kind := range []string{"context", "abortable"} {
		t.Run(kind, func(t *testing.T) {
			cl := New(Options{})
			defer cl.Close()

			ctx, cancel := cancellable(kind)
			time.AfterFunc(50*time.Millisecond, cancel)
			_, err := cl.RoundTrip(newReq(t, ctx, "GET", srv.URL+"/hang", ""))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("wait for headers: %v, want context.Canceled", err)
			}

			ctx, cancel = cancellable(kind)
			resp, err := cl.RoundTrip(newReq(t, ctx, "GET", srv.URL+"/stream", ""))
			if err != nil {
				t.Fatal(err)
			}
			p, err := resp.Body.(*Body).Next()
			if err != nil || string(p) != "first\n" {
				t.Fatalf("first chunk %q, %v", p, err)
			}
			time.AfterFunc(50*time.Millisecond, cancel)
			if _, err := resp.Body.(*Body).Next(); err == nil || err == io.EOF {
				t.Fatalf("read after cancel: %v, want an error", err)
			}
			resp.Body.Close()
			if cl.Idle() != 0 {
				t.Errorf("%d idle connections after cancellations, want 0", cl.Idle())
			}

			ctx, cancel = cancellable(kind)
			resp, err = cl.RoundTrip(newReq(t, ctx, "GET", srv.URL+"/short", ""))
			if err != nil {
				t.Fatal(err)
			}
			if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
				t.Fatalf("short answer %q, %v", b, err)
			}
			resp.Body.Close()
			cancel() // after the answer: the pooled connection stays open
			if cl.Idle() != 1 {
				t.Fatalf("%d idle connections after a whole answer, want 1", cl.Idle())
			}
			if a, ok := ctx.(*abortCtx); ok && (a.c != nil || a.watches != 1) {
				t.Errorf("the context still holds the connection (%v) or watched it %d times, want once", a.c, a.watches)
			}
			ctx, _ = cancellable(kind) // a second request reuses it
			resp, err = cl.RoundTrip(newReq(t, ctx, "GET", srv.URL+"/short", ""))
			if err != nil {
				t.Fatalf("on the pooled connection: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()

			if kind == "abortable" {
				ctx, cancel = cancellable(kind)
				cancel()
				if _, err := cl.RoundTrip(newReq(t, ctx, "GET", srv.URL+"/short", "")); !errors.Is(err, context.Canceled) {
					t.Fatalf("an ended request: %v, want context.Canceled", err)
				}
			}
		})
	}
}

func TestHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	cl := New(Options{ResponseHeaderTimeout: 50 * time.Millisecond})
	defer cl.Close()
	_, err := cl.RoundTrip(newReq(t, context.Background(), "GET", srv.URL, ""))
	if !errors.Is(err, errHeaderTimeout) {
		t.Fatalf("got %v, want the header timeout", err)
	}
}

// TestTruncatedBodiesFail: a body the backend cuts short is an error, not
// an end.
func TestTruncatedBodiesFail(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	answers := []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
	}
	go func() {
		for _, a := range answers {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			c.Read(buf)
			c.Write([]byte(a))
			c.Close()
		}
	}()
	cl := New(Options{})
	defer cl.Close()
	for _, a := range answers {
		resp, err := cl.RoundTrip(newReq(t, context.Background(), "GET", "http://"+ln.Addr().String(), ""))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: read %v, want unexpected EOF", a, err)
		}
	}
}

// TestWriteRequestHeaders: the request head carries every header but those
// the client writes itself (Host, User-Agent, Content-Length,
// Transfer-Encoding, Trailer, Connection), each value as
// http.Header.Write writes it (CR and LF made spaces, the ends trimmed):
// read back with net/http's own parser, the fields are those of the
// standard library's writer.
func TestWriteRequestHeaders(t *testing.T) {
	cases := []struct {
		name string
		h    http.Header
	}{
		{"plain", http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer x"}}},
		{"several values", http.Header{"Accept": {"a", "b"}, "X-Forwarded-For": {"10.0.0.1, 10.0.0.2"}}},
		{"excluded keys", http.Header{"Connection": {"close"}, "Trailer": {"X"}, "Transfer-Encoding": {"chunked"}, "Content-Length": {"9"}, "X-Kept": {"1"}}},
		{"spaces around", http.Header{"X-A": {"  v \t"}, "X-B": {""}}},
		{"CR and LF inside", http.Header{"X-A": {"a\r\nInjected: yes"}, "X-B": {"\r\nb\n"}, "X-C": {"a\rb\nc"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "http://backend/p", nil)
			req.Header = tc.h
			var wb bytes.Buffer
			if err := writeRequest(&wb, req, nil); err != nil {
				t.Fatal(err)
			}
			got, err := http.ReadRequest(bufio.NewReader(&wb))
			if err != nil {
				t.Fatalf("reading back %q: %v", wb.String(), err)
			}
			// What net/http's writer makes of the same header.
			var std bytes.Buffer
			if err := tc.h.WriteSubset(&std, map[string]bool{"Host": true, "User-Agent": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true, "Connection": true}); err != nil {
				t.Fatal(err)
			}
			want, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET /p HTTP/1.1\r\nHost: backend\r\n" + std.String() + "\r\n")))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Header, want.Header) {
				t.Fatalf("header read back\n%v\nwant (net/http's writer)\n%v", got.Header, want.Header)
			}
		})
	}
}
