package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serve starts a Server for h on a loopback port; it is closed when the
// test ends.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return ln.Addr().String()
}

// rawExchange writes req on a new connection and reads until the server
// closes it or 2 s pass.
func rawExchange(t *testing.T, addr, req string) string {
	t.Helper()
	out, _ := readRaw(t, addr, req, 2*time.Second)
	return out
}

// closedBy is rawExchange that fails if the server has not closed the
// connection within limit.
func closedBy(t *testing.T, addr, req string, limit time.Duration) string {
	t.Helper()
	out, err := readRaw(t, addr, req, limit)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("after %q the server kept the connection open for %v", req, limit)
	}
	return out
}

// readRaw writes req on a new connection and reads until the server closes
// it (err nil) or limit passes (a timeout).
func readRaw(t *testing.T, addr, req string, limit time.Duration) (string, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(limit))
	out, err := io.ReadAll(c)
	return string(out), err
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "%s %s host=%s len=%d te=%v body=%s", r.Method, r.RequestURI, r.Host, r.ContentLength, r.TransferEncoding, b)
}

// TestServerRawRequests reads answers byte for byte to requests written on
// a socket: framing, keep-alive and the requests the server refuses.
func TestServerRawRequests(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(echo)})
	for _, tc := range []struct {
		name string
		req  string
		want []string // substrings of the whole exchange, in order
		not  []string
	}{
		{"get", "GET /a?b=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			[]string{"HTTP/1.1 200 OK\r\n", "Content-Type: text/plain\r\n", "Content-Length: 35\r\n", "Connection: close\r\n", "\r\nGET /a?b=1 host=x len=0 te=[] body="}, nil},
		{"keep-alive: two requests on one connection", "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			[]string{"GET /1 host=x", "HTTP/1.1 200 OK", "GET /2 host=x"}, nil},
		{"post with a length", "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
			[]string{"POST /p host=x len=5 te=[] body=hello"}, nil},
		{"chunked upload with a trailer, then a second request", "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\nGET /n HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			[]string{"POST /c host=x len=-1 te=[chunked] body=abcde", "GET /n host=x"}, nil},
		{"a CRLF after a body is skipped", "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nA\r\nGET /n HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			[]string{"body=A", "GET /n host=x"}, nil},
		{"HTTP/1.0 closes", "GET /o HTTP/1.0\r\n\r\n", []string{"HTTP/1.0 200 OK\r\n", "Connection: close\r\n", "GET /o host= "}, nil},
		{"HTTP/1.0 keep-alive", "GET /o HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /p HTTP/1.0\r\n\r\n",
			[]string{"Connection: keep-alive\r\n", "GET /o", "GET /p"}, nil},
		{"absolute form sets Host", "GET http://h.example/z HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n", []string{"host=h.example"}, nil},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", []string{"HTTP/1.1 400 Bad Request\r\n", "missing required Host header"}, []string{"200 OK"}},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", []string{"400 Bad Request", "more than one Host"}, nil},
		{"smuggling: length and chunked", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			[]string{"400 Bad Request", "both Transfer-Encoding and Content-Length"}, []string{"200 OK"}},
		{"smuggling: differing lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
			[]string{"400 Bad Request"}, []string{"200 OK"}},
		{"smuggling: space before colon", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 3\r\n\r\n", []string{"400 Bad Request"}, []string{"200 OK"}},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n", []string{"400 Bad Request", "obs-fold"}, nil},
		{"unknown coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", []string{"501 Not Implemented"}, nil},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", []string{"505 HTTP Version Not Supported"}, nil},
		{"bad Expect", "POST / HTTP/1.1\r\nHost: x\r\nExpect: magic\r\nContent-Length: 1\r\n\r\nA", []string{"417 Expectation Failed"}, nil},
		{"bad length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", []string{"400 Bad Request", "invalid Content-Length"}, nil},
		{"control character in a value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", []string{"400 Bad Request"}, nil},
		{"garbage", "hello\r\n\r\n", []string{"400 Bad Request", "malformed request line"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rawExchange(t, addr, tc.req)
			rest := got
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("want %q (in order) in\n%s", w, got)
				}
				rest = rest[i+len(w):]
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Fatalf("did not want %q in\n%s", n, got)
				}
			}
		})
	}
}

func TestServerHeadTooLarge(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(echo), MaxHeaderBytes: 1024})
	got := rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 2000)+"\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 431 ") {
		t.Fatalf("got %q", got)
	}
	// A long line below the limit is read across the read buffer's end.
	addr = serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, len(r.Header.Get("X-Big")))
	})})
	got = rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "+strings.Repeat("a", 10000)+"\r\n\r\n")
	if !strings.HasSuffix(got, "\r\n\r\n10000") {
		t.Fatalf("got %q", got)
	}
}

// TestServerWithNetHTTPClient drives the server with net/http's client:
// what a client sees of each way a handler answers.
func TestServerWithNetHTTPClient(t *testing.T) {
	big := strings.Repeat("0123456789", 1000)
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", echo)
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, big)
	})
	mux.HandleFunc("/length", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		_, _ = io.WriteString(w, "12345")
	})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		if _, err := io.WriteString(w, "x"); !errors.Is(err, http.ErrBodyNotAllowed) {
			t.Errorf("write after 204: %v", err)
		}
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Trailer", "X-Count")
		for i := range 3 {
			fmt.Fprintf(w, "{\"n\":%d}\n", i)
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Error(err)
			}
		}
		w.Header().Set("X-Count", "3")
		w.Header().Set(http.TrailerPrefix+"X-Late", "yes")
	})
	mux.HandleFunc("/error", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nope", http.StatusTeapot)
	})
	addr := serve(t, &Server{Handler: mux})
	var conns atomic.Int32
	tr := &http.Transport{DisableCompression: true, ExpectContinueTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if !i.Reused {
			conns.Add(1)
		}
	}}
	do := func(method, path string, body io.Reader, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, "http://"+addr+path, body)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp
	}
	read := func(resp *http.Response) string {
		t.Helper()
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	if got := read(do("GET", "/echo", nil)); got != "GET /echo host="+addr+" len=0 te=[] body=" {
		t.Errorf("GET: %q", got)
	}
	resp := do("POST", "/echo", strings.NewReader("hi"))
	if got := read(resp); got != "POST /echo host="+addr+" len=2 te=[] body=hi" || resp.ContentLength != int64(len(got)) {
		t.Errorf("POST: %q (length %d)", got, resp.ContentLength)
	}
	// A body of unknown length goes chunked; Expect: 100-continue is
	// answered before the client sends it.
	resp = do("POST", "/echo", io.MultiReader(strings.NewReader("a"), strings.NewReader(big)), "Expect", "100-continue")
	if got := read(resp); got != "POST /echo host="+addr+" len=-1 te=[chunked] body=a"+big {
		t.Errorf("chunked POST: %d bytes", len(got))
	}
	resp = do("GET", "/big", nil)
	if got := read(resp); got != big || resp.ContentLength != -1 || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("big: %d bytes, length %d, type %q", len(got), resp.ContentLength, resp.Header.Get("Content-Type"))
	}
	resp = do("HEAD", "/length", nil)
	if got := read(resp); got != "" || resp.ContentLength != 5 {
		t.Errorf("HEAD: %q, length %d", got, resp.ContentLength)
	}
	if got := read(do("GET", "/length", nil)); got != "12345" {
		t.Errorf("length: %q", got)
	}
	resp = do("GET", "/nocontent", nil)
	if got := read(resp); got != "" || resp.StatusCode != http.StatusNoContent {
		t.Errorf("204: %d %q", resp.StatusCode, got)
	}
	resp = do("GET", "/stream", nil)
	if got := read(resp); got != "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n" || resp.Trailer.Get("X-Count") != "3" || resp.Trailer.Get("X-Late") != "yes" {
		t.Errorf("stream: %q, trailer %v", got, resp.Trailer)
	}
	resp = do("GET", "/error", nil)
	if got := read(resp); got != "nope\n" || resp.StatusCode != http.StatusTeapot {
		t.Errorf("error: %d %q", resp.StatusCode, got)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for the requests, want 1 kept alive", n)
	}
}

// TestServerStreamsFlushEachChunk reads a stream on a raw socket: each
// flush arrives as one chunk before the handler goes on, and the
// connection stays open for the next request.
func TestServerStreamsFlushEachChunk(t *testing.T) {
	next := make(chan struct{})
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/s" {
			fmt.Fprint(w, "ok")
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for range 2 {
			<-next
			_, _ = io.WriteString(w, "data: x\n\n")
			w.(http.Flusher).Flush()
		}
	})})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	_, _ = io.WriteString(c, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
	head := readUntil(t, br, "\r\n\r\n")
	if !strings.Contains(head, "Transfer-Encoding: chunked\r\n") || strings.Contains(head, "Connection: close") {
		t.Fatalf("head %q", head)
	}
	for range 2 {
		next <- struct{}{}
		if got := readUntil(t, br, "\n\n\r\n"); got != "9\r\ndata: x\n\n\r\n" {
			t.Fatalf("chunk %q", got)
		}
	}
	if got := readUntil(t, br, "\r\n\r\n"); got != "0\r\n\r\n" {
		t.Fatalf("last chunk %q", got)
	}
	_, _ = io.WriteString(c, "GET /n HTTP/1.1\r\nHost: x\r\n\r\n")
	if got := readUntil(t, br, "ok"); !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") {
		t.Fatalf("second answer %q", got)
	}
}

func readUntil(t *testing.T, br *bufio.Reader, end string) string {
	t.Helper()
	var b bytes.Buffer
	for !strings.HasSuffix(b.String(), end) {
		c, err := br.ReadByte()
		if err != nil {
			t.Fatalf("after %q: %v", b.String(), err)
		}
		b.WriteByte(c)
	}
	return b.String()
}

// TestServerNoticesAClientLeaving: a request still waiting for its answer
// has its context cancelled when the client closes the connection: served
// on a goroutine, and served on a serve loop from which the handler
// detached before its wait.
func TestServerNoticesAClientLeaving(t *testing.T) {
	for _, noLoops := range []bool{true, false} {
		cancelled, read := make(chan error, 1), make(chan struct{})
		addr := serve(t, &Server{NoLoops: noLoops, WatchAfter: 10 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body) // the watch starts once the body is read, as net/http's
			Detach(r.Context())       // the wait below is not for a socket
			close(read)
			<-r.Context().Done()
			cancelled <- r.Context().Err()
		})})
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
		<-read
		c.Close()
		wantCancelled(t, cancelled, fmt.Sprintf("NoLoops %v: the request", noLoops))
	}
}

// wantCancelled waits up to 10 s for a handler to report its context's
// end on cancelled, and fails unless it was cancelled.
func wantCancelled(t *testing.T, cancelled <-chan error, what string) {
	t.Helper()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s's context was not cancelled after the client left", what)
	}
}

// dialRaw opens a connection to addr, with a 10 s deadline, and a reader
// of it; the connection is closed when the test ends.
func dialRaw(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// TestServerWatchStopsForTheAnswer: a watch under way ends when the answer
// goes out, and the connection serves the next request.
func TestServerWatchStopsForTheAnswer(t *testing.T) {
	s := &Server{WatchAfter: time.Millisecond, NoLoops: true} // on a loop, the loop watches (serveloop_test.go)
	s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/1" && !waitFor(func() bool { return watching(s) == 1 }) {
			t.Error("the watch did not start")
		}
		if r.Context().Err() != nil {
			t.Error("cancelled although the client stayed")
		}
		fmt.Fprint(w, r.URL.Path)
	})
	c, br := dialRaw(t, serve(t, s))
	_, _ = io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n")
	if got := readUntil(t, br, "\r\n\r\n/1"); !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") {
		t.Fatalf("first answer %q", got)
	}
	// The connection serves the next request.
	_, _ = io.WriteString(c, "GET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
	if got := readUntil(t, br, "\r\n\r\n/2"); !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") {
		t.Fatalf("second answer %q", got)
	}
}

// TestServerShutdown: Shutdown waits for the answer under way, which ends
// with "Connection: close", then Serve returns ErrServerClosed.
func TestServerShutdown(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		fmt.Fprint(w, "done")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	got := make(chan string, 1)
	go func() { got <- rawExchange(t, ln.Addr().String(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n") }()
	idle, err := net.Dial("tcp", ln.Addr().String()) // an idle keep-alive connection
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// Shutdown is under way once it closed the idle connection; it must
	// still wait for the answer.
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the idle connection is still open: %v", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with an answer under way", err)
	default:
	}
	close(release)
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if out := <-got; !strings.Contains(out, "Connection: close\r\n") || !strings.HasSuffix(out, "done") {
		t.Fatalf("answer %q", out)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}

// TestServerCloseCancelsRequests: Close cancels the request under way.
func TestServerCloseCancelsRequests(t *testing.T) {
	started, cancelled := make(chan struct{}), make(chan struct{})
	s := &Server{WatchAfter: -1, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		close(cancelled)
	})}
	addr := serve(t, s)
	go func() {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	<-started
	_ = s.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not cancel the request under way")
	}
}

// logLines is a log destination a test reads from another goroutine.
type logLines chan string

func (l logLines) Write(p []byte) (int, error) { l <- string(p); return len(p), nil }

// TestServerPanics: a handler's panic closes the connection; the server
// goes on serving.
func TestServerPanics(t *testing.T) {
	logged := make(logLines, 1)
	s := &Server{ErrorLog: log.New(logged, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		fmt.Fprint(w, "fine")
	})}
	addr := serve(t, s)
	if got := rawExchange(t, addr, "GET /panic HTTP/1.1\r\nHost: x\r\n\r\n"); got != "" {
		t.Fatalf("answer to a panic: %q", got)
	}
	if got := rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasSuffix(got, "fine") {
		t.Fatalf("after the panic: %q", got)
	}
	if l := <-logged; !strings.Contains(l, "boom") {
		t.Fatalf("log %q", l)
	}
}

// TestServerAnswersALargeUploadEarly: an answer given without reading a
// large body reaches the client, which is still sending it (the
// connection is closed after draining for a while, not reset).
func TestServerAnswersALargeUploadEarly(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.CopyN(io.Discard, r.Body, 1<<20) // as the gateway reads up to its limit
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	})})
	for range 3 {
		resp, err := http.Post("http://"+addr+"/", "application/octet-stream", bytes.NewReader(make([]byte, 8<<20)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
			t.Fatalf("%d %q, close %v", resp.StatusCode, b, resp.Close)
		}
	}
}

// watching counts s's connections whose watch is reading.
func watching(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		c.mu.Lock()
		if c.watching {
			n++
		}
		c.mu.Unlock()
	}
	return n
}

// waitFor polls cond until it holds (true) or 5 s pass (false).
func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// TestCutOne: the first match goes, the last element takes its place, the
// freed slot is cleared; a missing value changes nothing.
func TestCutOne(t *testing.T) {
	for _, tc := range []struct {
		in    []int
		v     int
		want  []int
		found bool
	}{
		{nil, 1, nil, false},
		{[]int{1}, 1, []int{}, true},
		{[]int{1, 2, 3}, 1, []int{3, 2}, true},
		{[]int{1, 2, 3}, 3, []int{1, 2}, true},
		{[]int{1, 2, 2}, 2, []int{1, 2}, true},
		{[]int{1, 2, 3}, 4, []int{1, 2, 3}, false},
	} {
		in := slices.Clone(tc.in)
		got, found := cutOne(in, tc.v)
		if found != tc.found || !slices.Equal(got, tc.want) {
			t.Errorf("cutOne(%v, %d) = %v, %v; want %v, %v", tc.in, tc.v, got, found, tc.want, tc.found)
		}
		if found && in[len(in)-1] != 0 {
			t.Errorf("cutOne(%v, %d) left %d in the freed slot", tc.in, tc.v, in[len(in)-1])
		}
	}
}
