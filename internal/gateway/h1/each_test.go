package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scriptedBackend accepts one connection on a real loopback socket, reads
// one request head, and writes what the test sends on sends, each in one
// write; a closed sends closes the connection.
func scriptedBackend(t *testing.T, sends <-chan string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\r\n" {
				break
			}
		}
		for s := range sends {
			if _, err := c.Write([]byte(s)); err != nil {
				return
			}
		}
	}()
	return ln.Addr().String()
}

// scriptedStream asks a scripted backend (scriptedBackend) for an answer
// whose first write is first, through a client of its own, under ctx. The
// backend's further writes go on sends.
func scriptedStream(t *testing.T, ctx context.Context, first string) (*http.Response, chan<- string, *Client) {
	t.Helper()
	sends := make(chan string, 1)
	addr := scriptedBackend(t, sends)
	cl := New(Options{})
	t.Cleanup(func() { cl.Close() })
	sends <- first
	resp, err := cl.RoundTrip(newReq(t, ctx, "GET", "http://"+addr+"/", ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, sends, cl
}

// emitted is one Sink.Emit call.
type emitted struct {
	p     string
	flush bool
}

// chanSink sends what Each hands it on a channel, and fails Emit with
// err once err is set.
type chanSink struct {
	got     chan emitted
	err     error
	waiting bool
}

func (s *chanSink) Emit(p []byte, flush bool) error {
	s.got <- emitted{string(p), flush}
	return s.err
}

func (s *chanSink) Waiting(on bool) { s.waiting = on }

// TestEach: over a real socket, Each hands on every body byte in order,
// flagging a flush exactly when neither further body bytes nor the body's
// whole end are read already, and ends at the end of the body (trailers
// set) or with its failure.
func TestEach(t *testing.T) {
	const chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	type step struct {
		send  string    // one write by the backend ("CLOSE": it closes)
		emits []emitted // what Each hands on after it
	}
	cases := []struct {
		name    string
		steps   []step
		want    error // Each's result; nil: the end of the body
		trailer string
	}{
		{"chunks together, then alone", []step{
			{chunked + "1\r\na\r\n2\r\nbc\r\n", []emitted{{"a", false}, {"bc", true}}},
			{"1\r\nd\r\n", []emitted{{"d", true}}},
			{"0\r\nX-Tokens: 7\r\n\r\n", nil},
		}, nil, "7"},
		{"a chunk split across writes", []step{
			{chunked + "4\r\nab", []emitted{{"ab", true}}},
			{"cd\r\n1\r\ne\r\n0\r\n\r\n", []emitted{{"cd", false}, {"e", false}}},
		}, nil, ""},
		{"the next chunk's size line alone", []step{
			{chunked + "1\r\na\r\n2\r\n", []emitted{{"a", true}}},
			{"bc\r\n0\r\n\r\n", []emitted{{"bc", false}}},
		}, nil, ""},
		// The last bytes with the body's whole end behind them leave with
		// the end, unflushed; with only part of it, they are flushed.
		{"the last chunk with the end and its trailers", []step{
			{chunked + "1\r\na\r\n0\r\nX-Tokens: 3\r\n\r\n", []emitted{{"a", false}}},
		}, nil, "3"},
		{"the last chunk with part of the end", []step{
			{chunked + "1\r\na\r\n0\r\n", []emitted{{"a", true}}},
			{"\r\n", nil},
		}, nil, ""},
		{"the last chunk with the end but for its last line", []step{
			{chunked + "1\r\na\r\n0\r\nX-Tokens: 4\r\n", []emitted{{"a", true}}},
			{"\r\n", nil},
		}, nil, "4"},
		{"content length", []step{
			{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc", []emitted{{"abc", true}}},
			{"de", []emitted{{"de", true}}},
		}, nil, ""},
		{"until the backend closes", []step{
			{"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nab", []emitted{{"ab", true}}},
			{"c", []emitted{{"c", true}}},
			{"CLOSE", nil},
		}, nil, ""},
		{"closed mid-body", []step{
			{chunked + "1\r\na\r\n", []emitted{{"a", true}}},
			{"CLOSE", nil},
		}, io.ErrUnexpectedEOF, ""},
		{"bad chunk framing", []step{
			{chunked + "zz\r\n", nil},
		}, errors.New("any"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, sends, _ := scriptedStream(t, context.Background(), tc.steps[0].send)
			s := &chanSink{got: make(chan emitted, 16)}
			done := make(chan error, 1)
			go func() { done <- resp.Body.(*Body).Each(s) }()
			for i, st := range tc.steps {
				if i > 0 {
					if st.send == "CLOSE" {
						close(sends)
					} else {
						sends <- st.send
					}
				}
				for _, want := range st.emits {
					if got := <-s.got; got != want {
						t.Fatalf("step %d: emitted %+v, want %+v", i, got, want)
					}
				}
			}
			err := <-done
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("Each: %v, want the end of the body", err)
			case tc.want == io.ErrUnexpectedEOF && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Fatalf("Each: %v, want %v", err, tc.want)
			case tc.want != nil && err == nil:
				t.Fatalf("Each: nil, want a failure")
			}
			if got := resp.Trailer.Get("X-Tokens"); got != tc.trailer {
				t.Errorf("trailer X-Tokens %q, want %q", got, tc.trailer)
			}
			select {
			case got := <-s.got:
				t.Errorf("emitted %+v after the end", got)
			default:
			}
		})
	}
}

// TestEachWholeBody: a body whose rest arrived with its head is Whole, and
// Each hands it on in one flushed Emit and ends (the scripted backend
// never sends more nor closes), the connection back in the pool; a sink's
// failure there ends Each with it and the connection is not reused. A
// body still arriving is not Whole.
func TestEachWholeBody(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nContent-Length: "
	for _, tc := range []struct {
		name  string
		first string
		whole bool
		emits []emitted
		fail  bool
	}{
		{"whole", head + "3\r\n\r\nabc", true, []emitted{{"abc", true}}, false},
		{"empty", head + "0\r\n\r\n", true, nil, false},
		{"whole, the sink fails", head + "3\r\n\r\nabc", true, []emitted{{"abc", true}}, true},
		{"still arriving", head + "5\r\n\r\nabc", false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _, cl := scriptedStream(t, context.Background(), tc.first)
			b := resp.Body.(*Body)
			// The head and the body's bytes were one write, but may be two
			// reads: wait until the client holds the 3 body bytes sent (an
			// empty body has ended, its connection pooled).
			for b.c != nil && len(b.c.buffered()) < 3 {
				if err := b.c.readMore(); err != nil {
					t.Fatal(err)
				}
			}
			if got := b.Whole(); got != tc.whole {
				t.Fatalf("Whole() = %v, want %v", got, tc.whole)
			}
			if !tc.whole {
				return
			}
			s := &chanSink{got: make(chan emitted, 4)}
			gone := errors.New("client gone")
			if tc.fail {
				s.err = gone
			}
			done := make(chan error, 1)
			go func() { done <- b.Each(s) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Each waited on the socket for a body it held whole")
			}
			for _, want := range tc.emits {
				if got := <-s.got; got != want {
					t.Fatalf("emitted %+v, want %+v", got, want)
				}
			}
			select {
			case got := <-s.got:
				t.Fatalf("emitted %+v after the body", got)
			default:
			}
			resp.Body.Close()
			switch {
			case tc.fail && err != gone:
				t.Fatalf("Each: %v, want the sink's error", err)
			case tc.fail && cl.Idle() != 0:
				t.Fatalf("%d idle connections after a failed sink, want 0", cl.Idle())
			case !tc.fail && err != nil:
				t.Fatalf("Each: %v, want the end of the body", err)
			case !tc.fail && cl.Idle() != 1:
				t.Fatalf("%d idle connections after the body, want 1", cl.Idle())
			}
		})
	}
}

// TestEachStopsOnASinkFailure: Emit's error ends Each with that error,
// and the connection is not reused.
func TestEachStopsOnASinkFailure(t *testing.T) {
	resp, _, cl := scriptedStream(t, context.Background(), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
	gone := errors.New("client gone")
	s := &chanSink{got: make(chan emitted, 1), err: gone}
	if err := resp.Body.(*Body).Each(s); err != gone {
		t.Fatalf("Each: %v, want the sink's error", err)
	}
	resp.Body.Close()
	if n := cl.Idle(); n != 0 {
		t.Errorf("%d idle connections after an unfinished body, want 0", n)
	}
}

// TestEachCancelled: cancelling the request ends an Each that waits for
// the backend.
func TestEachCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	resp, _, _ := scriptedStream(t, ctx, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
	s := &chanSink{got: make(chan emitted, 1)}
	done := make(chan error, 1)
	go func() { done <- resp.Body.(*Body).Each(s) }()
	<-s.got // Each has handed on the first chunk and waits for more
	cancel()
	if err := <-done; err == nil {
		t.Fatal("Each ended cleanly after the request was cancelled")
	}
}

// readSyscalls is the process's read-family system calls so far (the
// syscr line of /proc/self/io, proc(5)).
func readSyscalls(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no syscr in /proc/self/io")
	return 0
}

// TestEachOneReadPerArrival: a stream whose tokens arrive one at a time
// costs one read(2) per token, not two (Each's point, see its doc). The
// count is the kernel's (/proc/self/io); the backend in this process only
// writes once the request is in.
func TestEachOneReadPerArrival(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts read(2) calls with /proc/self/io")
	}
	const tokens = 200
	resp, sends, _ := scriptedStream(t, context.Background(), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
	s := &chanSink{got: make(chan emitted, 1)}
	done := make(chan error, 1)
	before := readSyscalls(t)
	go func() { done <- resp.Body.(*Body).Each(s) }()
	var body bytes.Buffer
	for i := range tokens {
		tok := "data: {\"token\":" + strconv.Itoa(i) + "}\n\n"
		sends <- strconv.FormatInt(int64(len(tok)), 16) + "\r\n" + tok + "\r\n"
		got := <-s.got
		body.WriteString(got.p)
	}
	sends <- "0\r\n\r\n"
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	reads := readSyscalls(t) - before
	t.Logf("%d read(2) calls for %d tokens", reads, tokens)
	if reads > tokens+tokens/10 {
		t.Errorf("%d read(2) calls for %d tokens arriving one at a time, want about one per token", reads, tokens)
	}
	if n := strings.Count(body.String(), "data: "); n != tokens {
		t.Errorf("%d tokens handed on, want %d", n, tokens)
	}
}
