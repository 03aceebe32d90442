// Package h1 is a minimal HTTP/1.1 client for a reverse proxy's backend
// connections. net/http's Transport runs two goroutines per connection (a
// read loop and a write loop) and keeps a read and a write buffer per
// connection for its whole life; for a proxy of long token streams, where
// every open stream holds a backend connection for minutes, those are most
// of the proxy's memory per stream (BENCHMARKS.md, "Long streams"). This
// client runs no goroutine of its own per connection: the request is
// written with one write from the goroutine of the caller, which also
// reads the response, and a connection holds a read buffer only while it
// has bytes not yet handed on: between tokens it holds none (it waits for
// the socket to become readable through syscall.RawConn, the runtime's
// poller, without a buffer).
//
// What it does not do, by design (the gateway needs none of it): HTTP/2,
// TLS, proxies, compression, 100-continue, request trailers, request bodies
// that are not in memory (ContentLength and the bytes must be known), and
// reading a response while the request is still being written (a backend
// that answers early and stops reading a large body blocks the write until
// the request's context ends). Response trailers are read and set in
// Response.Trailer at the end of the body, as net/http does.
package h1

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Client sends requests over keep-alive connections, pooled per address
// (the request URL's host:port, plain HTTP only). It implements
// http.RoundTripper for requests whose body is in memory. Its zero value is
// not usable; use New.
type Client struct {
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	headerTimeout time.Duration
	idleTimeout   time.Duration
	maxIdle       int
	passHeads     bool

	mu     sync.Mutex
	idle   map[poolKey]*[]*conn // LIFO per address and serve loop (a pointer: one lookup per get or put)
	sweep  *time.Timer          // closes connections idle too long; nil when none idle
	closed bool
}

// Options configures a Client.
type Options struct {
	// Dial connects to a backend (a net.Dialer's DialContext).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ResponseHeaderTimeout bounds the wait for the response headers after
	// the request is written; 0 means none.
	ResponseHeaderTimeout time.Duration
	// IdleTimeout closes a pooled connection idle this long; 0 means 90 s.
	IdleTimeout time.Duration
	// MaxIdlePerHost bounds the pooled connections per address; 0 means 256.
	MaxIdlePerHost int
	// PassHeads keeps an answer's header fields as they came (Fields,
	// PassedFields) instead of in Response.Header, which is then nil: for
	// a proxy that passes them on (PassFields).
	PassHeads bool
}

// New returns a Client.
func New(o Options) *Client {
	c := &Client{dial: o.Dial, headerTimeout: o.ResponseHeaderTimeout, idleTimeout: o.IdleTimeout, maxIdle: o.MaxIdlePerHost, passHeads: o.PassHeads, idle: map[poolKey]*[]*conn{}}
	if c.dial == nil {
		c.dial = (&net.Dialer{Timeout: 30 * time.Second}).DialContext
	}
	if c.idleTimeout <= 0 {
		c.idleTimeout = 90 * time.Second
	}
	if c.maxIdle <= 0 {
		c.maxIdle = 256
	}
	return c
}

// checkAlive: a pooled connection idle at least this long is checked for
// a close by the backend (one non-blocking peek) before it is used; a
// fresher one is used as it is, and a stale one found only by the request
// failing on it is retried once on a new connection.
const checkAlive = time.Second

var errHeaderTimeout = errors.New("h1: timeout awaiting response headers")

var wbufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// RoundTrip sends req and returns the response, whose Body reads from the
// connection in the caller's goroutine (see Body). req.Body, if any, must
// yield exactly req.ContentLength bytes. The request's context ending
// closes the connection, which ends a wait for headers or a body read.
func (cl *Client) RoundTrip(req *http.Request) (*http.Response, error) {
	return cl.RoundTripOutbound(req.Context(), req, nil)
}

// Outbound shapes the header a proxy sends on, without a header map of
// its own: the request's Header but the fields SkipField names, then
// ExtraFields (valid and canonical, as a Fields' are).
type Outbound interface {
	SkipField(name string) bool
	ExtraFields() Fields
}

// RoundTripOutbound is RoundTrip under ctx (the request's own context is
// not read) with the header shaped by o (nil: as it is). Nothing of the
// request is read after it returns: a caller may reuse it for its next
// attempt.
func (cl *Client) RoundTripOutbound(ctx context.Context, req *http.Request, o Outbound) (*http.Response, error) {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		return nil, fmt.Errorf("h1: want an http:// URL with a host, got %v", req.URL)
	}
	wb := wbufPool.Get().(*bytes.Buffer)
	wb.Reset()
	defer func() {
		if wb.Cap() <= 64<<10 {
			wbufPool.Put(wb)
		}
	}()
	if err := writeRequest(wb, req, o); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		c, reused, err := cl.get(ctx, req.URL.Host)
		if err != nil {
			return nil, err
		}
		resp, err := cl.exchange(ctx, c, req, wb.Bytes())
		if err == nil {
			return resp, nil
		}
		stale := reused && c.got == 0 && isStale(err)
		c.close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if stale && attempt == 0 {
			continue // the backend had closed the idle connection: once more, on a new one
		}
		return nil, err
	}
}

// exchange writes the request on c and reads the response headers.
func (cl *Client) exchange(ctx context.Context, c *conn, req *http.Request, wire []byte) (*http.Response, error) {
	c.got = 0
	if !c.watch(ctx) {
		return nil, ctx.Err()
	}
	// The header timeout counts from the end of the request (it starts
	// again if the request is not written at once: writeThenRead).
	if cl.headerTimeout > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(cl.headerTimeout))
	}
	// The first bytes of the answer are waited for without a buffer
	// (the time to first token of a queued request can be long).
	if err := c.writeThenRead(wire, cl.headerTimeout); err != nil {
		return nil, cl.headerErr(err) // a failed write's error passes as it is
	}
	var hold *respHold
	for {
		var err error
		hold, err = readResponseHead(c, req, cl.passHeads)
		if err != nil {
			return nil, cl.headerErr(err)
		}
		if code := hold.resp.StatusCode; code >= 200 || code == http.StatusSwitchingProtocols {
			break
		}
		// 1xx informational answers precede the real one.
	}
	resp := &hold.resp
	if cl.headerTimeout > 0 {
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	b := &hold.body
	*b = Body{c: c, cl: cl, resp: resp, fields: hold.fields}
	b.reuse = !resp.Close && !req.Close
	switch {
	case req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusNotModified:
		b.kind = bodyNone
	case resp.StatusCode == http.StatusSwitchingProtocols:
		b.kind, b.reuse = bodyUntilEOF, false
	case len(resp.TransferEncoding) > 0:
		if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
			return nil, fmt.Errorf("h1: unsupported transfer encoding %q", resp.TransferEncoding)
		}
		b.kind = bodyChunked
	case resp.ContentLength >= 0:
		b.kind, b.left = bodyLength, resp.ContentLength
	default:
		b.kind, b.reuse = bodyUntilEOF, false
	}
	resp.Body = b
	if b.kind == bodyNone || (b.kind == bodyLength && b.left == 0) {
		b.finish()
	}
	return resp, nil
}

func (cl *Client) headerErr(err error) error {
	if errors.Is(err, errDeadline) {
		return errHeaderTimeout
	}
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// get returns a pooled connection to addr, or a new one.
func (cl *Client) get(ctx context.Context, addr string) (*conn, bool, error) {
	co := coroOf(ctx)
	loop := co.loopIndex()
	for {
		cl.mu.Lock()
		p := cl.idle[poolKey{addr, loop}]
		if p == nil || len(*p) == 0 {
			cl.mu.Unlock()
			break
		}
		stack := *p
		c := stack[len(stack)-1]
		stack[len(stack)-1] = nil
		*p = stack[:len(stack)-1]
		cl.mu.Unlock()
		idle := time.Since(c.idleSince)
		if idle < cl.idleTimeout && (idle < checkAlive || c.alive()) {
			co.bind(c)
			return c, true, nil
		}
		c.close()
	}
	nc, err := cl.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	c := newConn(nc, addr)
	co.bind(c)
	return c, false, nil
}

// poolKey names an idle list: the connections to an address, for requests
// served on one serve loop (loop; -1: on goroutines), whose sockets wait
// on it.
type poolKey struct {
	addr string
	loop int
}

// hasRoom reports whether put would pool a connection to addr now.
func (cl *Client) hasRoom(c *conn) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return !cl.closed && idleLen(cl.idle[poolKey{c.addr, c.loop}]) < cl.maxIdle
}

// put pools c for the next request to its address.
func (cl *Client) put(c *conn) {
	if c.co != nil {
		c.co.unbind(c)
	}
	c.idleSince = time.Now()
	cl.mu.Lock()
	key := poolKey{c.addr, c.loop}
	p := cl.idle[key]
	if cl.closed || idleLen(p) >= cl.maxIdle {
		cl.mu.Unlock()
		c.close()
		return
	}
	if p == nil {
		p = new([]*conn)
		cl.idle[key] = p
	}
	*p = append(*p, c)
	if cl.sweep == nil {
		cl.sweep = time.AfterFunc(cl.idleTimeout/2, cl.sweepIdle)
	}
	cl.mu.Unlock()
}

// sweepIdle closes the connections idle longer than the idle timeout, so
// that those to a backend no longer used do not stay open.
func (cl *Client) sweepIdle() {
	now := time.Now()
	var old []*conn
	cl.mu.Lock()
	for addr, p := range cl.idle {
		stack := *p
		i := 0
		for i < len(stack) && now.Sub(stack[i].idleSince) >= cl.idleTimeout {
			i++
		}
		if i > 0 {
			old = append(old, stack[:i]...)
			stack = append(stack[:0], stack[i:]...)
		}
		if len(stack) == 0 {
			delete(cl.idle, addr)
		} else {
			*p = stack
		}
	}
	if len(cl.idle) > 0 && !cl.closed {
		cl.sweep.Reset(cl.idleTimeout / 2)
	} else {
		cl.sweep = nil
	}
	cl.mu.Unlock()
	for _, c := range old {
		c.close()
	}
}

// CloseIdleConnections closes the pooled connections.
func (cl *Client) CloseIdleConnections() {
	cl.mu.Lock()
	var all []*conn
	for _, p := range cl.idle {
		all = append(all, *p...)
	}
	clear(cl.idle)
	cl.mu.Unlock()
	for _, c := range all {
		c.close()
	}
}

// Close closes the pooled connections; connections in use are closed when
// their response ends instead of being pooled.
func (cl *Client) Close() {
	cl.mu.Lock()
	cl.closed = true
	if cl.sweep != nil {
		cl.sweep.Stop()
		cl.sweep = nil
	}
	cl.mu.Unlock()
	cl.CloseIdleConnections()
}

// Idle returns the number of pooled connections (for tests and metrics).
func (cl *Client) Idle() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	n := 0
	for _, p := range cl.idle {
		n += len(*p)
	}
	return n
}

// idleLen is the length of an idle stack (nil: none).
func idleLen(p *[]*conn) int {
	if p == nil {
		return 0
	}
	return len(*p)
}

// writeRequest appends the request's wire form to wb: request line, Host,
// the headers (a User-Agent of "" is left out, as net/http does),
// Content-Length, and the body.
func writeRequest(wb *bytes.Buffer, req *http.Request, o Outbound) error {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	uri := req.URL.RequestURI()
	if !validLine(req.Method) || !validLine(uri) || !validLine(host) {
		return errors.New("h1: request line or Host contains a control character")
	}
	wb.WriteString(req.Method)
	wb.WriteByte(' ')
	wb.WriteString(uri)
	wb.WriteString(" HTTP/1.1\r\nHost: ")
	wb.WriteString(host)
	wb.WriteString("\r\n")
	if ua := req.Header["User-Agent"]; len(ua) > 0 && ua[0] != "" {
		wb.WriteString("User-Agent: ")
		wb.WriteString(ua[0])
		wb.WriteString("\r\n")
	}
	// In the map's order, not sorted as http.Header.WriteSubset writes
	// them: a proxy need not, and the sort was a tenth of this function.
	for k, vv := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer", "Connection":
			continue
		}
		if o != nil && o.SkipField(k) {
			continue
		}
		for _, v := range vv {
			wb.WriteString(k)
			wb.WriteString(": ")
			appendFieldValue(wb, v)
			wb.WriteString("\r\n")
		}
	}
	if o != nil {
		for _, f := range o.ExtraFields() {
			wb.WriteString(f.Name)
			wb.WriteString(": ")
			appendFieldValue(wb, f.Value)
			wb.WriteString("\r\n")
		}
	}
	n := req.ContentLength
	if n > 0 || (n == 0 && needsLength(req.Method)) {
		wb.WriteString("Content-Length: ")
		wb.WriteString(strconv.FormatInt(n, 10))
		wb.WriteString("\r\n")
	}
	if req.Close {
		wb.WriteString("Connection: close\r\n")
	}
	wb.WriteString("\r\n")
	if n > 0 {
		if req.Body == nil {
			return errors.New("h1: ContentLength > 0 without a Body")
		}
		// Read straight into the buffer's free room (io.CopyN would allocate
		// a LimitReader per request).
		wb.Grow(int(n))
		room := wb.AvailableBuffer()[:n]
		m, err := io.ReadFull(req.Body, room)
		if err != nil {
			if err == io.ErrUnexpectedEOF {
				err = io.EOF
			}
			return fmt.Errorf("h1: reading the request body (%d of %d bytes): %w", m, n, err)
		}
		wb.Write(room)
	}
	return nil
}

// appendFieldValue writes a header value as http.Header.Write does: a CR
// or LF in it becomes a space (the value cannot end the line or start a
// header of its own), and the spaces and tabs around it are dropped.
func appendFieldValue(wb *bytes.Buffer, v string) {
	v = trimFunc(v, isSpaceOrLineEnd)
	start := 0
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' {
			wb.WriteString(v[start:i])
			wb.WriteByte(' ')
			start = i + 1
		}
	}
	wb.WriteString(v[start:])
}

func needsLength(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

func validLine(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			return false
		}
	}
	return s != ""
}
