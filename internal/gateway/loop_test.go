package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// Streams carried by the event loop (h1.Body.EachOnLoop, streamLoop "on"):
// the default for a stream from the h1 client to a client of the h1
// server, which every test of a stream through newHarness runs on. These
// tests are about what only the loop does: the sockets leave the
// runtime's poller and come back, and a slow client is held.

func needLoop(t *testing.T) {
	t.Helper()
	if streamLoop != "on" || serverEngine != "h1" || backendClient != "h1" {
		t.Skipf("streams are not carried by the event loop in this build (streamLoop %q, serverEngine %q, backendClient %q)", streamLoop, serverEngine, backendClient)
	}
}

// loopCarried returns how many streams the loops have carried so far.
func loopCarried() int64 {
	n, _ := h1.LoopStats()
	return n
}

// dialLoopHarness starts a gateway on backend b and connects to it (the
// connection is closed at the test's end); before is loopCarried then.
func dialLoopHarness(t *testing.T, b *testBackend) (h *harness, c net.Conn, before int64) {
	t.Helper()
	h = newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{b.backend("p")})
	before = loopCarried()
	c, err := net.Dial("tcp", h.srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return h, c, before
}

// streamRequest asks for a stream on a raw connection.
const streamRequest = "POST /api/chat HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"stream\":true}"

// postStream sends streamRequest on c and reads the answer's head from br.
func postStream(t *testing.T, c net.Conn, br *bufio.Reader) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, streamRequest); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("answer on the connection: %v", err)
	}
	return resp
}

// readChunked reads one chunked answer (after its head) from br: the
// body, and whether it ended with the last chunk.
func readChunked(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var body strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("chunk size line: %v (after %d bytes)", err, body.Len())
		}
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "%x", &n); err != nil {
			t.Fatalf("chunk size %q: %v", line, err)
		}
		if n == 0 {
			for { // trailers, then the empty line
				l, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("trailer: %v", err)
				}
				if l == "\r\n" {
					return body.String()
				}
				body.WriteString("trailer " + l)
			}
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			t.Fatalf("chunk of %d: %v", n, err)
		}
		body.Write(buf[:n])
	}
}

// TestLoopStreamKeepsBothConnections: a stream on the loop reaches the
// client byte for byte with its trailer, and both connections stay alive
// after it: the client's next request on the same connection is answered,
// and the backend connection is back in the pool.
func TestLoopStreamKeepsBothConnections(t *testing.T) {
	needLoop(t)
	lines := streamLines()
	a := linesBackend(t, "a", lines)
	h, c, before := dialLoopHarness(t, a)
	br := bufio.NewReader(c)
	for i := range 3 {
		resp := postStream(t, c, br)
		if resp.StatusCode != http.StatusOK || resp.Close || len(resp.TransferEncoding) != 1 {
			t.Fatalf("request %d: status %d, Close %v, TransferEncoding %v", i, resp.StatusCode, resp.Close, resp.TransferEncoding)
		}
		if got, want := readChunked(t, br), strings.Join(lines, "")+"trailer X-Done: yes\r\n"; got != want {
			t.Fatalf("request %d: body of %d bytes, want %d", i, len(got), len(want))
		}
	}
	if n := loopCarried() - before; n != 3 {
		t.Fatalf("%d streams carried by the loop, want 3", n)
	}
	waitUntil(t, "the backend connection back in the pool", func() bool { return h.g.h1.Idle() == 1 })
	if n := h.g.InFlight("a"); n != 0 {
		t.Fatalf("InFlight(a) = %d", n)
	}
	// A short answer on the same connection, after the streams.
	fmt.Fprintf(c, "GET /api/tags HTTP/1.1\r\nHost: gw\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the streams: status %d", resp.StatusCode)
	}
}

// TestLoopStreamSlowClient: a client that reads nothing for a while fills
// its socket; the loop holds what it could not write, stops reading the
// backend meanwhile, and sends everything in order once the client reads.
func TestLoopStreamSlowClient(t *testing.T) {
	needLoop(t)
	const lines, size = 1024, 16 << 10 // 16 MiB
	line := func(i int) string {
		s := fmt.Sprintf("{\"n\":%d,\"pad\":\"", i)
		return s + strings.Repeat("x", size-len(s)-3) + "\"}\n"
	}
	want := sha256.New()
	for i := range lines {
		io.WriteString(want, line(i))
	}
	a := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := range lines {
			if _, err := io.WriteString(w, line(i)); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{a.backend("p")})
	_, heldBefore := h1.LoopStats()

	// A small receive buffer, so that the gateway's writes find it full.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", h.srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, streamRequest)
	waitUntil(t, "the loop to hold the stream for its client", func() bool {
		_, held := h1.LoopStats()
		return held > heldBefore
	})
	br := bufio.NewReaderSize(c, 64<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, resp.Body)
	if err != nil || n != lines*size {
		t.Fatalf("read %d bytes, %v; want %d", n, err, lines*size)
	}
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatal("the body differs from the backend's")
	}
	waitUntil(t, "the gateway lets go", func() bool { return h.g.InFlight("a") == 0 })
}

// TestLoopStreamClientGoneFreesBackend: a client that closes its
// connection mid-stream ends the stream on the loop: the backend's request
// ends, the in-flight count goes back to 0, and no failure is counted
// against the backend.
func TestLoopStreamClientGoneFreesBackend(t *testing.T) {
	needLoop(t)
	a, entered, gone := tickingBackend(t, "a")
	h, c, before := dialLoopHarness(t, a)
	resp := postStream(t, c, bufio.NewReader(c))
	within(t, entered, 5*time.Second, "the stream at the backend")
	if l, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || l != "{\"token\":0}\n" {
		t.Fatalf("first line %q, %v", l, err)
	}
	waitUntil(t, "the stream on the loop", func() bool { return loopCarried() > before })
	c.Close()
	within(t, gone, 5*time.Second, "the backend request to end")
	waitUntil(t, "the gateway lets go", func() bool { return h.g.InFlight("a") == 0 })
	if s := status(t, h.g, "a"); s.Failures != 0 || s.ConsecutiveFailures != 0 {
		t.Fatalf("the client leaving counted against the backend: %+v", s)
	}
}

// TestLoopStreamServerCloseEndsIt: Server.Close ends a stream on the
// loop: the client's body fails (no last chunk), the backend request
// ends, and no failure is counted against the backend.
func TestLoopStreamServerCloseEndsIt(t *testing.T) {
	needLoop(t)
	a, entered, release := holdingBackend(t, "a")
	defer close(release)
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{a.backend("p")})
	before := loopCarried()
	rest := h.startStream(t)
	within(t, entered, 5*time.Second, "stream on a")
	waitUntil(t, "the stream on the loop", func() bool { return loopCarried() > before })
	_ = h.gs.Close()
	if got := within(t, rest, 5*time.Second, "end of the stream"); !strings.HasPrefix(got, "error: ") {
		t.Fatalf("rest after Close: %q, want an error", got)
	}
	waitUntil(t, "the gateway lets go", func() bool { return h.g.InFlight("a") == 0 })
	if s := status(t, h.g, "a"); s.Failures != 0 {
		t.Fatalf("Close counted against the backend: %+v", s)
	}
}

// TestLoopMetrics: the registry exports the event loop's counters, the
// streams it carried and the holds for slow clients, as h1.LoopStats has
// them.
func TestLoopMetrics(t *testing.T) {
	needLoop(t)
	reg := prometheus.NewRegistry()
	h := newHarness(t, Options{Registry: reg})
	h.g.SetBackends("p", []Backend{linesBackend(t, "a", streamLines()).backend("p")})
	before := loopCarried()
	c, err := net.Dial("tcp", h.srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	postStream(t, c, br)
	readChunked(t, br)
	value := func(name string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatalf("%s not exported", name)
		return 0
	}
	streams, holds := h1.LoopStats()
	if got := value("tidegpu_gateway_stream_loop_streams_total"); got != float64(streams) || streams <= before {
		t.Fatalf("tidegpu_gateway_stream_loop_streams_total = %v, want %d (more than %d before the stream)", got, streams, before)
	}
	if got := value("tidegpu_gateway_stream_loop_holds_total"); got != float64(holds) {
		t.Fatalf("tidegpu_gateway_stream_loop_holds_total = %v, want %d", got, holds)
	}
}
