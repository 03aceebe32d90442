//go:build linux

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

	"golang.org/x/sys/unix"
)

// TestCoroLoopProxies runs one coroutine loop on real sockets: requests
// with and without a body, several on one kept-alive connection, reach a
// real HTTP server and come back whole.
func TestCoroLoopProxies(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)+len(r.URL.Path)))
		_, _ = w.Write([]byte(r.URL.Path))
		_, _ = w.Write(body)
	}))
	defer backend.Close()
	ba := backend.Listener.Addr().(*net.TCPAddr)
	ln, err := reusePortListener(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(ln)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*unix.SockaddrInet4).Port
	go func() { t.Log(coroLoop(ln, ba)) }()

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
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
