package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkGatewayProxy measures one small non-streaming chat request
// through the gateway, over loopback sockets, from parallel clients, side
// by side with its peers: the same request through a plain
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
