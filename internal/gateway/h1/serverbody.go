package h1

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
)

// body is a request body the server reads for the handler: Content-Length
// bytes, or chunked. Read asks for the body with 100 Continue first when
// the client expects it.
type body struct {
	c         *sconn
	w         *response
	remain    int64     // bytes left (Content-Length)
	chunked   io.Reader // the chunked decoder, if chunked
	expect    bool      // the client waits for 100 Continue
	continued bool      // 100 Continue was sent
	done      atomic.Bool
	closed    bool // by the handler
	answered  bool // the answer's head went out: no more reads
	err       error
}

// reset makes b the body of the connection's next request, req.
func (b *body) reset(c *sconn, w *response, req *http.Request) {
	*b = body{c: c, w: w, remain: req.ContentLength,
		expect: req.Header["Expect"] != nil && req.ProtoMinor == 1}
	if req.ContentLength < 0 {
		b.chunked = newChunkedReader(c.br)
	}
}

func newChunkedReader(br *bufio.Reader) io.Reader { return httputil.NewChunkedReader(br) }

// Read implements io.Reader.
func (b *body) Read(p []byte) (int, error) {
	switch {
	case b.done.Load():
		return 0, io.EOF
	case b.closed || b.answered:
		return 0, http.ErrBodyReadAfterClose
	}
	return b.read(p)
}

// rawBody reads a body whatever the handler did with it (the server
// drains it).
type rawBody struct{ b *body }

func (r rawBody) Read(p []byte) (int, error) {
	if r.b.done.Load() {
		return 0, io.EOF
	}
	return r.b.read(p)
}

func (b *body) read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	b.sendContinue()
	br := b.c.br
	if b.chunked != nil {
		n, err := b.chunked.Read(p)
		if errors.Is(err, io.EOF) {
			if err = skipTrailer(br); err == nil {
				b.done.Store(true)
				return n, io.EOF
			}
		}
		return n, b.fail(err)
	}
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := br.Read(p)
	b.remain -= int64(n)
	if b.remain == 0 {
		b.done.Store(true)
		return n, io.EOF
	}
	return n, b.fail(err)
}

// fail keeps a read error for the reads after: the connection ending
// before the body did is io.ErrUnexpectedEOF.
func (b *body) fail(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	b.err = err
	return err
}

// sendContinue sends 100 Continue before the first read of a body whose
// client waits for it, unless the answer has begun.
func (b *body) sendContinue() {
	if !b.expect || b.continued {
		return
	}
	b.continued = true
	if b.w.wroteHeader {
		return
	}
	if _, err := b.c.nc.Write(continueLine); err != nil {
		b.err = err
	}
}

var continueLine = []byte("HTTP/1.1 100 Continue\r\n\r\n")

// maxTrailer bounds the trailer of a chunked request body.
const maxTrailer = 64 << 10

// skipTrailer reads the trailer lines after the last chunk, up to the
// empty line that ends the body; they are dropped.
func skipTrailer(br *bufio.Reader) error {
	n := 0
	cont := false // the line goes on from the last fragment
	for {
		line, err := br.ReadSlice('\n')
		n += len(line)
		if n > maxTrailer {
			return errors.New("h1: request trailer too large")
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			cont = true
			continue
		case err != nil:
			return err
		}
		if !cont && (len(line) == 1 || (len(line) == 2 && line[0] == '\r')) {
			return nil
		}
		cont = false
	}
}

// Close implements io.Closer: the handler reads no more; the server drops
// what is left.
func (b *body) Close() error {
	b.closed = true
	return nil
}
