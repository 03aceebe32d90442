package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"time"
)

// oneShot is the probes' RoundTripper when the gateway owns its transport:
// every request on a new connection (a probe proves that the backend still
// accepts connections), written and its answer read on the caller's
// goroutine with the standard library's own request writer and response
// parser (Request.Write, http.ReadResponse), and the connection closed with
// the body. An http.Transport with keep-alives off does the same with a read
// and a write goroutine and two buffers per connection, and probes were a
// sixth of an idle gateway's CPU (BENCHMARKS.md, "Idle cost").
//
// The request's context bounds the whole exchange: its deadline is the
// connection's, and its end (the gateway closing) closes the connection.
type oneShot struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

var _ http.RoundTripper = (*oneShot)(nil)

// RoundTrip implements http.RoundTripper for plain-HTTP GETs without a
// body, which is what probes send.
func (o *oneShot) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	conn, err := o.dial(ctx, "tcp", req.URL.Host)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		_ = conn.Close()
		return nil, ctxErr(ctx, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return fail(err)
		}
	}
	out := *req // the caller's request is not modified (RoundTripper's contract)
	out.Close = true
	if err := out.Write(conn); err != nil {
		return fail(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, transportBufferSize), req)
	if err != nil {
		return fail(err)
	}
	resp.Body = &connBody{ReadCloser: resp.Body, conn: conn, stop: stop}
	return resp, nil
}

// ctxErr returns the context's error if it ended (the connection's
// deadline is the context's, and may pass a hair before the context's own
// timer fires), as a Transport answers a request whose context ended; else
// err.
func ctxErr(ctx context.Context, err error) error {
	if e := ctx.Err(); e != nil {
		return e
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return err
}

// connBody closes the connection with the body: first the connection, so
// that the body's Close, which reads a body not read to its end to the end,
// does not read on (a probe reads 64 KiB at most, and the probe path may
// stream forever).
type connBody struct {
	io.ReadCloser
	conn net.Conn
	stop func() bool
}

func (b *connBody) Close() error {
	b.stop()
	err := b.conn.Close()
	_ = b.ReadCloser.Close() // fails at once on the closed connection if the body was not read to its end
	return err
}
