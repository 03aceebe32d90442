//go:build linux

package main

// The floor of an event-loop proxy in Go (-engine loop): what a gateway
// whose short requests ran on event loops, as nginx and HAProxy run them,
// could at best cost. One loop per processor, each on a thread of its own
// with its own epoll and its own listening socket (SO_REUSEPORT); each
// client connection gets one backend connection of its own, made in the
// same loop; every receive is passed on to the other side in one send,
// after its HTTP head's end is looked for (the least parsing any HTTP/1.1
// proxy does). No pool, no balancing, no retries, no metrics. Written
// here rather than with gnet or evio: the floor should be the system
// calls and the loop alone, with no library's connection objects or
// callbacks on top, and it is a benchmark, not product code.

import (
	"log"
	"net"
	"runtime"

	"golang.org/x/sys/unix"
)

// side is one socket of a proxied pair.
type side struct {
	peer int    // the other socket; -1 when none
	pend []byte // bytes the socket did not take yet
}

func serveLoops(listen, backend string) { servePerProcessor(listen, backend, loop) }

// servePerProcessor runs serve on a listening socket of its own (SO_REUSEPORT)
// for each processor (or each of -loops), until one fails.
func servePerProcessor(listen, backend string, serve func(ln int, ba *net.TCPAddr) error) {
	la, err := net.ResolveTCPAddr("tcp", listen)
	if err != nil {
		log.Fatal(err)
	}
	ba, err := net.ResolveTCPAddr("tcp", backend)
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error)
	n := loops
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	for range n {
		ln, err := reusePortListener(la)
		if err != nil {
			log.Fatal(err)
		}
		go func() { done <- serve(ln, ba) }()
	}
	log.Fatal(<-done)
}

func sockaddr(a *net.TCPAddr) *unix.SockaddrInet4 {
	sa := &unix.SockaddrInet4{Port: a.Port}
	copy(sa.Addr[:], a.IP.To4())
	return sa
}

func loop(ln int, ba *net.TCPAddr) error {
	runtime.LockOSThread()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, ln, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(ln)}); err != nil {
		return err
	}
	bsa := sockaddr(ba)
	sides := map[int]*side{}
	buf := make([]byte, 64<<10)
	events := make([]unix.EpollEvent, 256)
	closePair := func(fd int) {
		s := sides[fd]
		delete(sides, fd)
		_ = unix.Close(fd)
		if s != nil && s.peer >= 0 {
			delete(sides, s.peer)
			_ = unix.Close(s.peer)
		}
	}
	// send writes p to fd, keeping what it does not take for EPOLLOUT.
	send := func(fd int, s *side, p []byte) bool {
		if len(s.pend) == 0 {
			m, err := unix.Write(fd, p)
			if err != nil && err != unix.EAGAIN && err != unix.ENOTCONN {
				return false
			}
			if m < 0 {
				m = 0
			}
			p = p[m:]
			if len(p) == 0 {
				return true
			}
		}
		s.pend = append(s.pend, p...)
		return unix.EpollCtl(ep, unix.EPOLL_CTL_MOD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT, Fd: int32(fd)}) == nil
	}
	for {
		k, err := unix.EpollWait(ep, events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:k] {
			fd := int(ev.Fd)
			if fd == ln {
				for {
					c, b, ok, more := acceptPair(ln, bsa)
					if !more {
						break
					}
					if !ok {
						continue
					}
					sides[c] = &side{peer: b}
					sides[b] = &side{peer: c}
					_ = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, c, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c)})
					_ = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, b, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT, Fd: int32(b)})
				}
				continue
			}
			s := sides[fd]
			if s == nil {
				continue
			}
			if ev.Events&unix.EPOLLOUT != 0 {
				if len(s.pend) > 0 {
					m, err := unix.Write(fd, s.pend)
					if err != nil && err != unix.EAGAIN {
						closePair(fd)
						continue
					}
					if m > 0 {
						s.pend = s.pend[m:]
					}
				}
				if len(s.pend) == 0 {
					s.pend = nil
					_ = unix.EpollCtl(ep, unix.EPOLL_CTL_MOD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)})
				}
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
				continue
			}
			m, err := unix.Read(fd, buf)
			if err == unix.EAGAIN {
				continue
			}
			if err != nil || m == 0 {
				closePair(fd)
				continue
			}
			p := buf[:m]
			headLength(p)
			ps := sides[s.peer]
			if ps == nil || !send(s.peer, ps, p) {
				closePair(fd)
			}
		}
	}
}

// reusePortListener is a non-blocking listening socket on la, one of
// several (SO_REUSEPORT).
func reusePortListener(la *net.TCPAddr) (int, error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, opt := range []int{unix.SO_REUSEPORT, unix.SO_REUSEADDR} {
		if err := unix.SetsockoptInt(ln, unix.SOL_SOCKET, opt, 1); err != nil {
			unix.Close(ln)
			return -1, err
		}
	}
	if err := unix.Bind(ln, sockaddr(la)); err != nil {
		unix.Close(ln)
		return -1, err
	}
	if err := unix.Listen(ln, 4096); err != nil {
		unix.Close(ln)
		return -1, err
	}
	return ln, nil
}

// acceptPair accepts a connection on the listening socket ln and starts a
// non-blocking connection to bsa for it, both with TCP_NODELAY. more is
// false when nothing is left to accept; ok is false when this one was
// dropped (the backend socket could not be made).
func acceptPair(ln int, bsa unix.Sockaddr) (c, b int, ok, more bool) {
	c, _, err := unix.Accept4(ln, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	if err != nil {
		return -1, -1, false, false
	}
	b, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		_ = unix.Close(c)
		return -1, -1, false, true
	}
	if err := unix.Connect(b, bsa); err != nil && err != unix.EINPROGRESS {
		_ = unix.Close(c)
		_ = unix.Close(b)
		return -1, -1, false, true
	}
	_ = unix.SetsockoptInt(c, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	_ = unix.SetsockoptInt(b, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	return c, b, true, true
}
