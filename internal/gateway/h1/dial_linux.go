package h1

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DialContext connects to address, an IP address and port, as
// net.Dialer.DialContext does, without a system call the scheduler is told
// of: the socket, its options, the connect and the check of its result are
// raw system calls, and the connection (fdConn, listen_linux.go) is held
// in an *os.File, so the runtime's poller still waits for a connect under
// way, with the dialer's timeout and the context's deadline and
// cancellation. Package net's dial made a told socket, connect, five
// setsockopt, getsockname and getpeername per backend connection, each of
// which can wake a sleeping sysmon (BENCHMARKS.md, issue 19, session 28).
// A host name, a zone, or a network other than TCP is the net.Dialer's,
// with ConnectEarly.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || ap.Addr().Zone() != "" || !dialable(network, ap.Addr()) {
		return d.fallback().DialContext(ctx, network, address)
	}
	a := ap.Addr().Unmap()
	raddr := net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, ap.Port()))
	fail := func(err error) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Addr: raddr, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}

	var sa [unix.SizeofSockaddrInet6]byte
	n := sockaddrOf(&sa, a, ap.Port())
	family := unix.AF_INET6
	if a.Is4() {
		family = unix.AF_INET
	}
	s, _, e := syscall.RawSyscall(syscall.SYS_SOCKET, uintptr(family), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if e != 0 {
		return fail(os.NewSyscallError("socket", e))
	}
	fd := int(s)
	if e := setTCPOptions(fd, d.KeepAlive); e != 0 {
		rawClose(fd)
		return fail(os.NewSyscallError("setsockopt", e))
	}
	connect := func() syscall.Errno {
		_, _, e := syscall.RawSyscall(syscall.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa[0])), n)
		return e
	}
	pending := false
	for e = connect(); e == syscall.EINTR; e = connect() {
	}
	switch e {
	case 0, syscall.EISCONN:
	case syscall.EINPROGRESS, syscall.EALREADY:
		// On loopback and near peers the handshake is over by the time
		// connect returns: asked again, the socket says so (0 the first
		// time it is asked after the handshake, EISCONN after that).
		switch e = connect(); e {
		case 0, syscall.EISCONN:
		case syscall.EALREADY, syscall.EINPROGRESS, syscall.EINTR:
			pending = true
		default:
			rawClose(fd)
			return fail(os.NewSyscallError("connect", e))
		}
	default:
		rawClose(fd)
		return fail(os.NewSyscallError("connect", e))
	}
	co := coroOf(ctx)
	var nc net.Conn
	if co != nil {
		nc, err = newLooseFdConn(fd, nil, raddr)
		if err == nil {
			nc.(*fdConn).co = co
		}
	} else {
		nc, err = newFdConn(fd, nil, raddr)
	}
	if err != nil {
		return fail(err)
	}
	if pending {
		if err := d.await(ctx, nc.(*fdConn)); err != nil {
			_ = nc.Close()
			return fail(err)
		}
	}
	return nc, nil
}

// dialable reports whether network can reach a, as package net has it.
func dialable(network string, a netip.Addr) bool {
	switch network {
	case "tcp":
		return true
	case "tcp4":
		return a.Unmap().Is4()
	case "tcp6":
		return a.Is6() && !a.Is4In6()
	}
	return false
}

// sockaddrOf fills sa with a's sockaddr_in (a is IPv4) or sockaddr_in6 and
// returns its length.
func sockaddrOf(sa *[unix.SizeofSockaddrInet6]byte, a netip.Addr, port uint16) uintptr {
	if a.Is4() {
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p.Family = unix.AF_INET
		putPort(&p.Port, port)
		p.Addr = a.As4()
		return unix.SizeofSockaddrInet4
	}
	p := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
	p.Family = unix.AF_INET6
	putPort(&p.Port, port)
	p.Addr = a.As16()
	return unix.SizeofSockaddrInet6
}

// putPort stores port in network order.
func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

// setTCPOptions sets TCP_NODELAY and the keep-alive ka on the socket fd,
// as package net does on its connections, with raw setsockopt(2): on a
// dialed socket, and once on a listening one, whose accepted sockets
// inherit them (Listen).
func setTCPOptions(fd int, ka net.KeepAliveConfig) syscall.Errno {
	set := func(level, opt, v int) syscall.Errno {
		v32 := int32(v)
		_, _, e := syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v32)), 4, 0)
		return e
	}
	if e := set(unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); e != 0 {
		return e
	}
	if !ka.Enable {
		return 0
	}
	if e := set(unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1); e != 0 {
		return e
	}
	for _, o := range []struct {
		opt int
		v   int
	}{
		{unix.TCP_KEEPIDLE, seconds(ka.Idle, keepAliveIdle)},
		{unix.TCP_KEEPINTVL, seconds(ka.Interval, keepAliveInterval)},
		{unix.TCP_KEEPCNT, count(ka.Count, keepAliveCount)},
	} {
		if o.v < 0 {
			continue // left as the system has it
		}
		if e := set(unix.IPPROTO_TCP, o.opt, o.v); e != 0 {
			return e
		}
	}
	return 0
}

// seconds is a keep-alive time as package net reads KeepAliveConfig: 0 is
// its default, a negative one leaves the system's (-1 here), and the rest
// rounds up to whole seconds.
func seconds(d, def time.Duration) int {
	switch {
	case d == 0:
		d = def
	case d < 0:
		return -1
	}
	return int((d + time.Second - 1) / time.Second)
}

func count(n, def int) int {
	switch {
	case n == 0:
		return def
	case n < 0:
		return -1
	}
	return n
}

// await waits, in the runtime's poller or on c's serve loop, for the connect under way on c to
// end: until the socket is writable and says how it went (SO_ERROR), as
// package net waits, within the dialer's timeout and ctx.
func (d *Dialer) await(ctx context.Context, c *fdConn) error {
	deadline, hasDeadline := ctx.Deadline()
	if d.Timeout > 0 {
		if t := time.Now().Add(d.Timeout); !hasDeadline || t.Before(deadline) {
			deadline, hasDeadline = t, true
		}
	}
	if hasDeadline {
		if err := c.SetWriteDeadline(deadline); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetWriteDeadline(aLongTimeAgo) })
	var serr syscall.Errno
	write := c.rc.Write
	if c.co != nil {
		// On a serve loop's coroutine (c is loose): the loop waits.
		write = func(f func(uintptr) bool) error { return c.co.wait(c, f, &c.wdl) }
	}
	err := write(func(fd uintptr) bool {
		v, e := rawSockError(int(fd))
		switch {
		case e != 0:
			serr = e
			return true
		case v == 0:
			if connected(int(fd)) {
				return true
			}
			return false // spurious: not yet connected
		case v == syscall.EINPROGRESS || v == syscall.EALREADY || v == syscall.EINTR:
			return false
		}
		serr = v
		return true
	})
	if !stop() {
		// ctx ended: its error, not the deadline's, says why.
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return os.ErrDeadlineExceeded
		}
		return err
	}
	if serr != 0 {
		return os.NewSyscallError("connect", serr)
	}
	return c.SetWriteDeadline(time.Time{})
}

// rawSockError reads and clears the socket's pending error (SO_ERROR).
func rawSockError(fd int) (syscall.Errno, syscall.Errno) {
	var v int32
	l := uint32(4)
	_, _, e := syscall.RawSyscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_ERROR, uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&l)), 0)
	return syscall.Errno(v), e
}

// connected reports whether the socket has a peer (getpeername(2)).
func connected(fd int) bool {
	var rsa unix.RawSockaddrAny
	l := uint32(unsafe.Sizeof(rsa))
	_, _, e := syscall.RawSyscall(syscall.SYS_GETPEERNAME, uintptr(fd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&l)))
	return e == 0
}
