package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// echoBackend is a real HTTP server answering each request with its path
// and body, with a Content-Length.
func echoBackend(t *testing.T) *net.TCPAddr {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)+len(r.URL.Path)))
		_, _ = w.Write([]byte(r.URL.Path))
		_, _ = w.Write(body)
	}))
	t.Cleanup(backend.Close)
	return backend.Listener.Addr().(*net.TCPAddr)
}

// checkProxies sends requests with and without a body, several on one
// kept-alive connection, through the proxy at base to echoBackend, and
// checks that each comes back whole.
func checkProxies(t *testing.T, base string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	big := bytes.Repeat([]byte("x"), 9000) // more than one receive
	for i, tc := range []struct {
		method, path string
		body         []byte
	}{
		{"GET", "/api/tags", nil},
		{"POST", "/api/chat", []byte(`{"model":"m","stream":false}`)},
		{"POST", "/v1/completions", big},
		{"GET", "/again", nil},
	} {
		req, err := http.NewRequest(tc.method, base+tc.path, bytes.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("request %d: body: %v", i, err)
		}
		if want := tc.path + string(tc.body); string(got) != want {
			t.Fatalf("request %d: got %d bytes %.40q, want %d bytes %.40q", i, len(got), got, len(want), want)
		}
	}
}

// TestRawProxies runs -engine raw on real sockets.
func TestRawProxies(t *testing.T) {
	ba := echoBackend(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { _ = rawProxy(ln, ba.String()) }()
	checkProxies(t, "http://"+ln.Addr().String())
}

// TestH1ServerRawProxies runs -engine h1server on real sockets.
func TestH1ServerRawProxies(t *testing.T) { checkH1Handler(t, h1ServerRaw) }

// TestH1PassProxies runs -engine h1pass on real sockets.
func TestH1PassProxies(t *testing.T) { checkH1Handler(t, h1Pass) }

// checkH1Handler serves the handler handlerFor makes for echoBackend on an
// h1.Server and checks it as a proxy (checkProxies).
func checkH1Handler(t *testing.T, handlerFor func(backend string) http.Handler) {
	t.Helper()
	ba := echoBackend(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &h1.Server{Handler: handlerFor(ba.String())}
	go func() { _ = s.Serve(ln) }()
	defer s.Close()
	checkProxies(t, "http://"+ln.Addr().String())
}
