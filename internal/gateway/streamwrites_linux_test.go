//go:build linux

package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFirstTokenLeavesWithHead: a backend that sends its answer's head
// with the first token (net/http, and so Ollama, writes the head with the
// first flushed chunk) has both reach the client in one write of the
// gateway's, one TCP segment: the head is not flushed on its own first,
// and the first token does not wait for the event loop's turn. The stream
// still goes on to the loop for the tokens after it.
func TestFirstTokenLeavesWithHead(t *testing.T) {
	needLoop(t)
	release := make(chan struct{})
	a := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, "{\"token\":0}\n")
		w.(http.Flusher).Flush() // the head and the first token
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "{\"token\":1}\n")
	})
	_, lines, before := firstTokenIn(t, a)
	close(release)
	if l, err := lines.ReadString('\n'); err != nil || l != "{\"token\":1}\n" {
		t.Fatalf("second line %q, %v", l, err)
	}
	if _, err := io.Copy(io.Discard, lines); err != nil {
		t.Fatalf("end of the stream: %v", err)
	}
	if n := loopCarried() - before; n != 1 {
		t.Fatalf("%d streams carried by the loop, want 1", n)
	}
}

// TestLastTokenLeavesWithTheEnd: a backend that sends its last token and
// the body's end in one write has both reach the client in one write of
// the gateway's: the last token is not flushed on its own before the end
// of the answer follows it.
func TestLastTokenLeavesWithTheEnd(t *testing.T) {
	needLoop(t)
	release, gone := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(gone) }) // ends the backend handler's wait with the test
	a := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		// Written by hand, each part in one write (net/http writes the
		// end apart from the last chunk).
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"c\r\n{\"token\":0}\n\r\n")
		_ = bw.Flush()
		select {
		case <-release:
		case <-gone: // a hijacked request's context does not end with the test
			return
		}
		_, _ = bw.WriteString("c\r\n{\"token\":1}\n\r\n0\r\n\r\n")
		_ = bw.Flush()
	})
	c, lines, before := firstTokenIn(t, a)
	close(release)
	rest, err := io.ReadAll(lines)
	if err != nil || string(rest) != "{\"token\":1}\n" {
		t.Fatalf("the rest of the stream %q, %v", rest, err)
	}
	if n := dataSegmentsIn(t, c); n != 2 {
		t.Fatalf("the last token and the end came in %d TCP segments, want 1", n-1)
	}
	if n := loopCarried() - before; n != 1 {
		t.Fatalf("%d streams carried by the loop, want 1", n)
	}
}

// firstTokenIn asks backend a, which sends its head with the first token
// {"token":0} and holds the rest, for a stream through a gateway on the
// loop; it checks that the head and that token reached the client in one
// TCP segment (all the gateway has sent, while the backend holds the
// rest), and returns the client's connection, its body from there on, and
// loopCarried before the stream.
func firstTokenIn(t *testing.T, a *testBackend) (c net.Conn, lines *bufio.Reader, before int64) {
	t.Helper()
	_, c, before = dialLoopHarness(t, a)
	resp := postStream(t, c, bufio.NewReader(c))
	lines = bufio.NewReader(resp.Body)
	if l, err := lines.ReadString('\n'); err != nil || l != "{\"token\":0}\n" {
		t.Fatalf("first line %q, %v", l, err)
	}
	if n := dataSegmentsIn(t, c); n != 1 {
		t.Fatalf("the head and the first token came in %d TCP segments, want 1", n)
	}
	return c, lines, before
}

// dataSegmentsIn is the count of segments with data c's socket received
// (tcp(7): TCP_INFO, tcpi_data_segs_in).
func dataSegmentsIn(t *testing.T, c net.Conn) uint32 {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatalf("TCP_INFO: %v", ierr)
	}
	return info.Data_segs_in
}
