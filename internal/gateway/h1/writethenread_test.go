package h1

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestHeaderTimeoutCountsFromTheRequestsEnd: a request the socket does not
// take in one write (16 MB, more than loopback's socket buffers hold, to a
// backend that starts reading it only after three header timeouts) is
// still answered: the header timeout starts again when the rest of the
// request has been written (writeThenRead), as net/http's
// ResponseHeaderTimeout counts from the end of the request. The backend
// then reads what is buffered at full speed and answers at once, so the
// answer comes well within a timeout of the write's end.
func TestHeaderTimeoutCountsFromTheRequestsEnd(t *testing.T) {
	const size = 16 << 20
	const timeout = 300 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3 * timeout) // a backend slow to start reading: the behaviour under test, not a wait for a condition
		n, _ := io.Copy(io.Discard, r.Body)
		io.WriteString(w, strconv.FormatInt(n, 10))
	}))
	defer srv.Close()
	cl := New(Options{ResponseHeaderTimeout: timeout})
	defer cl.Close()
	start := time.Now()
	resp, err := cl.RoundTrip(newReq(t, context.Background(), "POST", srv.URL, strings.Repeat("x", size)))
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != strconv.Itoa(size) {
		t.Errorf("the backend read %s bytes, want %d", b, size)
	}
	if took := time.Since(start); took < timeout {
		t.Fatalf("the request took %v, less than the header timeout: it does not test the restart", took)
	}
}

// countingConn is a real TCP connection whose RawConn counts the calls
// made on it.
type countingConn struct {
	*net.TCPConn
	reads, writes *atomic.Int32
}

func (c countingConn) SyscallConn() (syscall.RawConn, error) {
	rc, err := c.TCPConn.SyscallConn()
	return countingRaw{rc, c.reads, c.writes}, err
}

type countingRaw struct {
	syscall.RawConn
	reads, writes *atomic.Int32
}

func (r countingRaw) Read(f func(uintptr) bool) error {
	r.reads.Add(1)
	return r.RawConn.Read(f)
}

func (r countingRaw) Write(f func(uintptr) bool) error {
	r.writes.Add(1)
	return r.RawConn.Write(f)
}

// TestRequestWrittenInsideTheWait: a short request is written and its
// answer's head read in one RawConn.Read, with no RawConn.Write of its
// own, so that no receive is spent finding that nothing has come yet
// (writeThenRead; a write first and a read after cost one receive more
// per request, BENCHMARKS.md issue 19 thirteenth increment).
func TestRequestWrittenInsideTheWait(t *testing.T) {
	if !rawSockets {
		t.Skip("raw sockets are Linux's")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	var reads, writes atomic.Int32
	d := &net.Dialer{}
	cl := New(Options{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{nc.(*net.TCPConn), &reads, &writes}, nil
	}})
	defer cl.Close()
	for i := range 3 {
		reads.Store(0)
		writes.Store(0)
		resp, err := cl.RoundTrip(newReq(t, context.Background(), "POST", srv.URL, `{"model":"m"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Fatalf("request %d: answer %q", i, b)
		}
		if r, w := reads.Load(), writes.Load(); r != 1 || w != 0 {
			t.Errorf("request %d: %d RawConn reads and %d writes on the backend connection, want 1 and 0", i, r, w)
		}
	}
}
