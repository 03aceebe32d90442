package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// testBackend is a real HTTP server standing in for an inference instance.
type testBackend struct {
	*httptest.Server
	id   string
	hits atomic.Int64 // requests received, probes excluded
}

// newBackend starts a backend that counts requests (other than probes to
// /healthz) and serves them with h.
func newBackend(t testing.TB, id string, h http.HandlerFunc) *testBackend {
	t.Helper()
	b := &testBackend{id: id}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			b.hits.Add(1)
		}
		h(w, r)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *testBackend) addr() string { return b.Listener.Addr().String() }

// backend returns b as published in pool.
func (b *testBackend) backend(pool string) Backend {
	return Backend{ID: b.id, Pool: pool, Address: b.addr()}
}

// echoReply is what echoHandler answers: what the backend saw.
type echoReply struct {
	Backend string      `json:"backend"`
	Method  string      `json:"method"`
	Path    string      `json:"path"`
	Query   string      `json:"query"`
	Host    string      `json:"host"`
	Header  http.Header `json:"header"`
	Body    string      `json:"body"`
}

// echoHandler answers 200 with a JSON echo of the request.
func echoHandler(id string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(echoReply{
			Backend: id, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
			Host: r.Host, Header: r.Header, Body: string(body),
		})
	}
}

// statusHandler answers code with a small JSON body.
func statusHandler(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":"status %d"}`, code)
	}
}

// resetHandler hijacks the connection and closes it with a RST, before any
// response byte: the gateway sees a reset or EOF before headers.
func resetHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	hijackReset(w)
}

func hijackReset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// refusedAddr returns a loopback address nothing listens on.
func refusedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// harness is a gateway served over a real socket, with a client.
type harness struct {
	g      *Gateway
	srv    *listening
	gs     *Server
	client *http.Client
}

// newHarness starts a gateway with opts. Unless set, tests do not probe and
// do not wait for backends.
func newHarness(t testing.TB, opts Options) *harness {
	t.Helper()
	return newHarnessOn(t, opts, serverEngine)
}

// newHarnessOn is newHarness with the server engine (serverEngine) named.
func newHarnessOn(t testing.TB, opts Options, engine string) *harness {
	t.Helper()
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = -1
	}
	if opts.WaitForBackend == 0 {
		opts.WaitForBackend = -1
	}
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	// The product's server (Tuning.Server).
	gs := Tuning{}.server(g, engine)
	srv := listen(t, gs)
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	h := &harness{g: g, srv: srv, gs: gs, client: &http.Client{Transport: tr}}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = gs.Close()
		srv.wait(t)
		g.Close()
	})
	return h
}

// do sends a request through the gateway and returns the response with its
// body read.
func (h *harness) do(t testing.TB, method, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp, string(b)
}

// post sends a small chat request and returns the status and the backend
// that answered.
func (h *harness) post(t testing.TB, hdr ...string) (int, string) {
	t.Helper()
	resp, _ := h.do(t, http.MethodPost, "/api/chat", `{"model":"m"}`, hdr...)
	return resp.StatusCode, resp.Header.Get(BackendHeader)
}

// within fails the test if ch does not deliver within d. It is a guard
// against hangs, not a synchronization.
func within[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func status(t testing.TB, g *Gateway, id string) BackendStatus {
	t.Helper()
	for _, s := range g.Backends() {
		if s.ID == id && !s.Removed {
			return s
		}
	}
	t.Fatalf("backend %s not found in %+v", id, g.Backends())
	return BackendStatus{}
}

// listening is a Server serving on a loopback port.
type listening struct {
	URL    string // http://host:port
	served chan error
}

func listen(t testing.TB, gs *Server) *listening {
	t.Helper()
	// The product's listener for the engine (Listen): h1's with h1.
	listen := net.Listen
	if gs.lean != nil {
		listen = h1.Listen
	}
	ln, err := listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &listening{URL: "http://" + ln.Addr().String(), served: make(chan error, 1)}
	go func() { l.served <- gs.Serve(ln) }()
	return l
}

// wait checks that Serve returned http.ErrServerClosed after Close.
func (l *listening) wait(t testing.TB) {
	if err := <-l.served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v, want http.ErrServerClosed", err)
	}
}

// addr is the host:port the server listens on.
func (l *listening) addr() string { return strings.TrimPrefix(l.URL, "http://") }
