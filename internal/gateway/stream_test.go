package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestChunkOutFraming: what chunkOut writes, decoded by net/http's chunked
// reader, is what was written, with one chunk per Flush (and per write too
// large for the buffer).
func TestChunkOutFraming(t *testing.T) {
	big := strings.Repeat("x", chunkData+1)
	cases := []struct {
		name   string
		writes []string // "|" flushes
		trail  http.Header
		chunks int
	}{
		{"nothing", nil, nil, 0},
		{"one token", []string{"tok\n", "|"}, nil, 1},
		{"gathered", []string{"a", "b", "c", "|"}, nil, 1},
		{"two flushes", []string{"a", "|", "b", "|"}, nil, 2},
		{"empty flush", []string{"|", "|", "a", "|"}, nil, 1},
		{"unflushed at the end", []string{"a", "b"}, nil, 1},
		{"fills the buffer", []string{strings.Repeat("y", chunkData), "z", "|"}, nil, 2},
		{"too large for the buffer", []string{"a", big, "b", "|"}, nil, 3},
		{"trailers", []string{"a", "|"}, http.Header{"X-Usage": {"1, 2"}, "X-Empty": nil}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client, server := net.Pipe()
			wire := make(chan []byte, 1)
			go func() { b, _ := io.ReadAll(client); wire <- b }()
			o := &chunkOut{conn: server}
			var want strings.Builder
			for _, w := range c.writes {
				if w == "|" {
					if err := o.Flush(); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if n, err := o.Write([]byte(w)); err != nil || n != len(w) {
					t.Fatalf("Write: %d, %v", n, err)
				}
				want.WriteString(w)
			}
			if err := o.last(c.trail); err != nil {
				t.Fatal(err)
			}
			if o.buf != nil {
				t.Fatal("a buffer is held after the last chunk")
			}
			server.Close()
			b := <-wire
			if n := bytes.Count(b, []byte("\r\n")); n < 2*c.chunks+2 {
				t.Fatalf("wire %q: %d CRLFs", b, n)
			}
			// Parsed as a whole response by net/http's client code.
			resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(
				strings.NewReader("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Usage\r\n\r\n"), bytes.NewReader(b))), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || string(body) != want.String() {
				t.Fatalf("body %q (%v), want %q; wire %q", body, err, want.String(), b)
			}
			if got := resp.Trailer.Get("X-Usage"); got != c.trail.Get("X-Usage") {
				t.Fatalf("trailer %q, want %q", got, c.trail.Get("X-Usage"))
			}
			// And chunk by chunk.
			chunks := 0
			for rest := b; ; chunks++ {
				line, after, ok := bytes.Cut(rest, []byte("\r\n"))
				if !ok || string(line) == "0" {
					break
				}
				var n int
				if _, err := fmt.Sscanf(string(line), "%x", &n); err != nil || n == 0 {
					t.Fatalf("chunk size line %q", line)
				}
				rest = after[n+2:]
			}
			if chunks != c.chunks {
				t.Fatalf("%d chunks, want %d; wire %q", chunks, c.chunks, b)
			}
		})
	}
}

// TestChunkOutWriteAfterFailure: a failed write sticks, and the buffer
// goes back.
func TestChunkOutWriteAfterFailure(t *testing.T) {
	client, server := net.Pipe()
	client.Close()
	o := &chunkOut{conn: server}
	if _, err := o.Write([]byte("a")); err != nil {
		t.Fatal(err) // gathered, not sent
	}
	if err := o.Flush(); err == nil {
		t.Fatal("Flush to a closed peer succeeded")
	}
	if o.buf != nil {
		t.Fatal("buffer held after a failed flush")
	}
	if _, err := o.Write([]byte("b")); err == nil {
		t.Fatal("Write after a failed flush succeeded")
	}
}

// linesBackend streams lines, each flushed, then the trailer X-Done.
func linesBackend(t *testing.T, id string, lines []string) *testBackend {
	return newBackend(t, id, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Trailer", "X-Done")
		for _, l := range lines {
			_, _ = io.WriteString(w, l)
			w.(http.Flusher).Flush()
		}
		w.Header().Set("X-Done", "yes")
	})
}

func streamLines() []string {
	lines := []string{`{"message":{"content":"é"},"done":false}` + "\n"}
	for i := range 50 {
		lines = append(lines, fmt.Sprintf(`{"message":{"content":"tok %d"},"done":false}`+"\n", i))
	}
	// One line larger than a chunk buffer, and the last.
	lines = append(lines, `{"big":"`+strings.Repeat("b", 10000)+`"}`+"\n", `{"done":true,"eval_count":51}`+"\n")
	return lines
}

// TestDirectStreamByteExact: a streamed answer reaches a net/http client
// byte for byte, with its trailers, over a connection the gateway took
// over (it says Connection: close and closes it after the last chunk).
func TestDirectStreamByteExact(t *testing.T) {
	lines := streamLines()
	a := linesBackend(t, "a", lines)
	h := newHarnessOn(t, Options{}, "nethttp")
	h.g.SetBackends("p", []Backend{a.backend("p")})
	resp, body := h.do(t, http.MethodPost, "/api/chat", `{"stream":true}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(BackendHeader) != "a" {
		t.Fatalf("status %d, backend %q", resp.StatusCode, resp.Header.Get(BackendHeader))
	}
	if !resp.Close {
		t.Fatal("the response does not say Connection: close: the stream was not taken over")
	}
	if want := strings.Join(lines, ""); body != want {
		t.Fatalf("body differs: got %d bytes, want %d", len(body), len(want))
	}
	if got := resp.Trailer.Get("X-Done"); got != "yes" {
		t.Fatalf("trailer X-Done = %q", got)
	}
	// Out of the server's set once the last chunk is written.
	waitUntil(t, "the stream to leave the server's set", func() bool { return h.gs.streams.len() == 0 })
	// The last chunk goes out after the count went down.
	if n := h.g.InFlight("a"); n != 0 {
		t.Fatalf("InFlight(a) = %d", n)
	}

	// On a raw connection: chunked framing parsed by net/http, then the
	// connection closes.
	_, br, rr, err := rawPost(t, h.srv.addr(), "HTTP/1.1")
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.TransferEncoding) != 1 || rr.TransferEncoding[0] != "chunked" || !rr.Close {
		t.Fatalf("TransferEncoding %v, Close %v", rr.TransferEncoding, rr.Close)
	}
	raw, err := io.ReadAll(rr.Body)
	if err != nil || string(raw) != strings.Join(lines, "") {
		t.Fatalf("raw body: %d bytes, %v", len(raw), err)
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after the last chunk: %d, %v; want the connection closed", n, err)
	}
}

// TestDirectStreamOnlyForHTTP11: an HTTP/1.0 client gets the stream from
// net/http (no chunking there: the body ends with the connection).
func TestDirectStreamOnlyForHTTP11(t *testing.T) {
	lines := streamLines()
	a := linesBackend(t, "a", lines)
	h := newHarnessOn(t, Options{}, "nethttp")
	h.g.SetBackends("p", []Backend{a.backend("p")})
	_, _, rr, err := rawPost(t, h.srv.addr(), "HTTP/1.0")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(rr.Body)
	if err != nil || string(raw) != strings.Join(lines, "") || len(rr.TransferEncoding) != 0 {
		t.Fatalf("HTTP/1.0: %d bytes, %v, TE %v", len(raw), err, rr.TransferEncoding)
	}
}

// tapWriter is a wrapper in front of the gateway that keeps what passes
// through, as the usage recorder does; untapped has Unwrap only.
type tapWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *tapWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }
func (w *tapWriter) Write(p []byte) (int, error) {
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}
func (w *tapWriter) TapBody(p []byte)            { w.body.Write(p) }
func (w *tapWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *untapped) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type untapped struct{ http.ResponseWriter }

// TestDirectStreamFeedsTaps: a wrapper with TapBody sees the status and
// every byte of a taken-over stream; behind a wrapper without it, the
// stream stays on net/http's writer.
func TestDirectStreamFeedsTaps(t *testing.T) {
	lines := streamLines()
	a := linesBackend(t, "a", lines)
	for _, tapped := range []bool{true, false} {
		t.Run(fmt.Sprint("tapped=", tapped), func(t *testing.T) {
			g, err := New(Options{ProbeInterval: -1, WaitForBackend: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			g.SetBackends("p", []Backend{a.backend("p")})
			var mu sync.Mutex
			var seen *tapWriter
			gs := Tuning{}.server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !tapped {
					g.ServeHTTP(&untapped{w}, r)
					return
				}
				tw := &tapWriter{ResponseWriter: w}
				g.ServeHTTP(tw, r)
				mu.Lock()
				seen = tw
				mu.Unlock()
			}), "nethttp")
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = gs.Serve(ln) }()
			defer gs.Close()
			resp, err := http.Post("http://"+ln.Addr().String()+"/api/chat", "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(body) != strings.Join(lines, "") {
				t.Fatalf("body: %d bytes, %v", len(body), err)
			}
			if resp.Close != tapped {
				t.Fatalf("taken over (Connection: close) = %v, want %v", resp.Close, tapped)
			}
			if !tapped {
				return
			}
			// The wrapper returned before the last chunk went out.
			mu.Lock()
			defer mu.Unlock()
			if seen == nil || seen.status != http.StatusOK || seen.body.String() != strings.Join(lines, "") {
				t.Fatalf("the tap saw %+v", seen)
			}
		})
	}
}

// TestDirectStreamClientGoneFreesBackend: a client that closes its
// connection mid-stream is noticed at a failed write: the backend's
// request ends, the in-flight count goes back to 0, and no failure is
// counted against the backend.
func TestDirectStreamClientGoneFreesBackend(t *testing.T) {
	a, entered, gone := tickingBackend(t, "a")
	h := newHarnessOn(t, Options{}, "nethttp")
	h.g.SetBackends("p", []Backend{a.backend("p")})
	c, _, rr, err := rawPost(t, h.srv.addr(), "HTTP/1.1")
	if err != nil || !rr.Close {
		t.Fatalf("%v, Close %v", err, rr != nil && rr.Close)
	}
	within(t, entered, 5*time.Second, "the stream at the backend")
	if l, err := bufio.NewReader(rr.Body).ReadString('\n'); err != nil || l != "{\"token\":0}\n" {
		t.Fatalf("first line %q, %v", l, err)
	}
	if n := h.g.InFlight("a"); n != 1 {
		t.Fatalf("InFlight(a) = %d mid-stream", n)
	}
	c.Close()
	within(t, gone, 5*time.Second, "the backend request to end")
	waitUntil(t, "the gateway lets go", func() bool { return h.g.InFlight("a") == 0 && h.gs.streams.len() == 0 })
	if s := status(t, h.g, "a"); s.Failures != 0 || s.ConsecutiveFailures != 0 {
		t.Fatalf("the client leaving counted against the backend: %+v", s)
	}
}

// tickingBackend streams a token every 5 ms until its request ends;
// entered has a value once the first token is out, gone once the request
// ended.
func tickingBackend(t *testing.T, id string) (b *testBackend, entered, gone <-chan struct{}) {
	in, out := make(chan struct{}, 1), make(chan struct{}, 1)
	b = newBackend(t, id, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(w, "{\"token\":%d}\n", i)
			w.(http.Flusher).Flush()
			if i == 0 {
				in <- struct{}{}
			}
			select {
			case <-tick.C:
			case <-r.Context().Done():
				out <- struct{}{}
				return
			}
		}
	})
	return b, in, out
}

// TestDirectStreamShutdownWaits: Server.Shutdown waits for a stream taken
// over from net/http (http.Server.Shutdown alone does not: the hijacked
// connection is not tracked), and the stream completes.
func TestDirectStreamShutdownWaits(t *testing.T) {
	next := make(chan struct{})
	a := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := 0; ; i++ {
			fmt.Fprintf(w, "{\"token\":%d}\n", i)
			w.(http.Flusher).Flush()
			select {
			case _, ok := <-next:
				if !ok {
					fmt.Fprintln(w, `{"done":true}`)
					return
				}
			case <-r.Context().Done():
				return
			}
		}
	})
	h := newHarnessOn(t, Options{}, "nethttp")
	h.g.SetBackends("p", []Backend{a.backend("p")})
	resp, err := h.client.Post(h.srv.URL+"/api/chat", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line := func(want string) {
		t.Helper()
		if l, err := br.ReadString('\n'); err != nil || l != want {
			t.Fatalf("line %q, %v; want %q", l, err, want)
		}
	}
	line("{\"token\":0}\n")
	if !resp.Close || h.gs.streams.len() != 1 {
		t.Fatalf("stream not taken over (Close %v, %d in the set)", resp.Close, h.gs.streams.len())
	}
	done := make(chan error, 1)
	go func() { done <- h.gs.Shutdown(context.Background()) }()
	// Shutdown has closed the listener...
	waitUntil(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", h.srv.addr())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	// ...and the stream goes on, Shutdown waiting for it.
	for i := 1; i <= 20; i++ {
		next <- struct{}{}
		line(fmt.Sprintf("{\"token\":%d}\n", i))
		select {
		case err := <-done:
			t.Fatalf("Shutdown returned (%v) with a stream open", err)
		default:
		}
	}
	close(next)
	line("{\"done\":true}\n")
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the last line: %v, want EOF", err)
	}
	if err := within(t, done, 5*time.Second, "Shutdown"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := h.g.InFlight("a"); n != 0 {
		t.Fatalf("InFlight(a) = %d after Shutdown", n)
	}
}

// TestDirectStreamCloseEndsIt: Server.Close ends a taken-over stream: the
// client's body fails (no last chunk), the backend request ends, and no
// failure is counted against the backend.
func TestDirectStreamCloseEndsIt(t *testing.T) {
	a, entered, release := holdingBackend(t, "a")
	h := newHarnessOn(t, Options{}, "nethttp")
	h.g.SetBackends("p", []Backend{a.backend("p")})
	rest := h.startStream(t)
	within(t, entered, 5*time.Second, "stream on a")
	if n := h.gs.streams.len(); n != 1 {
		close(release)
		t.Fatalf("%d streams taken over, want 1", n)
	}
	_ = h.gs.Close()
	if got := within(t, rest, 5*time.Second, "end of the stream"); !strings.HasPrefix(got, "error: ") {
		t.Fatalf("rest after Close: %q, want an error", got)
	}
	waitUntil(t, "the gateway lets go", func() bool { return h.g.InFlight("a") == 0 && h.gs.streams.len() == 0 })
	if s := status(t, h.g, "a"); s.Failures != 0 {
		t.Fatalf("Close counted against the backend: %+v", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.gs.streams.wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDirectStreamRetriesBeforeFirstByte: attempts that fail before the
// answer is committed are retried as before, and the stream that answers
// is taken over.
func TestDirectStreamRetriesBeforeFirstByte(t *testing.T) {
	reset := newBackend(t, "reset", resetHandler)
	unavailable := newBackend(t, "unavailable", statusHandler(http.StatusServiceUnavailable))
	lines := streamLines()
	good := linesBackend(t, "good", lines)
	h := newHarnessOn(t, Options{Policy: "round-robin"}, "nethttp")
	h.g.SetBackends("p", []Backend{reset.backend("p"), unavailable.backend("p"), good.backend("p")})
	for range 6 {
		resp, body := h.do(t, http.MethodPost, "/api/chat", `{}`)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(BackendHeader) != "good" || body != strings.Join(lines, "") || !resp.Close {
			t.Fatalf("status %d from %q, %d bytes, Close %v", resp.StatusCode, resp.Header.Get(BackendHeader), len(body), resp.Close)
		}
	}
}

// rawPost sends POST /api/chat with the body {} as proto on a new
// connection to addr (closed at the test's end) and reads the answer's
// head with net/http's parser.
func rawPost(t *testing.T, addr, proto string) (net.Conn, *bufio.Reader, *http.Response, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /api/chat %s\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", proto)
	br := bufio.NewReader(c)
	rr, err := http.ReadResponse(br, nil)
	return c, br, rr, err
}
