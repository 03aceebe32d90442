package h1

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// rawSize is a connection's read buffer. A connection holds one only while
// it has bytes not yet handed on: between reads it holds none.
const rawSize = 4 << 10

var rawPool = sync.Pool{New: func() any { b := make([]byte, rawSize); return &b }}

// conn is one backend connection. Its reads happen in the goroutine of the
// request that holds it; cancel closes it from any goroutine.
type conn struct {
	nc   net.Conn
	sk   *sock // its writes, and its RawConn (sk.rc; nil: not a socket, reads go through nc)
	addr string
	// loop is the serve loop whose requests it serves and whose pool it
	// goes back to (-1: none); co the coroutine whose request holds it.
	loop int
	co   *coro

	// raw[r:w] are the bytes read and not yet handed on; raw is nil when
	// there are none (and the buffer is back in rawPool).
	raw  *[]byte
	r, w int
	// got counts the bytes read on this connection for the current request
	// (0: the request may be retried on a fresh connection if this one was
	// a stale keep-alive connection).
	got int

	// State of one read through rc (see readMore), kept here so that the
	// function passed to RawConn.Read is made once per connection.
	readFn  func(fd uintptr) bool
	readN   int
	readErr error
	// The request writeThenRead has not yet sent, and its function.
	pend       []byte
	sendReadFn func(fd uintptr) bool

	idleSince time.Time
	stop      func() bool // stops the cancellation of the current request
	ab        Abortable   // or the request's context that watches nc
	closeFn   func()      // nc.Close, made once
}

// Abortable is a request context that closes the request's connection
// itself when it ends, instead of the client starting a context.AfterFunc
// on it (five allocations per request). A proxy's attempt implements it.
type Abortable interface {
	context.Context
	// Watch hands over the connection to close when the context ends, until
	// Unwatch; false, without keeping c, if it has ended already.
	Watch(c io.Closer) bool
	// Unwatch takes c back: false if the context ended while it watched c
	// (c is closed or being closed).
	Unwatch(c io.Closer) bool
}

func newConn(nc net.Conn, addr string) *conn {
	c := &conn{addr: addr, loop: -1}
	c.setConn(nc)
	c.closeFn = func() { _ = c.nc.Close() }
	return c
}

// setConn makes nc the connection's socket (at its start, and when an
// event loop gives it back).
func (c *conn) setConn(nc net.Conn) {
	c.nc = nc
	if c.sk == nil {
		c.sk = newSock(nc)
		c.readFn, c.sendReadFn = c.read, c.sendRead
	} else {
		c.sk.reset(nc)
	}
}

// watch closes the connection when ctx is done, until stopped; false if
// ctx has ended already (the connection is then not watched).
func (c *conn) watch(ctx context.Context) bool {
	if a, ok := ctx.(Abortable); ok {
		if !a.Watch(c.nc) {
			return false
		}
		c.ab = a
		return true
	}
	c.stop = context.AfterFunc(ctx, c.closeFn)
	return true
}

// unwatch stops the watch; false if it fired (the connection is closed or
// closing).
func (c *conn) unwatch() bool {
	if c.ab != nil {
		ok := c.ab.Unwatch(c.nc)
		c.ab = nil
		return ok
	}
	if c.stop == nil {
		return true
	}
	ok := c.stop()
	c.stop = nil
	return ok
}

func (c *conn) close() {
	if c.co != nil {
		c.co.unbind(c)
	}
	c.unwatch()
	_ = c.nc.Close()
	c.release()
}

// buffered returns the bytes read and not yet handed on.
func (c *conn) buffered() []byte {
	if c.raw == nil {
		return nil
	}
	return (*c.raw)[c.r:c.w]
}

// consume hands on n buffered bytes; the buffer goes back to the pool once
// it is empty.
func (c *conn) consume(n int) {
	c.r += n
	if c.r == c.w {
		c.release()
	}
}

func (c *conn) release() {
	if c.raw != nil {
		if cap(*c.raw) == rawSize {
			rawPool.Put(c.raw)
		}
		c.raw, c.r, c.w = nil, 0, 0
	}
}

// readMore reads at least one more byte after the buffered ones, waiting
// for them. While nothing is buffered it waits without a buffer: one is
// taken from the pool only when bytes have arrived. It fails when the
// buffer is full (a line longer than it) and at the end of the stream
// (io.EOF).
func (c *conn) readMore() error {
	if c.raw != nil && c.r > 0 {
		// Move what is left to the front.
		n := copy(*c.raw, (*c.raw)[c.r:c.w])
		c.r, c.w = 0, n
	}
	if c.raw != nil && c.w == len(*c.raw) {
		return errLineTooLong
	}
	var n int
	var err error
	if c.sk.rc != nil {
		c.readN, c.readErr = 0, nil
		if err = c.sk.rc.Read(c.readFn); err == nil {
			n, err = c.readN, c.readErr
		}
	} else {
		if c.raw == nil {
			c.raw = rawPool.Get().(*[]byte)
		}
		n, err = c.nc.Read((*c.raw)[c.w:])
	}
	return c.took(n, err)
}

// took books a read of n bytes that ended with err, for readMore.
func (c *conn) took(n int, err error) error {
	if n > 0 {
		c.w += n
		c.got += n
		return nil
	}
	if c.r == c.w {
		c.release()
	}
	if err == nil {
		err = io.EOF
	}
	return err
}

// writeThenRead writes the request wire and then reads the first bytes of
// the answer, as sk.Write and readMore one after the other do, but with
// one system call fewer: the write happens in the first turn of the
// function given to RawConn.Read, after the poller's readiness of the
// socket was reset, so the wait for the answer can start without a
// receive that finds nothing (EAGAIN) — the answer to a request cannot
// come before the request, so the readiness its bytes bring is never lost.
// A backend answers later than the write returns (it runs after it), so
// that receive was one of the few system calls every request made
// (BENCHMARKS.md, issue 19, thirteenth increment). What of the request
// the socket does not take at once is written by sk.Write before the
// usual readMore, and the read deadline is then set again to timeout from
// then (if not 0: the header timeout, which counts from the end of the
// request).
func (c *conn) writeThenRead(wire []byte, timeout time.Duration) error {
	if c.sk.raw {
		c.pend, c.readN, c.readErr = wire, 0, nil
		err := c.sk.rc.Read(c.sendReadFn)
		wire, c.pend = c.pend, nil // what is left to write
		switch {
		case err != nil:
			return err
		case wire == nil: // written, and the answer's first read done
			return c.took(c.readN, c.readErr)
		case c.readErr != nil: // the write failed
			return c.readErr
		}
	}
	if _, err := c.sk.Write(wire); err != nil {
		return err
	}
	c.restartDeadline(timeout)
	return c.readMore()
}

func (c *conn) restartDeadline(timeout time.Duration) {
	if timeout > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	}
}

// sendRead is the function writeThenRead gives to RawConn.Read: its first
// turn writes c.pend (non-blocking; a rest the socket did not take stays
// in c.pend, and the turn ends the call), the next ones are read's.
func (c *conn) sendRead(fd uintptr) bool {
	if c.pend == nil {
		return c.read(fd)
	}
	stop, err := sendTurn(fd, &c.pend)
	if err != nil {
		c.readErr = err
	}
	return stop // else wait for the answer
}

// room makes room to read into: a buffer from the pool if the connection
// holds none, the unread bytes moved to its front. It returns how many
// bytes fit, or errLineTooLong when the buffer is full.
func (c *conn) room() (int, error) {
	if c.raw == nil {
		c.raw = rawPool.Get().(*[]byte)
	} else if c.r > 0 {
		n := copy(*c.raw, (*c.raw)[c.r:c.w])
		c.r, c.w = 0, n
	}
	if c.w == len(*c.raw) {
		return 0, errLineTooLong
	}
	return len(*c.raw) - c.w, nil
}

// wait ends a turn of a function given to RawConn.Read that waits for the
// socket to become readable: the buffer goes back to the pool if it holds
// nothing, and s is told.
func (c *conn) wait(s Sink) bool {
	if c.r == c.w {
		c.release()
	}
	s.Waiting(true)
	return false
}

// read is the function given to RawConn.Read: one receive (rawRead), with
// a buffer taken from the pool for it, given back if nothing came.
func (c *conn) read(fd uintptr) bool {
	if c.raw == nil {
		c.raw = rawPool.Get().(*[]byte)
	}
	n, again, err := recv(int(fd), (*c.raw)[c.w:])
	if again {
		if c.r == c.w {
			c.release()
		}
		return false // wait until readable, then again
	}
	c.readN, c.readErr = n, err
	return true
}

// alive reports, without blocking, whether an idle connection is still
// open and has nothing unexpected to read.
func (c *conn) alive() bool {
	if c.sk.rc == nil {
		return true
	}
	ok := false
	err := c.sk.rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = n < 0 || (n == 0 && err == syscall.EAGAIN) || err == syscall.EAGAIN
		return true
	})
	return err == nil && ok
}

// wrapSyscall names the failed call as net does.
func wrapSyscall(op string, err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return &net.OpError{Op: op, Net: "tcp", Err: &osSyscallError{op, errno}}
	}
	return err
}

type osSyscallError struct {
	call string
	err  syscall.Errno
}

func (e *osSyscallError) Error() string { return e.call + ": " + e.err.Error() }
func (e *osSyscallError) Unwrap() error { return e.err }
