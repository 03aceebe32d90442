package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkGatewayProxy measures one small non-streaming chat request
// through the gateway, over loopback sockets, from parallel clients (with
// net/http's server in front, and with the gateway's own), side by side
// with its peers: the same request through a plain
// httputil.ReverseProxy to the single backend (same transport settings), and
// straight to the backend. Allocations include the client's and the
// backend's, which are the same in every sub-benchmark, so differences are
// the proxies' own.
func BenchmarkGatewayProxy(b *testing.B) {
	reply := []byte(`{"model":"m","message":{"role":"assistant","content":"hello"},"done":true}`)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	}))
	defer backend.Close()
	reqBody := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}`)

	run := func(b *testing.B, target string) {
		tr := &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		b.SetParallelism(4)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := client.Post(target+"/api/chat", "application/json", bytes.NewReader(reqBody))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}

	b.Run("gateway", func(b *testing.B) {
		g, err := New(Options{Registry: prometheus.NewRegistry()})
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		g.SetBackends("p", []Backend{{ID: "b0", Pool: "p", Address: backend.Listener.Addr().String()}})
		front := httptest.NewServer(g)
		defer front.Close()
		run(b, front.URL)
	})
	// The gateway behind its own server (Tuning.Server's "h1" engine), as
	// the product runs it; "gateway" has net/http's in front.
	b.Run("gateway-h1", func(b *testing.B) {
		g, err := New(Options{Registry: prometheus.NewRegistry()})
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		g.SetBackends("p", []Backend{{ID: "b0", Pool: "p", Address: backend.Listener.Addr().String()}})
		gs := Tuning{}.server(g, "h1")
		front := listen(b, gs)
		defer front.wait(b)
		defer gs.Close()
		run(b, front.URL)
	})
	b.Run("reverseproxy", func(b *testing.B) {
		u, _ := url.Parse(backend.URL)
		rp := httputil.NewSingleHostReverseProxy(u)
		tr := newTransport(DefaultDialTimeout, 0)
		defer tr.CloseIdleConnections()
		rp.Transport = tr
		rp.FlushInterval = -1
		front := httptest.NewServer(rp)
		defer front.Close()
		run(b, front.URL)
	})
	b.Run("direct", func(b *testing.B) {
		run(b, backend.URL)
	})
}

// BenchmarkGatewayStream measures one stream of 120 chunks through the
// gateway, in lock step: the backend sends its next chunk only when the
// client has read the previous one, so every chunk takes the whole path on
// its own (one read from the backend, one write and flush to the client),
// as tokens 100 ms apart do. Per op: one stream (connection set-up, request,
// 120 chunks). ndjson is Ollama's /api/chat; sse-usage is an OpenAI stream
// whose usage the gateway asked for and strips (Options.OnUsage set).
func BenchmarkGatewayStream(b *testing.B) {
	const chunks = 120
	ndjson := []byte(`{"model":"m","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"tok"},"done":false}` + "\n")
	sse := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}],"usage":null}` + "\n\n")
	usage := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":120,"total_tokens":123}}` + "\n\n")
	for _, tc := range []struct {
		name, path, ctype string
		chunk, tail       []byte
		onUsage           bool
	}{
		{"ndjson", "/api/chat", "application/x-ndjson", ndjson, nil, false},
		{"sse-usage", "/v1/chat/completions", "text/event-stream", sse, usage, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			next := make(chan struct{})
			backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if r.URL.Path != tc.path {
					return // the gateway's probes: 200, empty
				}
				w.Header().Set("Content-Type", tc.ctype)
				rc := http.NewResponseController(w)
				_ = rc.Flush() // the headers, so that the client's Post returns
				for range chunks {
					select {
					case <-next:
					case <-r.Context().Done():
						return
					}
					_, _ = w.Write(tc.chunk)
					_ = rc.Flush()
				}
				if tc.tail != nil {
					_, _ = w.Write(tc.tail)
				}
			}))
			defer backend.Close()
			opts := Options{Registry: prometheus.NewRegistry()}
			if tc.onUsage {
				opts.OnUsage = func(string, string, int64, int64) {}
			}
			g, err := New(opts)
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			g.SetBackends("p", []Backend{{ID: "b0", Pool: "p", Address: backend.Listener.Addr().String()}})
			front := httptest.NewServer(g)
			defer front.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			reqBody := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
			buf := make([]byte, 4096)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Post(front.URL+tc.path, "application/json", bytes.NewReader(reqBody))
				if err != nil {
					b.Fatal(err)
				}
				if resp.StatusCode != http.StatusOK {
					msg, _ := io.ReadAll(resp.Body)
					b.Fatalf("status %s: %s", resp.Status, msg)
				}
				for range chunks {
					next <- struct{}{}
					// One chunk per read: the backend sends nothing more
					// until the next signal.
					if _, err := io.ReadAtLeast(resp.Body, buf, len(tc.chunk)); err != nil {
						b.Fatal(err)
					}
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// TestStreamLargerThanItsBuffer checks that streams whose lines and events
// are larger than the 4 KiB stream copy buffer and the transport's read
// buffer reach the client byte for byte, NDJSON as it is and SSE through
// the usage strip (which must still find and remove the usage chunk).
func TestStreamLargerThanItsBuffer(t *testing.T) {
	big := strings.Repeat("x", 3*streamBufSize+17)
	ndjson := `{"message":{"content":"` + big + `"},"done":false}` + "\n" + `{"done":true}` + "\n"
	sseBody := "data: {\"choices\":[{\"delta\":{\"content\":\"" + big + "\"}}],\"usage\":null}\n\n"
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5}}\n\n"
	done := "data: [DONE]\n\n"
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/api/chat" {
			w.Header().Set("Content-Type", "application/x-ndjson")
			_, _ = io.WriteString(w, ndjson)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{sseBody, usage, done} {
			_, _ = io.WriteString(w, ev)
			http.NewResponseController(w).Flush()
		}
	}))
	defer backend.Close()
	var got atomic.Int64
	h := newHarness(t, Options{OnUsage: func(_, _ string, _, c int64) { got.Store(c) }})
	h.g.SetBackends("p", []Backend{{ID: "b", Pool: "p", Address: backend.Listener.Addr().String()}})
	if _, body := h.do(t, "POST", "/api/chat", `{"model":"m","stream":true}`); body != ndjson {
		t.Errorf("NDJSON: %d bytes arrived, want the backend's %d unchanged", len(body), len(ndjson))
	}
	_, body := h.do(t, "POST", "/v1/chat/completions", `{"model":"m","stream":true}`)
	if body != sseBody+done {
		t.Errorf("SSE: %d bytes arrived, want %d (the token event and [DONE], without the usage chunk)", len(body), len(sseBody+done))
	}
	if got.Load() != 5 {
		t.Errorf("usage reported %d completion tokens, want 5", got.Load())
	}
}
