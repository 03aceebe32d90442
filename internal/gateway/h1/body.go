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
	c     *conn // nil once finished or closed
	cl    *Client
	resp  *http.Response
	kind  bodyKind
	left  int64 // bodyLength: bytes to go
	dec   chunkDecoder
	reuse bool
	err   error // sticky: io.EOF at the end, or the failure
	out   int   // bytes the last Next returned, not yet taken
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

// Ready reports whether the next Next returns bytes already read, without
// waiting for the backend. A proxy flushes what it wrote only when it is
// not, so that tokens that arrived together leave in one write, as with
// net/http's chunked reader, whose Read takes every chunk already buffered.
func (b *Body) Ready() bool {
	if b.err != nil || b.c == nil {
		return false
	}
	rest := b.c.buffered()[b.out:]
	if len(rest) == 0 {
		return false
	}
	switch b.kind {
	case bodyLength:
		return b.left > int64(b.out)
	case bodyUntilEOF:
		return true
	case bodyChunked:
		if b.dec.st == stTrailer {
			return false
		}
		// A dry run on a copy of the decoder (its own trailers: the dry
		// run must not add to the real ones).
		d := b.dec
		d.trailer = nil
		d.take(b.out)
		_, n, err := d.frame(rest)
		return err == nil && n > 0
	}
	return false
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
		c := b.c
		buf := c.buffered()
		switch b.kind {
		case bodyNone:
			b.finish()
			continue
		case bodyLength:
			if len(buf) > 0 {
				return buf[:min(int64(len(buf)), b.left)], nil
			}
		case bodyUntilEOF:
			if len(buf) > 0 {
				return buf, nil
			}
		case bodyChunked:
			skip, n, err := b.dec.frame(buf)
			c.consume(skip)
			if err != nil {
				b.fail(err)
				continue
			}
			if n > 0 {
				return c.buffered()[:n], nil
			}
			if b.dec.done() {
				b.finish()
				continue
			}
		}
		if err := c.readMore(); err != nil {
			if err == io.EOF && b.kind == bodyUntilEOF {
				b.finish()
				continue
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			b.fail(err)
		}
	}
}

// take hands on n bytes peek returned.
func (b *Body) take(n int) {
	b.c.consume(n)
	switch b.kind {
	case bodyLength:
		b.left -= int64(n)
		if b.left == 0 {
			b.finish()
		}
	case bodyChunked:
		b.dec.take(n)
	}
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
