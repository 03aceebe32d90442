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

func serveLoops(listen, backend string) {
	la, err := net.ResolveTCPAddr("tcp", listen)
	if err != nil {
		log.Fatal(err)
	}
	ba, err := net.ResolveTCPAddr("tcp", backend)
	if err != nil {
		log.Fatal(err)
	}
	n := runtime.GOMAXPROCS(0)
	done := make(chan error)
	for range n {
		go func() { done <- loop(la, ba) }()
	}
	log.Fatal(<-done)
}

func sockaddr(a *net.TCPAddr) *unix.SockaddrInet4 {
	sa := &unix.SockaddrInet4{Port: a.Port}
	copy(sa.Addr[:], a.IP.To4())
	return sa
}

func loop(la, ba *net.TCPAddr) error {
	runtime.LockOSThread()
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return err
	}
	if err := unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if err := unix.Bind(ln, sockaddr(la)); err != nil {
		return err
	}
	if err := unix.Listen(ln, 4096); err != nil {
		return err
	}
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
					c, _, err := unix.Accept4(ln, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
					if err != nil {
						break
					}
					b, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
					if err != nil {
						_ = unix.Close(c)
						continue
					}
					if err := unix.Connect(b, bsa); err != nil && err != unix.EINPROGRESS {
						_ = unix.Close(c)
						_ = unix.Close(b)
						continue
					}
					_ = unix.SetsockoptInt(c, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
					_ = unix.SetsockoptInt(b, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
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
