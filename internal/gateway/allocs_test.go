package gateway

import (
	"bytes"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// rawBackend answers every request on its connections with reply, reading
// each request's head and its Content-Length body from a buffer of its own:
// after its start it allocates nothing, so that an allocation count taken
// around a request through the gateway is the gateway's.
func rawBackend(t *testing.T, reply []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				n := 0
				for {
					end := bytes.Index(buf[:n], []byte("\r\n\r\n"))
					if end < 0 {
						m, err := c.Read(buf[n:])
						if err != nil {
							return
						}
						n += m
						continue
					}
					head := buf[:end]
					body := 0
					if i := bytes.Index(head, []byte("\r\nContent-Length: ")); i >= 0 {
						v := head[i+len("\r\nContent-Length: "):]
						if j := bytes.IndexByte(v, '\r'); j >= 0 {
							v = v[:j]
						}
						for _, d := range v {
							body = body*10 + int(d-'0')
						}
					}
					whole := end + 4 + body
					for n < whole {
						m, err := c.Read(buf[n:])
						if err != nil {
							return
						}
						n += m
					}
					if _, err := c.Write(reply); err != nil {
						return
					}
					n = copy(buf, buf[whole:n])
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestGatewayAllocationsPerRequest holds what a short chat request costs
// the gateway in allocations, on its own server and backend client as the
// product runs them (no probes, no metrics reads): the exchange comes from
// a pool and goes back to it, the server reuses its request objects per
// connection, and the client writes from a pooled buffer. Session 15
// measured 8 objects (0.89 KB) per request, session 23 6; since session 24
// the backend's answer (its Response, Body and passed fields) is one
// object (h1's respHold), and 4 are left: that, the head's text, the
// attempt's context and the head's line ends. A change that adds to them
// (an exchange no longer pooled is 1.3 KB, one object more) fails here.
// The client and the backend are raw sockets that allocate nothing, so the
// count is the gateway's alone.
func TestGatewayAllocationsPerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items: allocations are not the program's")
	}
	const maxAllocs = 4
	// A model name longer than one byte: reading it must not allocate.
	do := shortRequests(t, `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"stream":false}`)
	allocs := testing.AllocsPerRun(500, do)
	t.Logf("%.2f allocations per request", allocs)
	if allocs > maxAllocs {
		t.Errorf("%.2f allocations per short request through the gateway, want at most %d", allocs, maxAllocs)
	}
}

// TestGatewayAllocationsWithALongPrompt holds the garbage a request
// with a 4 KiB prompt leaves: its body and its prompt's text are read into
// pooled buffers (readBody, promptTexts), so what is left is the
// request's small objects and the prompt's block hashes (512 B): 1.2 KB,
// under 2 KiB. Before the buffers were pooled it was 10.9 KB (the body,
// and the prompt's text, in new arrays each request); a change that
// copies the body once more fails here.
func TestGatewayAllocationsWithALongPrompt(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items: allocations are not the program's")
	}
	const maxBytes = 2 << 10
	content := strings.Repeat("The sea is calm tonight, the tide is full. ", 100)[:4<<10]
	do := shortRequests(t, `{"model":"m","messages":[{"role":"user","content":"`+content+`"}],"stream":false}`)
	const n = 500
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		do()
	}
	runtime.ReadMemStats(&after)
	per := float64(after.TotalAlloc-before.TotalAlloc) / n
	t.Logf("%.0f bytes allocated per request with a %d-byte prompt", per, len(content))
	if per > maxBytes {
		t.Errorf("%.0f bytes allocated per request with a 4 KiB prompt, want at most %d", per, maxBytes)
	}
}

// shortRequests starts a gateway on its own server and backend client as
// the product runs them (no probes), before a rawBackend, and returns a
// function that sends one chat POST with body on a kept-alive raw
// connection and reads the answer; the pools, the backend connection and
// the metric children exist when it returns (50 requests were sent).
func shortRequests(t *testing.T, body string) func() {
	t.Helper()
	replyBody := `{"model":"m","message":{"role":"assistant","content":"hello"},"done":true}`
	reply := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(replyBody)) + "\r\n\r\n" + replyBody)
	backend := rawBackend(t, reply)

	g, err := New(Options{Registry: prometheus.NewRegistry(), ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	g.SetBackends("p", []Backend{{ID: "b0", Pool: "p", Address: backend}})
	gs := Tuning{}.server(g, "h1")
	front := listen(t, gs)
	t.Cleanup(func() {
		_ = gs.Close()
		front.wait(t)
	})

	c, err := net.Dial("tcp", front.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	req := []byte("POST /api/chat HTTP/1.1\r\nHost: gw\r\nUser-Agent: t\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	buf := make([]byte, 8192)
	do := func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		// The answer ends with the backend's body.
		n := 0
		for !bytes.HasSuffix(buf[:n], []byte(replyBody)) {
			m, err := c.Read(buf[n:])
			if err != nil {
				t.Fatalf("after %q: %v", buf[:n], err)
			}
			n += m
		}
		if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 200 ")) {
			t.Fatalf("answer %q", buf[:n])
		}
	}
	for range 50 { // pools, the backend connection and the metric children exist
		do()
	}
	return do
}
