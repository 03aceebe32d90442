package gateway

// Streams written straight to the client connection. For an open stream
// net/http's server holds, besides the handler's goroutine, a second
// goroutine (the background read that notices a client leaving), a 4 KiB
// read buffer, a 4 KiB write buffer and a 2 KiB chunking buffer, for as
// long as the answer lasts: at 3,000 open streams that is most of the
// gateway's memory per stream after the backend side went lean (h1). So
// once a streamed answer's headers are in and the gateway commits to it,
// an HTTP/1.1 client's connection is taken over (http.Hijacker): net/http
// writes the status line and headers as it would have (the same bytes, plus
// "Connection: close"), then the gateway writes the chunked body itself,
// holding a buffer only while a write is under way, and closes the
// connection at the end of the answer. The hijack stops the background
// read; a client that leaves is noticed by a failed write instead (see
// chunkOut). HTTP/2 clients, HTTP/1.0 clients, answers with a length and
// the activator's kept streams stay on net/http's writer.
//
// Only under a Server (Tuning.Server): its Shutdown waits for these
// streams and its Close ends them, and its handler writes the last chunk
// once the whole handler chain has returned, so that the client sees the
// end of the answer after the metrics, the in-flight count and the
// handlers in front of the gateway (usage, tenants) have settled it, as
// with net/http.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
)

// serverStreams selects how streamed answers reach HTTP/1.1 clients:
// "direct" (taken over from net/http, this file) or "nethttp" (net/http's
// response writer throughout). "direct" is the default: measured side by
// side at 1,000 and 3,000 streams it holds 26-35 % less memory per open
// stream, with the CPU per stream within noise (BENCHMARKS.md, issue 19
// third increment). An internal switch, set at build time:
//
//	-ldflags "-X github.com/tidegpu/tidegpu/internal/gateway.serverStreams=nethttp"
var serverStreams = "direct"

// StreamTap is implemented by a ResponseWriter wrapper in front of the
// gateway that keeps what passes through it (the usage recorder and the
// tenant middleware keep an answer's tail for its token counts). When the
// gateway writes a stream straight to the client connection, the body's
// bytes go to each wrapper's TapBody instead of its Write (its WriteHeader
// is called as usual). A stream behind a wrapper that has an Unwrap method
// but not TapBody stays on net/http's writer.
type StreamTap interface {
	TapBody(p []byte)
}

// maxTaps bounds the wrappers a taken-over stream feeds.
const maxTaps = 4

// connSlot is per client connection (Server's ConnContext): where the
// gateway leaves the stream it took over, for the Server's handler to
// finish once the handler chain has returned. HTTP/1 serves one request
// at a time per connection; HTTP/2 requests never use it.
type connSlot struct {
	srv     *Server
	serving bool // a request is in the Server's handler
	st      *directStream
}

type connSlotKey struct{}

func (s *Server) connContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connSlotKey{}, &connSlot{srv: s})
}

// finishing is the Server's handler: it finishes a stream the gateway
// took over, after the handler chain returned (or panicked).
type finishing struct{ h http.Handler }

func (f *finishing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sl, _ := r.Context().Value(connSlotKey{}).(*connSlot)
	if sl == nil || r.ProtoMajor != 1 {
		f.h.ServeHTTP(w, r)
		return
	}
	sl.serving = true
	defer sl.finish()
	f.h.ServeHTTP(w, r)
}

func (sl *connSlot) finish() {
	sl.serving = false
	st := sl.st
	if st == nil {
		return
	}
	sl.st = nil
	st.end()
	sl.srv.streams.remove(st)
}

// directStream is a stream taken over from net/http.
type directStream struct {
	out     chunkOut
	attempt *attemptCtx // Server.Close ends it, and so the backend read
	aborted atomic.Bool // by Server.Close
	done    bool        // the body ended: the last chunk is due
	trailer http.Header
}

// errServerClosed cancels the attempts of taken-over streams at
// Server.Close.
var errServerClosed = errors.New("gateway server closed")

// end writes the last chunk and the trailers if the body ended (and the
// client is still there), and closes the connection.
func (st *directStream) end() {
	if st.out.conn == nil {
		return
	}
	if st.done && !st.aborted.Load() {
		_ = st.out.last(st.trailer)
	}
	_ = st.out.conn.Close()
}

// takeOver writes the status line and headers h of a streamed answer
// and, if the client connection can be taken over from net/http, takes it
// over. It returns nil, with nothing written, if the answer stays on
// net/http's writer; wrote tells whether the headers went out (the hijack
// failed after WriteHeader: the caller goes on with net/http's writer).
func (e *exchange) takeOver(a *attempt, status int, h http.Header) (st *directStream, wrote bool) {
	sl, _ := e.r.Context().Value(connSlotKey{}).(*connSlot)
	r := e.r
	if sl == nil || !sl.serving || sl.st != nil || r.ProtoMajor != 1 || r.ProtoMinor < 1 ||
		r.Method == http.MethodHead || status < 200 || status == http.StatusNoContent ||
		status == http.StatusNotModified || h["Content-Length"] != nil || h["Transfer-Encoding"] != nil {
		return nil, false
	}
	// net/http's writer at the bottom, with only tapping wrappers above.
	st = &directStream{attempt: a.ctx}
	w := e.w
	for {
		if u, ok := w.(interface{ Unwrap() http.ResponseWriter }); ok {
			tap, ok := w.(StreamTap)
			if !ok || st.out.ntaps == maxTaps {
				return nil, false
			}
			st.out.taps[st.out.ntaps] = tap
			st.out.ntaps++
			w = u.Unwrap()
			continue
		}
		break
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil, false
	}
	// Counted before the hijack, while net/http still tracks the
	// connection as active: a Shutdown that has found every tracked
	// connection idle finds this stream in the set.
	if !sl.srv.streams.add(st) {
		return nil, false // Close was called
	}
	h["Connection"] = []string{"close"}
	e.w.WriteHeader(status) // through the wrappers, which note the status
	// The hijack flushes the status line and headers as net/http's Flush
	// does (chunked: HTTP/1.1, no Content-Length), and stops the
	// background read.
	conn, brw, err := hj.Hijack()
	if err != nil {
		sl.srv.streams.remove(st)
		return nil, true
	}
	// The connection's buffers are ours now, and not used: let them go.
	// (Bytes a client pipelined after this request are dropped with
	// them; the connection closes at the end of the answer.)
	*brw.Reader = bufio.Reader{}
	*brw.Writer = bufio.Writer{}
	sl.srv.streams.attach(st, conn)
	sl.st = st
	return st, true
}

// streamSet is the streams taken over from a Server.
type streamSet struct {
	mu     sync.Mutex
	m      map[*directStream]struct{}
	empty  chan struct{} // closed when m empties; nil while nobody waits
	closed bool          // by abort: no more streams are taken over
}

func (s *streamSet) add(st *directStream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = map[*directStream]struct{}{}
	}
	s.m[st] = struct{}{}
	return true
}

// attach sets st's connection; if the set was aborted since st was added,
// the connection is closed at once.
func (s *streamSet) attach(st *directStream, conn net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st.out.conn = conn
	if st.aborted.Load() {
		_ = conn.Close()
	}
}

func (s *streamSet) remove(st *directStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, st)
	if len(s.m) == 0 && s.empty != nil {
		close(s.empty)
		s.empty = nil
	}
}

// len returns the number of streams (for tests).
func (s *streamSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// wait returns when the set is empty, or ctx's error when ctx ends first.
func (s *streamSet) wait(ctx context.Context) error {
	s.mu.Lock()
	if len(s.m) == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.empty == nil {
		s.empty = make(chan struct{})
	}
	ch := s.empty
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// abort ends every stream: closes its client connection and cancels its
// backend read. Streams already in the set end on their own goroutines.
func (s *streamSet) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for st := range s.m {
		st.aborted.Store(true)
		st.attempt.cancel(errServerClosed)
		if st.out.conn != nil {
			_ = st.out.conn.Close()
		}
	}
}

// chunkOut writes an HTTP/1.1 chunked body straight to a connection.
// Write gathers bytes into one chunk, in a pooled buffer held only until
// Flush, which sends the chunk (size line, data, CRLF) in one write: between
// tokens a stream holds no buffer. Our own: httputil.NewChunkedWriter
// writes the size line, the data and the CRLF separately (three writes a
// token on an unbuffered connection, or a bufio.Writer held for the whole
// stream) and its Close writes no trailers.
//
// A client that went away is noticed when a write fails: the first write
// after its close usually still succeeds (the kernel takes the bytes; the
// client's answers with a reset), the next one fails. So the stream ends,
// and its backend connection is closed, at the second token after the
// client left (about two token times), or at the stream idle timeout if
// the backend falls silent, where net/http's background read noticed at
// once.
type chunkOut struct {
	conn  net.Conn
	buf   *[]byte // nil while nothing waits
	n     int     // data bytes waiting, at (*buf)[chunkRoom:]
	taps  [maxTaps]StreamTap
	ntaps int
	err   error // sticky: the first write error
}

// chunkRoom is the room before the data for the size line (16 hex digits
// and CRLF).
const chunkRoom = 18

const chunkBufSize = 4 << 10

var chunkBufPool = sync.Pool{New: func() any { b := make([]byte, chunkBufSize); return &b }}

// chunkData is the data a pooled buffer holds.
const chunkData = chunkBufSize - chunkRoom - 2

var lastChunk = []byte("0\r\n\r\n")

// Write adds p to the chunk being gathered.
func (o *chunkOut) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if o.n+len(p) > chunkData {
		if err := o.Flush(); err != nil {
			return 0, err
		}
		if len(p) > chunkData {
			if err := o.writeChunk(p); err != nil {
				return 0, err
			}
			o.tap(p)
			return len(p), nil
		}
	}
	if o.buf == nil {
		o.buf = chunkBufPool.Get().(*[]byte)
	}
	o.n += copy((*o.buf)[chunkRoom+o.n:], p)
	o.tap(p)
	return len(p), nil
}

func (o *chunkOut) tap(p []byte) {
	for _, t := range o.taps[:o.ntaps] {
		t.TapBody(p)
	}
}

// Flush sends the gathered chunk, if any.
func (o *chunkOut) Flush() error {
	if o.n == 0 || o.err != nil {
		o.release()
		return o.err
	}
	b := *o.buf
	var size [16]byte
	hex := strconv.AppendUint(size[:0], uint64(o.n), 16)
	start := chunkRoom - 2 - len(hex)
	copy(b[start:], hex)
	b[chunkRoom-2], b[chunkRoom-1] = '\r', '\n'
	end := chunkRoom + o.n
	b[end], b[end+1] = '\r', '\n'
	_, err := o.conn.Write(b[start : end+2])
	o.release()
	if err != nil {
		o.err = err
	}
	return err
}

func (o *chunkOut) release() {
	o.n = 0
	if o.buf != nil {
		chunkBufPool.Put(o.buf)
		o.buf = nil
	}
}

// writeChunk sends p as one chunk without copying it (a large write).
func (o *chunkOut) writeChunk(p []byte) error {
	var size [18]byte
	head := append(strconv.AppendUint(size[:0], uint64(len(p)), 16), '\r', '\n')
	bufs := net.Buffers{head, p, lastChunk[3:]}
	if _, err := bufs.WriteTo(o.conn); err != nil {
		o.err = err
		return err
	}
	return nil
}

// last sends what is gathered, then the last chunk with the trailers.
func (o *chunkOut) last(trailer http.Header) error {
	if err := o.Flush(); err != nil {
		return err
	}
	end := lastChunk
	if len(trailer) > 0 {
		var b bytes.Buffer
		b.WriteString("0\r\n")
		if err := trailer.Write(&b); err != nil {
			return err
		}
		b.WriteString("\r\n")
		end = b.Bytes()
	}
	_, err := o.conn.Write(end)
	if err != nil {
		o.err = err
	}
	return err
}
