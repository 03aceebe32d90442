package h1

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// writerSink emits a stream's bytes to a response writer, flushing each.
type writerSink struct{ w http.ResponseWriter }

func (s writerSink) Emit(p []byte, flush bool) error {
	_, err := s.w.Write(p)
	if err == nil && flush {
		err = http.NewResponseController(s.w).Flush()
	}
	return err
}
func (writerSink) Waiting(bool) {}

// loopProxy serves a stream proxied from backend with cl, on the event
// loop (EachOnLoop).
func loopProxy(t *testing.T, cl *Client, backend string) string {
	t.Helper()
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, backend, nil)
		resp, err := cl.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		if err := resp.Body.(*Body).EachOnLoop(w, writerSink{w}); err != nil {
			t.Errorf("EachOnLoop: %v", err)
		}
	})}
	ln, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String()
}

// heldBackend serves an NDJSON stream of lines lines, each flushed, the
// first one then held until release is closed (so that the streams of a
// test are all open at once); want is the body.
func heldBackend(t *testing.T, lines int) (url string, release chan struct{}, want string) {
	release = make(chan struct{})
	var body strings.Builder
	for i := range lines {
		fmt.Fprintf(&body, "{\"i\":%d}\n", i)
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := range lines {
			fmt.Fprintf(w, "{\"i\":%d}\n", i)
			w.(http.Flusher).Flush()
			if i == 0 {
				<-release
			}
		}
	}))
	t.Cleanup(backend.Close)
	return backend.URL, release, body.String()
}

// TestLoopStreamEndsWithoutGivingBackWhatCloses: at a stream's end on the
// loop, a client connection that closes after the answer (Connection:
// close) gets the answer's last chunk on the loop's descriptor and is
// closed, and a backend connection the pool has no room for is closed;
// the connections that stay are given back and work.
func TestLoopStreamEndsWithoutGivingBackWhatCloses(t *testing.T) {
	backend, release, want := heldBackend(t, 20) // both streams are open at once
	cl := New(Options{MaxIdlePerHost: 1})
	t.Cleanup(cl.Close)
	addr := loopProxy(t, cl, backend+"/stream")
	before, _ := LoopStats()

	var wg sync.WaitGroup
	bodies := make([]string, 2)
	conns := make([]net.Conn, 2)
	readers := make([]*bufio.Reader, 2)
	for i, hdr := range []string{"Connection: close\r\n", ""} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i], readers[i] = c, bufio.NewReader(c)
		fmt.Fprintf(c, "GET /s HTTP/1.1\r\nHost: gw\r\n%s\r\n", hdr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.ReadResponse(readers[i], nil)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Errorf("client %d: body: %v", i, err)
			}
			bodies[i] = string(b)
		}()
	}
	if !waitFor(func() bool { n, _ := LoopStats(); return n-before == 2 }) {
		t.Fatal("the two streams did not both reach the loop")
	}
	close(release)
	wg.Wait()
	for i, b := range bodies {
		if b != want {
			t.Fatalf("client %d: body %q, want %q", i, b, want)
		}
	}
	// The closing client's connection is closed after its answer.
	_ = conns[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := readers[0].ReadByte(); err != io.EOF {
		t.Fatalf("client asking to close: read after the answer = %v, want EOF", err)
	}
	// The other is alive: a second stream on it.
	fmt.Fprintf(conns[1], "GET /s HTTP/1.1\r\nHost: gw\r\n\r\n")
	resp, err := http.ReadResponse(readers[1], nil)
	if err != nil {
		t.Fatalf("kept client: %v", err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != want {
		t.Fatalf("kept client, second stream: %q, %v", b, err)
	}
	// One backend connection pooled (MaxIdlePerHost 1), the other closed.
	if !waitFor(func() bool { return cl.Idle() == 1 }) {
		t.Fatalf("%d backend connections in the pool, want 1 (MaxIdlePerHost)", cl.Idle())
	}
}

// TestWriteTailFallsBackWhenFull: writeTail on a socket whose send buffer
// is full gives the socket back to the runtime and writes the rest through
// it once the peer reads.
func TestWriteTailFallsBackWhenFull(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = peer.(*net.TCPConn).SetReadBuffer(4 << 10)
	_ = nc.(*net.TCPConn).SetWriteBuffer(4 << 10)
	fd, err := dupSocket(nc)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	c := &sconn{s: &Server{}, nc: nc, sk: newSock(nc), tail: fd, hasTail: true}

	// Fill the socket until it takes no more: the peer's window is closed,
	// so no acknowledgment frees room, and the socket stays unwritable.
	filler := make([]byte, 1<<10)
	sent := 0
	for {
		n, err := rawWrite(fd, filler)
		if err == unix.EAGAIN {
			if n, err = rawWrite(fd, filler[:1]); err == unix.EAGAIN {
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
				if k, _ := unix.Poll(pfd, 50); k == 0 {
					break
				}
				continue
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		sent += n
	}
	last := []byte("0\r\n\r\n")
	done := make(chan error, 1)
	go func() { done <- c.writeTail(last) }()
	got, err := io.ReadAll(io.LimitReader(peer, int64(sent+len(last))))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("writeTail: %v", err)
	}
	if c.hasTail {
		t.Fatal("the socket is still the tail after a write that did not fit")
	}
	if string(got[sent:]) != string(last) {
		t.Fatalf("last bytes %q, want %q", got[sent:], last)
	}
	c.nc.Close()
}
