package h1

// Sockets the scheduler hears nothing of, from accept to close.
//
// Package net tells the scheduler of every system call it makes for a
// connection: accept4(2), getsockname(2), TCP_NODELAY and four keep-alive
// options on every accepted socket, and, when an event loop gives a
// stream's sockets back (net.FileConn), a dup, a getsockopt, two address
// lookups and the same five options again. Each told call can wake sysmon,
// asleep because every P was idle, which then runs every 20 µs for a
// millisecond: at 3,000 stream starts accept4 alone did that 883 times
// (BENCHMARKS.md, issue 19, session 27). nginx makes one accept4 and one
// setsockopt per connection.
//
// Listen's listener accepts with a raw accept4(2) inside its socket's
// RawConn.Read, so that the runtime's poller still does the waiting; the
// accepted socket inherits TCP_NODELAY and the keep-alive options from the
// listening socket (Linux copies them at accept), so nothing is set per
// connection. Its connections (fdConn) hold their socket in an *os.File,
// whose making registers it with the runtime's poller without a told
// system call, and which carries deadlines, RawConn and Close as a
// net.Conn does; their errors are package net's (*net.OpError,
// net.ErrClosed). The event loops give sockets back the same way.
//
// Written here rather than taken from a library: the event-loop packages
// for Go (gnet, evio, nbio) own the connection from accept to close and do
// their own waiting, where this keeps the runtime's poller, goroutines and
// deadlines.

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The keep-alive that package net sets on every accepted connection by
// default (its defaultTCPKeepAliveIdle, Interval and Count), set here once
// on the listening socket.
const (
	keepAliveIdle     = 15 * time.Second
	keepAliveInterval = 15 * time.Second
	keepAliveCount    = 9
)

// Listen listens on a TCP address as net.Listen does ("tcp", "tcp4" or
// "tcp6"), for an h1 Server: its connections are made without system
// calls the scheduler is told of (see above). Other networks are
// net.Listen's.
func Listen(network, address string) (net.Listener, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return net.Listen(network, address)
	}
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	defer ln.Close() // the socket stays open on f, its duplicate
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return nil, err
	}
	l := &Listener{f: f, addr: ln.Addr()}
	if l.rc, err = f.SyscallConn(); err == nil {
		// Package net's default keep-alive for accepted connections.
		var e syscall.Errno
		err = l.rc.Control(func(fd uintptr) { e = setTCPOptions(int(fd), net.KeepAliveConfig{Enable: true}) })
		if err == nil && e != 0 {
			err = os.NewSyscallError("setsockopt", e)
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, &net.OpError{Op: "listen", Net: network, Addr: ln.Addr(), Err: err}
	}
	l.afn = l.accept4
	return l, nil
}

// Listener is Listen's listener.
type Listener struct {
	f      *os.File
	rc     syscall.RawConn
	addr   net.Addr
	closed atomic.Bool
	loose  atomic.Bool // accepted sockets are loose (a Server with serve loops)

	mu   sync.Mutex // one Accept at a time: the fields below are its
	afn  func(uintptr) bool
	nfd  int
	rsa  unix.RawSockaddrAny
	aerr error
}

// accept4 is the function Accept gives the RawConn: false (wait) when no
// connection is queued.
func (l *Listener) accept4(fd uintptr) bool {
	for {
		n := uint32(unsafe.Sizeof(l.rsa))
		nfd, _, e := syscall.RawSyscall6(unix.SYS_ACCEPT4, fd, uintptr(unsafe.Pointer(&l.rsa)), uintptr(unsafe.Pointer(&n)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		switch e {
		case 0:
			l.nfd, l.aerr = int(nfd), nil
			return true
		case unix.EINTR, unix.ECONNABORTED:
			continue // package net retries a connection reset while queued, too
		case unix.EAGAIN:
			return false
		}
		l.nfd, l.aerr = -1, e
		return true
	}
}

// Accept waits for and returns the next connection. Its errors are package
// net's: net.ErrClosed once closed, an *os.SyscallError of accept4 (as
// EMFILE) otherwise.
func (l *Listener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.rc.Read(l.afn); err != nil {
		return nil, l.opError(err)
	}
	if l.aerr != nil {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.addr, Err: os.NewSyscallError("accept4", l.aerr)}
	}
	if l.loose.Load() {
		return newLooseFdConn(l.nfd, nil, sockaddrAddr(&l.rsa))
	}
	return newFdConn(l.nfd, nil, sockaddrAddr(&l.rsa))
}

func (l *Listener) opError(err error) error {
	if l.closed.Load() {
		err = net.ErrClosed
	}
	return &net.OpError{Op: "accept", Net: "tcp", Addr: l.addr, Err: err}
}

// Close closes the listening socket; a waiting Accept returns
// net.ErrClosed.
func (l *Listener) Close() error {
	if l.closed.Swap(true) {
		return &net.OpError{Op: "close", Net: "tcp", Addr: l.addr, Err: net.ErrClosed}
	}
	return l.f.Close()
}

// Addr is the listening address.
func (l *Listener) Addr() net.Addr { return l.addr }

// sockaddrAddr is the *net.TCPAddr of a socket address from the kernel
// (nil for a family other than IPv4 and IPv6).
func sockaddrAddr(rsa *unix.RawSockaddrAny) net.Addr {
	b := (*[unix.SizeofSockaddrAny]byte)(unsafe.Pointer(rsa))
	port := int(binary.BigEndian.Uint16(b[2:4]))
	switch rsa.Addr.Family {
	case unix.AF_INET:
		return &net.TCPAddr{IP: net.IP(append([]byte(nil), b[4:8]...)), Port: port}
	case unix.AF_INET6:
		a := &net.TCPAddr{IP: net.IP(append([]byte(nil), b[8:24]...)), Port: port}
		if id := binary.NativeEndian.Uint32(b[24:28]); id != 0 {
			if ifi, err := net.InterfaceByIndex(int(id)); err == nil {
				a.Zone = ifi.Name
			} else {
				a.Zone = strconv.FormatUint(uint64(id), 10) // as package net names an interface it cannot find
			}
		}
		return a
	}
	return nil
}

// fdConn is a TCP connection over a socket descriptor of its own, held by
// an *os.File (see above).
type fdConn struct {
	f      *os.File
	rc     syscall.RawConn
	raddr  net.Addr
	closed atomic.Bool

	lmu   sync.Mutex
	laddr net.Addr // nil until asked (LocalAddr)

	// A loose socket (newLooseFdConn) is not in the runtime's poller: it
	// waits on a serve loop (serveloop_linux.go), for co, the coroutine
	// that uses it, registered as reg once it first waits. Its deadlines
	// (mono; 0: none) are the loop's.
	loose  bool
	co     *coro
	reg    atomic.Pointer[loopReg]
	rdl    atomic.Int64
	wdl    atomic.Int64
	cf     func(uintptr) bool
	cdone  bool
	ctrlFn func(uintptr)
}

// newFdConn makes a connection of the non-blocking socket fd, with its
// addresses if known (a nil laddr is looked up when asked).
func newFdConn(fd int, laddr, raddr net.Addr) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "tcp")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &fdConn{f: f, rc: rc, laddr: laddr, raddr: raddr}, nil
}

// newLooseFdConn makes a loose connection of the non-blocking socket fd
// (see fdConn): os.NewFile registers with the runtime's poller only a
// descriptor that is non-blocking, so fd is made blocking for the call and
// non-blocking again after it.
func newLooseFdConn(fd int, laddr, raddr net.Addr) (net.Conn, error) {
	if err := setBlocking(fd, true); err != nil {
		rawClose(fd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(fd), "tcp")
	if err := setBlocking(fd, false); err != nil {
		_ = f.Close()
		return nil, os.NewSyscallError("fcntl", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	c := &fdConn{f: f, rc: rc, laddr: laddr, raddr: raddr, loose: true}
	c.ctrlFn = c.ctrl
	return c, nil
}

// setBlocking sets or clears the socket's O_NONBLOCK with fcntl(2) calls
// the scheduler is not told of.
func setBlocking(fd int, on bool) error {
	fl, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0)
	if e != 0 {
		return e
	}
	if on {
		fl &^= syscall.O_NONBLOCK
	} else {
		fl |= syscall.O_NONBLOCK
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_SETFL, fl); e != 0 {
		return e
	}
	return nil
}

// connAddrs returns nc's addresses without looking up what it has not.
func connAddrs(nc net.Conn) (laddr, raddr net.Addr) {
	if c, ok := nc.(*fdConn); ok {
		c.lmu.Lock()
		defer c.lmu.Unlock()
		return c.laddr, c.raddr
	}
	return nc.LocalAddr(), nc.RemoteAddr()
}

// opError is err, from the file, as package net's.
func (c *fdConn) opError(op string, err error) error {
	switch {
	case err == nil || err == io.EOF:
		return err
	case c.closed.Load():
		err = net.ErrClosed
	default:
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			err = os.NewSyscallError(op, errno)
		}
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.raddr, Err: err}
}

func (c *fdConn) Read(p []byte) (int, error) {
	if c.co != nil {
		return c.loopRead(p)
	}
	n, err := c.f.Read(p)
	return n, c.opError("read", err)
}

func (c *fdConn) Write(p []byte) (int, error) {
	if c.co != nil {
		return c.loopWrite(p)
	}
	n, err := c.f.Write(p)
	return n, c.opError("write", err)
}

// loopRead is Read of a loose socket, waiting on its serve loop.
func (c *fdConn) loopRead(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var rerr error
	err := (*fdRaw)(c).Read(func(fd uintptr) bool {
		var again bool
		n, again, rerr = recv(int(fd), p)
		return !again
	})
	if err != nil {
		return 0, err
	}
	return n, rerr
}

// loopWrite is Write of a loose socket, waiting on its serve loop.
func (c *fdConn) loopWrite(p []byte) (int, error) {
	sent := 0
	var werr error
	err := (*fdRaw)(c).Write(func(fd uintptr) bool {
		for sent < len(p) {
			n, again, e := send(int(fd), p[sent:])
			sent += n
			if e != nil {
				werr = e
				return true
			}
			if again {
				return false
			}
		}
		return true
	})
	if err != nil {
		return sent, err
	}
	return sent, werr
}

// Close closes the socket.
func (c *fdConn) Close() error {
	if c.closed.Swap(true) {
		return &net.OpError{Op: "close", Net: "tcp", Addr: c.raddr, Err: net.ErrClosed}
	}
	if r := c.reg.Load(); r != nil {
		// Off the loop's epoll instance before the descriptor closes: a
		// duplicate of it (a stream's, tighten's) would keep it there.
		_ = c.rc.Control(func(fd uintptr) { _ = rawEpollCtl(r.lp.ep, unix.EPOLL_CTL_DEL, int(fd), nil) })
		r.lp.post(func() { r.lp.forget(r) })
	}
	return c.f.Close()
}

// CloseWrite shuts down the sending side.
func (c *fdConn) CloseWrite() error {
	var e syscall.Errno
	if err := c.rc.Control(func(fd uintptr) {
		_, _, e = syscall.RawSyscall(syscall.SYS_SHUTDOWN, fd, unix.SHUT_WR, 0)
	}); err != nil {
		return c.opError("close", err)
	}
	if e != 0 {
		return c.opError("close", os.NewSyscallError("shutdown", e))
	}
	return nil
}

func (c *fdConn) LocalAddr() net.Addr {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	if c.laddr == nil {
		var rsa unix.RawSockaddrAny
		n := uint32(unsafe.Sizeof(rsa))
		var e syscall.Errno
		_ = c.rc.Control(func(fd uintptr) {
			_, _, e = syscall.RawSyscall(unix.SYS_GETSOCKNAME, fd, uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n)))
		})
		if e == 0 {
			c.laddr = sockaddrAddr(&rsa)
		}
	}
	return c.laddr
}

func (c *fdConn) RemoteAddr() net.Addr { return c.raddr }

func (c *fdConn) SetDeadline(t time.Time) error {
	if c.loose {
		c.setLooseDeadline(t, &c.rdl, &c.wdl)
		return nil
	}
	return c.opError("set", c.f.SetDeadline(t))
}

func (c *fdConn) SetReadDeadline(t time.Time) error {
	if c.loose {
		c.setLooseDeadline(t, &c.rdl)
		return nil
	}
	return c.opError("set", c.f.SetReadDeadline(t))
}

func (c *fdConn) SetWriteDeadline(t time.Time) error {
	if c.loose {
		c.setLooseDeadline(t, &c.wdl)
		return nil
	}
	return c.opError("set", c.f.SetWriteDeadline(t))
}

// setLooseDeadline sets a loose socket's deadlines to t; one already past
// wakes a wait under way (from any goroutine: through the loop).
func (c *fdConn) setLooseDeadline(t time.Time, dls ...*atomic.Int64) {
	var at int64
	if !t.IsZero() {
		at = max(mono()+int64(time.Until(t)), 1)
	}
	for _, dl := range dls {
		dl.Store(at)
	}
	if r := c.reg.Load(); r != nil && at != 0 && at <= mono() {
		r.lp.post(func() { r.lp.kicked(r) })
	}
}

// SyscallConn is the socket's RawConn, whose errors are package net's.
func (c *fdConn) SyscallConn() (syscall.RawConn, error) { return (*fdRaw)(c), nil }

// fdRaw is an fdConn's RawConn.
type fdRaw fdConn

func (r *fdRaw) Control(f func(uintptr)) error {
	return (*fdConn)(r).opError("raw-control", r.rc.Control(f))
}

func (r *fdRaw) Read(f func(uintptr) bool) error {
	if co := r.co; co != nil {
		return (*fdConn)(r).opError("raw-read", co.wait((*fdConn)(r), f, &r.rdl))
	}
	return (*fdConn)(r).opError("raw-read", r.rc.Read(f))
}

func (r *fdRaw) Write(f func(uintptr) bool) error {
	if co := r.co; co != nil {
		return (*fdConn)(r).opError("raw-write", co.wait((*fdConn)(r), f, &r.wdl))
	}
	return (*fdConn)(r).opError("raw-write", r.rc.Write(f))
}
