//go:build linux

package main

// The floor of an event loop that runs blocking-style code (-engine coro):
// one loop per processor, as in -engine loop, but each client connection
// is served by a function written as a goroutine-per-connection server
// writes it (read a request, send it to the backend, read the answer,
// send it back), run as a coroutine (iter.Pull) of its loop. A receive or
// send that would block yields to the loop, which resumes the coroutine
// when its socket is ready: the switch is the runtime's coroswitch, a
// direct hand-over on the loop's thread, with no scheduler turn, no other
// thread woken and no poller of the runtime per socket. The question it
// answers (issue 19, item 3): does code in the style of the gateway's
// handlers keep the event loop's cost once it runs this way?
//
// Unlike -engine loop, the loop is not on a locked thread of its own: it
// waits for its epoll instance in the runtime's poller (as the gateway's
// stream loops do, internal/gateway/h1/loop_linux.go), so that a
// coroutine could also be handed to an ordinary goroutine when it has to
// wait for something that is not a socket.
//
// -engine corolocked is the same loops, each on a thread of its own
// (runtime.LockOSThread) that waits in a blocking epoll_wait, as -engine
// loop's do: the runtime's poller and scheduler take no part between two
// batches. Beside -engine coro and -engine loop it tells apart what the
// blocking style costs (corolocked against loop) from what the wait in
// the runtime's poller costs (coro against corolocked).

import (
	"errors"
	"iter"
	"log"
	"net"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func serveCoroLoops(listen, backend string) { servePerProcessor(listen, backend, coroLoop) }

func serveCoroLockedLoops(listen, backend string) {
	servePerProcessor(listen, backend, coroLockedLoop)
}

// coroLoop serves the connections of the listening socket ln, forwarding
// to ba, waiting in the runtime's poller; it returns only on a failure to
// start.
func coroLoop(ln int, ba *net.TCPAddr) error { return coroServe(ln, ba, false) }

// coroLockedLoop is coroLoop on a locked thread that waits in a blocking
// epoll_wait.
func coroLockedLoop(ln int, ba *net.TCPAddr) error { return coroServe(ln, ba, true) }

var errStopped = errors.New("stopped")

// coConn is one client connection and its backend connection, served by
// a coroutine.
type coConn struct {
	cfd, bfd int
	yield    func(struct{}) bool
	next     func() (struct{}, bool)
	stop     func()
}

func (c *coConn) recv(fd int, p []byte) (int, error) {
	for {
		n, err := unix.Read(fd, p)
		if err == unix.EAGAIN {
			if !c.yield(struct{}{}) {
				return 0, errStopped
			}
			continue
		}
		if err == nil && n == 0 {
			return 0, errors.New("eof")
		}
		return n, err
	}
}

func (c *coConn) send(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := unix.Write(fd, p)
		if err == unix.EAGAIN || err == unix.ENOTCONN {
			if !c.yield(struct{}{}) {
				return errStopped
			}
			continue
		}
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

func (c *coConn) serve() {
	var buf [16 << 10]byte
	for {
		req, err := readMessage(func(p []byte) (int, error) { return c.recv(c.cfd, p) }, buf[:])
		if err != nil {
			return
		}
		if c.send(c.bfd, req) != nil {
			return
		}
		resp, err := readMessage(func(p []byte) (int, error) { return c.recv(c.bfd, p) }, buf[:])
		if err != nil {
			return
		}
		if c.send(c.cfd, resp) != nil {
			return
		}
	}
}

// coroServe runs one loop of coroutines on ln (see coroLoop); locked: on
// a thread of its own, waiting in a blocking epoll_wait.
func coroServe(ln int, ba *net.TCPAddr, locked bool) error {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, ln, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}); err != nil {
		return err
	}
	bsa := sockaddr(ba)
	var conns []*coConn
	var free []int32
	events := make([]unix.EpollEvent, 256)
	end := func(slot int32) {
		c := conns[slot]
		conns[slot] = nil
		free = append(free, slot)
		_ = unix.Close(c.cfd)
		_ = unix.Close(c.bfd)
		c.stop()
	}
	resume := func(slot int32) {
		c := conns[slot]
		if c == nil {
			return
		}
		if _, ok := c.next(); !ok {
			end(slot)
		}
	}
	accept := func() {
		for {
			cfd, bfd, ok, more := acceptPair(ln, bsa)
			if !more {
				return
			}
			if !ok {
				continue
			}
			var slot int32
			if k := len(free); k > 0 {
				slot, free = free[k-1], free[:k-1]
			} else {
				slot = int32(len(conns))
				conns = append(conns, nil)
			}
			c := &coConn{cfd: cfd, bfd: bfd}
			c.next, c.stop = iter.Pull(func(yield func(struct{}) bool) {
				c.yield = yield
				c.serve()
			})
			conns[slot] = c
			const edge = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET
			_ = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, cfd, &unix.EpollEvent{Events: edge, Fd: slot})
			_ = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, bfd, &unix.EpollEvent{Events: edge, Fd: slot})
			resume(slot)
		}
	}
	// batch serves the events of one wait.
	batch := func(evs []unix.EpollEvent) {
		for _, ev := range evs {
			if ev.Fd == -1 {
				accept()
				continue
			}
			resume(ev.Fd)
		}
	}
	if locked {
		runtime.LockOSThread()
		for {
			n, e := unix.EpollWait(ep, events, -1)
			if e == unix.EINTR {
				continue
			}
			if e != nil {
				log.Fatal("epoll_wait: ", e)
			}
			batch(events[:n])
		}
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		return err
	}
	epc, err := os.NewFile(uintptr(ep), "epoll").SyscallConn()
	if err != nil {
		return err
	}
	err = epc.Read(func(uintptr) bool {
		for {
			n, e := epollWaitNow(ep, events)
			if e == unix.EINTR {
				continue
			}
			if e != nil {
				log.Fatal("epoll_wait: ", e)
			}
			if n == 0 {
				return false
			}
			batch(events[:n])
		}
	})
	return err
}

// epollWaitNow is epoll_wait with a zero timeout, as a raw system call:
// it never blocks, so the scheduler need not be told. The gateway's stream
// loops wait the same way (h1's rawEpollWait, unexported, so written again
// here rather than exported from the product for a benchmark).
func epollWaitNow(ep int, events []unix.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(unsafe.SliceData(events))), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
