package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkServerShortRequest measures one small POST answered by a
// trivial handler over a kept-alive loopback connection, on this server
// and, side by side, on net/http's: the client is the same raw one in both
// (its allocations, http.ReadResponse's, count in both), so the difference
// is the servers'.
func BenchmarkServerShortRequest(b *testing.B) {
	reply := []byte(`{"model":"m","message":{"role":"assistant","content":"hello"},"done":true}`)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}`
	req := "POST /api/chat HTTP/1.1\r\nHost: gw\r\nUser-Agent: bench\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	// allocs is each server's allocations per request in its last run
	// (the process's, so the server goroutines' too).
	allocs := map[string]float64{}
	run := func(b *testing.B, serve func(net.Listener) error, stop func()) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = serve(ln) }()
		defer stop()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		b.ReportAllocs()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		b.ResetTimer()
		for range b.N {
			if _, err := io.WriteString(c, req); err != nil {
				b.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
		b.StopTimer()
		runtime.ReadMemStats(&after)
		allocs[b.Name()] = float64(after.Mallocs-before.Mallocs) / float64(b.N)
	}
	b.Run("h1", func(b *testing.B) {
		s := &Server{Handler: h}
		run(b, s.Serve, func() { _ = s.Close() })
	})
	b.Run("nethttp", func(b *testing.B) {
		s := &http.Server{Handler: h}
		run(b, s.Serve, func() { _ = s.Close() })
	})
	// The headline (BENCHMARKS.md): fewer allocations per request than
	// net/http's server, and no more than maxShortRequestAllocs.
	own, peer := allocs[b.Name()+"/h1"], allocs[b.Name()+"/nethttp"]
	if own == 0 || peer == 0 || own >= peer || own > maxShortRequestAllocs {
		b.Errorf("allocations per request: h1 %.1f, net/http %.1f; want h1's fewer, and at most %d", own, peer, maxShortRequestAllocs)
	}
}

// maxShortRequestAllocs bounds BenchmarkServerShortRequest's allocations
// per request with h1: 13 measured, 11 of them the raw client's (its
// request string's conversion and http.ReadResponse) and 2 the server's
// (the head's string and the handler's Header().Set), everything else
// being reused per connection; one more is headroom.
const maxShortRequestAllocs = 14
