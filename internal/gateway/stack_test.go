//go:build !race

// Not under the race detector, whose instrumentation makes every frame
// larger.

package gateway

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// streamOpenBackend accepts connections in one goroutine (so that it adds no
// stack per stream), answers each request with the head of a chunked
// stream and its first chunk, and then holds it open.
func streamOpenBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		const answer = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"e\r\n{\"response\":1}\r\n"
		buf := make([]byte, 8<<10)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			// The gateway's request arrives in one piece (a small POST).
			got := 0
			for !strings.Contains(string(buf[:got]), "\r\n\r\n") || !strings.HasSuffix(string(buf[:got]), "}") {
				if got == len(buf) {
					buf = append(buf, make([]byte, len(buf))...)
				}
				n, err := c.Read(buf[got:])
				if err != nil {
					break
				}
				got += n
			}
			_, _ = c.Write([]byte(answer))
		}
	}()
	return ln.Addr().String()
}

// openStreams sends n requests with body through h's gateway, each on a
// connection of its own, and returns once every one has its first token
// (the stream is committed and waits for the next).
func openStreams(t *testing.T, h *harness, n int, body string) {
	t.Helper()
	var clients []net.Conn
	t.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
	})
	for i := range n {
		c, err := net.Dial("tcp", h.srv.addr())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		fmt.Fprintf(c, "POST /api/generate HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			if strings.HasPrefix(line, `{"response":1}`) {
				break
			}
		}
	}
}

// TestWaitingStreamsLetGoOfTheirPrompt: once its answer is committed, a
// stream holds neither the request's body nor the outbound request nor the
// prompt's hashes (forgetRequest): the heap per waiting stream with 32 KiB
// prompts is within a fraction of a prompt of that with tiny ones (56 KB
// against 7.5 KB per stream before forgetRequest, 10.7 against 7.5 after;
// most of the difference was the prefix index, bounded and shared, now
// made whole by the first prompt, before the streams are counted).
func TestWaitingStreamsLetGoOfTheirPrompt(t *testing.T) {
	const streams, promptBytes = 100, 32 << 10
	perStream := func(prompt string) float64 {
		be := streamOpenBackend(t)
		h := newHarness(t, Options{}) // the prefix-aware default hashes the prompt
		h.g.SetBackends("p", []Backend{{ID: "b", Pool: "p", Address: be}})
		heap := func() uint64 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		// One stream first: what the first prompt makes once (the
		// backend's prefix index, 256 KiB) is not per stream.
		openStreams(t, h, 1, `{"model":"m","prompt":"`+prompt+`"}`)
		before := heap()
		openStreams(t, h, streams, `{"model":"m","prompt":"`+prompt+`"}`)
		return (float64(heap()) - float64(before)) / streams
	}
	tiny := perStream("hi")
	long := perStream(strings.Repeat("token ", promptBytes/6))
	t.Logf("heap per waiting stream: %.0f bytes with a tiny prompt, %.0f with a %d-byte one", tiny, long, promptBytes)
	if long-tiny > promptBytes/4 {
		t.Errorf("a %d-byte prompt adds %.0f bytes of heap per waiting stream: the stream holds on to its request", promptBytes, long-tiny)
	}
}

// TestWaitingStreamsHaveSmallStacks: a stream waiting for its next token
// holds its handler's goroutine, and at thousands of open streams that
// goroutine's stack is the largest part of the gateway's memory per stream
// (BENCHMARKS.md, issue 19). The stack grows to the deepest call made on
// it and shrinks only when a garbage collection finds it three quarters
// unused, which a stream that allocates nothing per token seldom causes.
// So the deep part of serving runs apart (serveApart) and the frames under
// the wait (h1 server, Gateway.ServeHTTP, commit, h1.Body.Each) stay
// small: the stack is measured with the collector off, as the streams
// leave it, and again after collections.
func TestWaitingStreamsHaveSmallStacks(t *testing.T) {
	if backendClient != "h1" {
		// net/http's Transport adds a read and a write goroutine per
		// backend connection: three stacks per stream, by design.
		t.Skipf("backendClient %q: the bound is the h1 client's", backendClient)
	}
	const streams = 200
	be := streamOpenBackend(t)
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{{ID: "b", Pool: "p", Address: be}})

	stackInUse := func() uint64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	before := stackInUse()
	openStreams(t, h, streams, `{"model":"m","prompt":"hi"}`)
	grown := float64(stackInUse()-before) / streams
	runtime.GC()
	runtime.GC() // stacks shrink during the scans
	collected := float64(stackInUse()-before) / streams
	t.Logf("stack in use per waiting stream: %.0f bytes as served, %.0f after collections", grown, collected)
	for _, m := range []struct {
		what string
		per  float64
	}{{"as served (no collection)", grown}, {"after collections", collected}} {
		if m.per > 5<<10 {
			t.Errorf("%.0f bytes of stack per waiting stream %s, want at most 4 KiB: a call under the wait, or before it on the handler's goroutine, went deeper", m.per, m.what)
		}
	}
}
