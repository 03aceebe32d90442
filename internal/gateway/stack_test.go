//go:build !race

// Not under the race detector, whose instrumentation makes every frame
// larger.

package gateway

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
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

// TestWaitingStreamsHaveSmallStacks: a stream waiting for its next token
// holds its handler's goroutine, whose stack the garbage collector halves
// only while less than a quarter of it is used. The frames under the wait
// (h1 server, Gateway.ServeHTTP, commit, h1.Body.Each) are kept small so
// that it does: at thousands of open streams the stack is the largest part
// of the gateway's memory per stream (BENCHMARKS.md, issue 19).
func TestWaitingStreamsHaveSmallStacks(t *testing.T) {
	const streams = 200
	be := streamOpenBackend(t)
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{{ID: "b", Pool: "p", Address: be}})

	stackInUse := func() uint64 {
		runtime.GC()
		runtime.GC() // stacks shrink during the scans
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	before := stackInUse()
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	body := `{"model":"m","prompt":"hi"}`
	for i := range streams {
		c, err := net.Dial("tcp", h.srv.addr())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		fmt.Fprintf(c, "POST /api/generate HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		// The first token through the gateway: the stream is committed
		// and waits for the next.
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
	per := float64(stackInUse()-before) / streams
	t.Logf("stack in use per waiting stream: %.0f bytes", per)
	if per > 6<<10 {
		t.Errorf("%.0f bytes of stack per waiting stream, want about 4 KiB: a frame under the wait grew, so the garbage collector no longer halves the handler's 8 KiB stack", per)
	}
}
