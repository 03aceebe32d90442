package h1

import (
	"errors"
	"io"
	"net/http"
	"os"
	"syscall"
)

var errDeadline = os.ErrDeadlineExceeded

type bodyKind uint8

const (
	bodyNone     bodyKind = iota // HEAD, 204, 304
	bodyLength                   // Content-Length
	bodyChunked                  // Transfer-Encoding: chunked
	bodyUntilEOF                 // neither: until the backend closes
)

// Body is a response body read from the backend connection in the
// caller's goroutine. At its end the connection goes back to the pool (if
// the response allows it); closing it before the end closes the
// connection. It is not safe for concurrent use.
type Body struct {
	c      *conn // nil once finished or closed
	cl     *Client
	resp   *http.Response
	fields Fields // the head's fields, with Options.PassHeads
	kind   bodyKind
	left   int64 // bodyLength: bytes to go
	dec    chunkDecoder
	reuse  bool
	err    error // sticky: io.EOF at the end, or the failure
	out    int   // bytes the last Next returned, not yet taken
}

// Next returns the next bytes of the body, waiting for them without
// holding a buffer; they are valid until the next call. At the end it
// returns io.EOF (with the trailers set in Response.Trailer).
func (b *Body) Next() ([]byte, error) {
	b.settle()
	p, err := b.peek()
	if err != nil {
		return nil, err
	}
	// Handed on at the next call, not now: taking them may give the
	// buffer back to the pool while the caller still writes them.
	b.out = len(p)
	return p, nil
}

// Whole reports whether the rest of the body has been read already, as a
// short answer's is with its head: Each then hands it on from the
// connection's buffer in one Emit, without waiting on the socket or a
// copy buffer of the caller's. A body that is not whole is better read
// by a caller with a large buffer of its own (Read reads a large body
// straight into it) unless it streams.
func (b *Body) Whole() bool {
	if b.err != nil {
		return b.err == io.EOF
	}
	return b.restBuffered()
}

// restBuffered reports whether a body with a length, not yet ended, is
// read to its end.
func (b *Body) restBuffered() bool {
	return b.kind == bodyLength && int64(len(b.c.buffered())) >= b.left
}

// Ready reports whether the next Next returns bytes already read, without
// waiting for the backend. A proxy flushes what it wrote only when it is
// not, so that tokens that arrived together leave in one write, as with
// net/http's chunked reader, whose Read takes every chunk already buffered.
func (b *Body) Ready() bool {
	if b.err != nil || b.c == nil {
		return false
	}
	return b.readyAfter(b.out)
}

// readyAfter reports whether body bytes are read beyond the next n.
func (b *Body) readyAfter(n int) bool {
	rest := b.c.buffered()[n:]
	if len(rest) == 0 {
		return false
	}
	switch b.kind {
	case bodyLength:
		return b.left > int64(n)
	case bodyUntilEOF:
		return true
	case bodyChunked:
		if b.dec.st == stTrailer {
			return false
		}
		m, _, err := b.chunkedAfter(n, rest)
		return err == nil && m > 0
	}
	return false
}

// chunkedAfter runs the chunked decoder past the next n bytes over rest,
// the bytes read behind them, on a copy (with trailers of its own: the
// dry run must not add to the real ones): data is the next frame's data
// bytes, done whether the body's end was read whole.
func (b *Body) chunkedAfter(n int, rest []byte) (data int, done bool, err error) {
	d := b.dec
	d.trailer = nil
	d.take(n)
	_, data, err = d.frame(rest)
	return data, d.done(), err
}

// settle takes the bytes the last Next returned.
func (b *Body) settle() {
	if n := b.out; n > 0 {
		b.out = 0
		b.take(n)
	}
}

// Read implements io.Reader.
func (b *Body) Read(p []byte) (int, error) {
	b.settle()
	if len(p) == 0 {
		return 0, nil
	}
	if b.err == nil && b.kind != bodyChunked && len(b.c.buffered()) == 0 && len(p) >= rawSize {
		// A large read of a plain body goes straight into p.
		return b.readDirect(p)
	}
	q, err := b.peek()
	if err != nil {
		return 0, err
	}
	n := copy(p, q)
	b.take(n)
	return n, nil
}

func (b *Body) readDirect(p []byte) (int, error) {
	if b.kind == bodyLength && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.c.nc.Read(p)
	b.c.got += n
	if b.kind == bodyLength {
		b.left -= int64(n)
		if b.left == 0 {
			b.finish()
			return n, nil
		}
	}
	if err == io.EOF && b.kind == bodyUntilEOF {
		b.finish()
		if n > 0 {
			return n, nil
		}
		return 0, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.fail(err)
		if n > 0 {
			return n, nil
		}
		return 0, b.err
	}
	return n, nil
}

// peek returns the next body bytes without handing them on.
func (b *Body) peek() ([]byte, error) {
	for {
		if b.err != nil {
			return nil, b.err
		}
		p, end, err := b.avail()
		switch {
		case err != nil:
			b.fail(err)
			continue
		case end:
			b.finish()
			continue
		case len(p) > 0:
			return p, nil
		}
		if err := b.c.readMore(); err != nil {
			b.readFailed(err)
		}
	}
}

// avail returns the body bytes read and not yet handed on (chunk framing
// taken off), without reading; end reports the end of the body (finish is
// due); err a framing error.
func (b *Body) avail() (p []byte, end bool, err error) {
	c := b.c
	buf := c.buffered()
	switch b.kind {
	case bodyNone:
		return nil, true, nil
	case bodyLength:
		return buf[:min(int64(len(buf)), b.left)], false, nil
	case bodyUntilEOF:
		return buf, false, nil
	case bodyChunked:
		skip, n, err := b.dec.frame(buf)
		c.consume(skip)
		if err != nil {
			return nil, false, err
		}
		if n > 0 {
			return c.buffered()[:n], false, nil
		}
		return nil, b.dec.done(), nil
	}
	return nil, false, nil
}

// readFailed ends the body on a failed read: io.EOF is its end when it
// lasts until the backend closes, else a truncated body.
func (b *Body) readFailed(err error) {
	if err == io.EOF && b.kind == bodyUntilEOF {
		b.finish()
		return
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	b.fail(err)
}

// take hands on n bytes peek returned.
func (b *Body) take(n int) {
	if b.advance(n) {
		b.finish()
	}
}

// advance hands on n bytes avail returned; true at the end of a body with
// a length (finish is due).
func (b *Body) advance(n int) bool {
	b.c.consume(n)
	switch b.kind {
	case bodyLength:
		b.left -= int64(n)
		return b.left == 0
	case bodyChunked:
		b.dec.take(n)
	}
	return false
}

// A Sink takes a body's bytes from Body.Each.
type Sink interface {
	// Emit takes p, valid only during the call. flush tells that no
	// further body bytes are read already: a proxy sends what it gathered
	// then, so that tokens that arrived together leave in one write.
	Emit(p []byte, flush bool) error
	// Waiting is told when Each starts (true) and stops waiting for the
	// backend: a proxy times a silent backend only then.
	Waiting(on bool)
}

// Each hands the body's bytes to s as they arrive, until the body ends
// (nil) or fails (its error), or s.Emit fails (its error; the caller
// closes the body).
//
// For a stream, Each costs one read(2) per arrival where Next costs two:
// every RawConn.Read starts by forgetting whether the socket became
// readable, so each of Next's waits begins with a read that finds nothing.
// Each waits inside one RawConn.Read for the whole body and, after a read
// that emptied the socket (fewer bytes than there was room for), waits for
// the next readiness directly, as an edge-triggered event loop does: bytes
// that arrive after that read raise a new edge, which the poller keeps
// until the wait.
func (b *Body) Each(s Sink) error {
	b.settle()
	if b.err != nil {
		return b.result()
	}
	if b.restBuffered() {
		// Whole in the buffer already (a short answer comes with its
		// head): handed on from it, with no wait on the socket. Taking
		// it may give the connection to another request, so after.
		if err := s.Emit(b.c.buffered()[:b.left], true); err != nil {
			return err
		}
		b.take(int(b.left))
		return b.result()
	}
	if b.c.sk.rc == nil {
		return b.eachNext(s)
	}
	var ps pumpState
	err := b.c.sk.rc.Read(func(fd uintptr) bool { return !b.pump(int(fd), s, &ps) })
	return b.eachResult(&ps, err)
}

// pumpState is Each's state between the turns of pump.
type pumpState struct {
	ferr, rerr error // the sink's failure; the body's (io.EOF: the backend closed)
	end        bool  // the body ended
	drained    bool  // the last read emptied the socket
	held       bool  // the sink's writes wait for the client (the event loop)
}

// pump is one turn of Each on the socket fd: it hands s what is buffered
// and reads what the socket holds, until the body ends or fails, s fails
// (false), or the socket is empty or the client is slow (true: wait). As
// an edge-triggered event loop does, after a read that emptied the socket
// it waits instead of reading again: bytes that arrive after that read
// raise a new readiness, which the poller keeps until the wait.
func (b *Body) pump(fd int, s Sink, ps *pumpState) (wait bool) {
	c := b.c
	s.Waiting(false)
	for {
		switch b.emitReady(s, ps) {
		case emitStop:
			return false
		case emitHeld:
			return true // the client takes what was written first
		}
		if ps.drained {
			ps.drained = false
			return !c.wait(s)
		}
		room, err := c.room()
		if err != nil {
			ps.rerr = err
			return false
		}
		n, again, err := recv(fd, (*c.raw)[c.w:])
		if again {
			return !c.wait(s)
		}
		if err != nil {
			ps.rerr = err
			return false
		}
		c.w += n
		c.got += n
		ps.drained = n < room
	}
}

// flushAfter reports whether the bytes handed on up to the next n are to
// be flushed: no more body bytes are read beyond them, nor the body's
// whole end (a chunked body's last chunk and trailer section), with which
// they then leave, in the write that ends the answer.
func (b *Body) flushAfter(n int) bool {
	if b.kind != bodyChunked {
		return !b.readyAfter(n)
	}
	rest := b.c.buffered()[n:]
	if len(rest) == 0 {
		return true
	}
	m, done, err := b.chunkedAfter(n, rest)
	return err != nil || (m == 0 && !done)
}

// What emitReady leaves to its caller.
const (
	emitRead = iota // everything read was handed on: read the socket
	emitStop        // the body ended or failed, or the sink failed (ps)
	emitHeld        // the client holds the stream (the event loop's sink)
)

// emitReady hands s the body's bytes read already, each flushed unless
// more, or the body's end, are read behind it (flushAfter).
func (b *Body) emitReady(s Sink, ps *pumpState) int {
	for {
		p, e, err := b.avail()
		if err != nil || e {
			ps.rerr, ps.end = err, e
			return emitStop
		}
		if len(p) == 0 {
			return emitRead
		}
		ps.ferr = s.Emit(p, b.flushAfter(len(p)))
		if b.advance(len(p)) {
			ps.end = true
			return emitStop
		}
		if ps.ferr != nil {
			return emitStop
		}
		if ps.held {
			return emitHeld
		}
	}
}

// eachResult settles the body after Each's turns ended (err: the wait's
// own failure) and returns Each's result.
func (b *Body) eachResult(ps *pumpState, err error) error {
	switch {
	case ps.end:
		b.finish()
	case ps.rerr != nil:
		b.readFailed(ps.rerr)
	case err != nil:
		b.fail(err)
	}
	if ps.ferr != nil {
		return ps.ferr
	}
	return b.result()
}

// eachNext is Each on a connection that is not a socket.
func (b *Body) eachNext(s Sink) error {
	for {
		s.Waiting(true)
		p, err := b.Next()
		s.Waiting(false)
		if err != nil {
			return b.result()
		}
		if err := s.Emit(p, !b.Ready()); err != nil {
			return err
		}
	}
}

// result is the body's outcome once it ended: nil at its end, else the
// failure.
func (b *Body) result() error {
	if b.err == io.EOF {
		return nil
	}
	return b.err
}

// finish ends the body: trailers into the response, the connection back
// to the pool if it can serve another request.
func (b *Body) finish() {
	if b.err != nil {
		return
	}
	b.err = io.EOF
	if b.dec.trailer != nil {
		if b.resp.Trailer == nil {
			b.resp.Trailer = http.Header{}
		}
		for k, v := range b.dec.trailer {
			b.resp.Trailer[k] = v
		}
	}
	c := b.c
	b.c = nil
	// Bytes after the end are a protocol error of the backend's: the
	// connection is not reused.
	if b.reuse && len(c.buffered()) == 0 && c.unwatch() {
		b.cl.put(c)
		return
	}
	c.close()
}

func (b *Body) fail(err error) {
	if b.err != nil {
		return
	}
	b.err = err
	if b.c != nil {
		b.c.close()
		b.c = nil
	}
}

// Close ends the body; before its end, the connection is closed.
func (b *Body) Close() error {
	b.settle()
	if b.err == nil {
		b.fail(errors.New("h1: body closed"))
	}
	return nil
}

// isStale reports whether err, on a keep-alive connection that received
// nothing, is the backend having closed it while idle.
func isStale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
