//go:build linux

package h1

// Connections served on event loops.
//
// A short request through a goroutine-per-connection server costs more
// than the request's own work: each receive that finds nothing parks the
// goroutine, the runtime's poller wakes it when bytes come, and each
// wake-up is a scheduler turn, often a thread woken to run it, and a
// context switch for the client, the backend and the proxy that share the
// machine's cores. HAProxy and nginx instead run an event loop: one thread
// waits for many sockets at once and serves each ready one in turn.
//
// Here a Server's connections (unless Server.NoLoops) are served the same
// way without changing how the server and the handlers are written: each
// connection's serve is a coroutine (iter.Pull) of one of a few serve
// loops, one per processor but one (GOMAXPROCS-1, at least one: a loop
// that waits in epoll_wait holds its processor, and the rest of the
// program needs one too; BENCHMARKS.md, issue 19, session 29). Its sockets
// (the client's and the backend connections its requests use) are kept
// out of the runtime's poller ("loose", newLooseFdConn) and registered,
// edge-triggered, with the loop's epoll instance; a receive or send that
// would block yields to the loop, which resumes the coroutine when the
// socket is ready. The switch is the runtime's coroswitch: no scheduler
// turn, no other thread woken.
//
// A coroutine must not wait for anything but its sockets while it is on
// its loop: the loop would wait with it. A request that has to wait for
// something else (a fair queue's turn, an instance to start, a stream
// served apart) first calls Detach, which gives its connection back to
// the runtime's poller and the coroutine a goroutine of its own for the
// rest of the connection's life; Body.EachOnLoop does so by itself. A
// coroutine that blocks anyway is counted (LoopStalls) and costs latency,
// not correctness.
//
// Deadlines of loose sockets are the loop's (its epoll_wait's timeout).
//
// Written here rather than taken from a library: the event-loop servers
// for Go (gnet, evio, nbio) own the connection and a handler type of their
// own, and would replace net/http's Handler, which the gateway and its
// tests are written against.

import (
	"context"
	"iter"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// serveLoop is one serve loop.
type serveLoop struct {
	idx  int
	ep   int
	kick int // eventfd: posts are waiting

	mu     sync.Mutex
	posts  []func()
	asleep bool // in (or about to enter) epoll_wait with no timeout of posts

	// The loop's goroutine's own.
	regs   []*loopReg // by event id
	free   []int32
	timers []loopTimer
}

// loopTimer is a deadline of a waiting socket.
type loopTimer struct {
	at int64 // mono
	r  *loopReg
}

// coro is a connection's coroutine on a serve loop.
type coro struct {
	lp    *serveLoop
	c     *sconn
	yield func(struct{}) bool
	next  func() (struct{}, bool)

	detaching bool    // asks the loop to hand it a goroutine (detach)
	bound     []*conn // backend connections its requests hold
}

// loopReg is a loose socket registered with a loop's epoll instance.
type loopReg struct {
	id     int32
	lp     *serveLoop
	fc     *fdConn
	waiter *coro // the coroutine waiting for the socket; the loop's goroutine only
	missed bool  // an event came while none waited
	timer  int64 // the deadline (mono) a timer of the loop is set for; 0: none
	// watch, for a client's socket, looks at it when an event comes while
	// its coroutine waits for something else (the client may have left).
	watch func()
}

var (
	serveLoops   []*serveLoop
	serveLoopErr error
	serveLoopsMu sync.Once
	serveLoopN   atomic.Uint32
	loopStalls   atomic.Int64
	loopsStarted atomic.Bool // a serve loop was started: coroOf looks
)

// stallAfter is how long a coroutine may run before its turn counts as a
// stall (LoopStalls): far above any request's own work.
const stallAfter = 20 * time.Millisecond

// LoopStalls returns how many times a coroutine held its serve loop for
// more than 20 ms (it waited for something but its sockets).
func LoopStalls() int64 { return loopStalls.Load() }

// nextServeLoop returns the next serve loop, starting them on first use.
func nextServeLoop() (*serveLoop, error) {
	serveLoopsMu.Do(func() {
		n := max(runtime.GOMAXPROCS(0)-1, 1)
		for i := range n {
			lp, err := newServeLoop(i)
			if err != nil {
				serveLoopErr = err
				return
			}
			serveLoops = append(serveLoops, lp)
		}
	})
	if serveLoopErr != nil {
		return nil, serveLoopErr
	}
	loopsStarted.Store(true)
	return serveLoops[int(serveLoopN.Add(1))%len(serveLoops)], nil
}

func newServeLoop(idx int) (*serveLoop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	kick, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_ = unix.Close(ep)
		return nil, os.NewSyscallError("eventfd", err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, kick, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: kickSlot}); err != nil {
		_ = unix.Close(ep)
		_ = unix.Close(kick)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	lp := &serveLoop{idx: idx, ep: ep, kick: kick}
	go lp.run()
	return lp, nil
}

// post runs f on the loop's goroutine, between two waits.
func (lp *serveLoop) post(f func()) {
	lp.mu.Lock()
	lp.posts = append(lp.posts, f)
	wake := lp.asleep
	lp.asleep = false
	lp.mu.Unlock()
	if wake {
		rawKick(lp.kick)
	}
}

// run is the loop. It waits in a blocking epoll_wait the scheduler is told
// of, on a goroutine that is not locked to its thread: coroutines made on
// a locked thread could never leave it (Detach).
func (lp *serveLoop) run() {
	events := make([]unix.EpollEvent, 256)
	var posts []func()
	for {
		timeout := lp.timeout()
		lp.mu.Lock()
		if len(lp.posts) > 0 {
			timeout = 0
		} else {
			lp.asleep = true
		}
		lp.mu.Unlock()
		n, err := unix.EpollWait(lp.ep, events, timeout)
		if err != nil && err != unix.EINTR {
			panic(os.NewSyscallError("epoll_wait", err))
		}
		lp.mu.Lock()
		lp.asleep = false
		posts, lp.posts = lp.posts, posts[:0]
		lp.mu.Unlock()
		for i, f := range posts {
			f()
			posts[i] = nil
		}
		for _, ev := range events[:max(n, 0)] {
			if ev.Fd == kickSlot {
				rawDrain(lp.kick)
				continue
			}
			r := lp.regs[ev.Fd]
			switch {
			case r == nil:
			case r.waiter != nil:
				lp.resume(r.waiter)
			default:
				r.missed = true
				if r.watch != nil {
					r.watch()
				}
			}
		}
		if len(lp.timers) > 0 {
			lp.fire()
		}
	}
}

// timeout is epoll_wait's: until the first deadline, in milliseconds
// rounded up (-1: none).
func (lp *serveLoop) timeout() int {
	if len(lp.timers) == 0 {
		return -1
	}
	first := lp.timers[0].at
	for _, t := range lp.timers[1:] {
		first = min(first, t.at)
	}
	d := first - mono()
	if d <= 0 {
		return 0
	}
	return int((d + int64(time.Millisecond) - 1) / int64(time.Millisecond))
}

// fire resumes the waiters whose deadline has passed (wait then finds it
// passed) and drops their timers.
func (lp *serveLoop) fire() {
	now := mono()
	kept := lp.timers[:0]
	var due []*loopReg
	for _, t := range lp.timers {
		if t.at <= now {
			if t.r.timer == t.at {
				t.r.timer = 0
			}
			due = append(due, t.r)
		} else {
			kept = append(kept, t)
		}
	}
	clear(lp.timers[len(kept):])
	lp.timers = kept
	for _, r := range due {
		if r.waiter != nil {
			lp.resume(r.waiter)
		}
	}
}

// resume runs co until it waits again or ends; a coroutine that asked to
// detach gets a goroutine of its own.
func (lp *serveLoop) resume(co *coro) {
	start := mono()
	_, alive := co.next()
	if mono()-start > int64(stallAfter) {
		loopStalls.Add(1)
	}
	if alive && co.detaching {
		go co.next() // the rest of the connection: it never yields again
	}
}

// start serves c, whose socket is fc, as a coroutine of the loop.
func (lp *serveLoop) start(c *sconn, fc *fdConn) {
	co := &coro{lp: lp, c: c}
	co.next, _ = iter.Pull(func(yield func(struct{}) bool) {
		co.yield = yield
		c.serve()
	})
	fc.co = co
	c.ctx.co.Store(co)
	// Registered now, not at its first wait: the loop watches the client
	// (peek) even when its request was there at once.
	if r, err := lp.register(fc); err != nil {
		_ = fc.Close() // serve fails at once and ends
	} else {
		r.watch = c.peek
	}
	lp.resume(co)
}

// register adds fc's socket to the loop's epoll instance.
func (lp *serveLoop) register(fc *fdConn) (*loopReg, error) {
	var id int32
	if k := len(lp.free); k > 0 {
		id, lp.free = lp.free[k-1], lp.free[:k-1]
	} else {
		id = int32(len(lp.regs))
		lp.regs = append(lp.regs, nil)
	}
	r := &loopReg{id: id, lp: lp, fc: fc}
	var err error
	cerr := fc.rc.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: id}
		err = rawEpollCtl(lp.ep, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		lp.free = append(lp.free, id)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	lp.regs[id] = r
	fc.reg.Store(r)
	return r, nil
}

// forget frees r's slot, once its socket is closed or handed on, and wakes
// a coroutine waiting for it (which then finds it closed); on the loop's
// goroutine.
func (lp *serveLoop) forget(r *loopReg) {
	if lp.regs[r.id] != r {
		return
	}
	lp.regs[r.id] = nil
	lp.free = append(lp.free, r.id)
	if co := r.waiter; co != nil {
		lp.resume(co)
	}
}

// kicked wakes r's waiter, whose deadline was moved to the past.
func (lp *serveLoop) kicked(r *loopReg) {
	if lp.regs[r.id] == r && r.waiter != nil {
		lp.resume(r.waiter)
	}
}

// wait runs f on fc's socket until it reports done, yielding to the loop
// while the socket is not ready; dl is the deadline that applies (read or
// write).
func (co *coro) wait(fc *fdConn, f func(uintptr) bool, dl *atomic.Int64) error {
	for {
		fc.cf = f
		err := fc.rc.Control(fc.ctrlFn)
		fc.cf = nil
		if err != nil {
			return err
		}
		if fc.cdone {
			return nil
		}
		at := dl.Load()
		if at != 0 && at <= mono() {
			return os.ErrDeadlineExceeded
		}
		if fc.closed.Load() {
			return net.ErrClosed
		}
		r := fc.reg.Load()
		if r == nil {
			if r, err = co.lp.register(fc); err != nil {
				return err
			}
		}
		if r.missed {
			// An edge came while nothing waited: what f did not look
			// for (a blind wait: sock.sendRead) may be there.
			r.missed = false
			continue
		}
		if at != 0 && r.timer != at {
			// One timer per deadline, however many waits it bounds.
			r.timer = at
			co.lp.timers = append(co.lp.timers, loopTimer{at: at, r: r})
		}
		r.waiter = co
		ok := co.yield(struct{}{})
		r.waiter = nil
		if !ok {
			return net.ErrClosed
		}
	}
}

func (fc *fdConn) ctrl(fd uintptr) { fc.cdone = fc.cf(fd) }

// serveOnLoop serves c on a serve loop when the server has them and c is
// a socket (else: false, serve it on a goroutine).
func (s *Server) serveOnLoop(c *sconn) bool {
	if s.NoLoops {
		return false
	}
	fc, err := loosen(c.nc)
	if err != nil || fc == nil {
		return false
	}
	lp, err := nextServeLoop()
	if err != nil {
		return false
	}
	c.nc = fc
	c.sk.reset(fc)
	c.onLoop.Store(true)
	lp.post(func() { lp.start(c, fc) })
	return true
}

// loosen makes ln accept loose sockets when the server serves on loops
// and ln is this package's (else serveOnLoop makes them).
func (s *Server) loosen(ln net.Listener) {
	if l, ok := ln.(*Listener); ok && !s.NoLoops {
		l.loose.Store(true)
	}
}

// loosen returns nc as a loose socket: itself if it is one, else a
// duplicate of its descriptor (nc is then closed); nil if nc is not a
// socket.
func loosen(nc net.Conn) (*fdConn, error) {
	if fc, ok := nc.(*fdConn); ok && fc.loose {
		return fc, nil
	}
	if _, ok := nc.(syscall.Conn); !ok {
		return nil, nil
	}
	fd, err := dupSocket(nc)
	if err != nil {
		return nil, err
	}
	laddr, raddr := connAddrs(nc)
	lc, err := newLooseFdConn(fd, laddr, raddr)
	if err != nil {
		return nil, err
	}
	_ = nc.Close()
	return lc.(*fdConn), nil
}

// tighten returns the loose socket fc as one the runtime's poller waits
// for (a duplicate; fc is closed).
func tighten(fc *fdConn) (net.Conn, error) {
	fd, err := dupSocket(fc)
	if err != nil {
		return nil, err
	}
	nc, err := fileConn(fd, fc)
	if err != nil {
		return nil, err
	}
	_ = fc.Close()
	return nc, nil
}

// tighten gives c's socket back to the runtime's poller if it is loose
// (accepted for a serve loop that then did not take it).
func (c *sconn) tighten() {
	if fc, ok := c.nc.(*fdConn); ok && fc.loose {
		if nc, err := tighten(fc); err == nil {
			c.nc = nc
			c.sk.reset(nc)
		}
	}
}

// peek, on the loop's goroutine, looks at the client's socket when bytes,
// the end or a failure came while the connection's coroutine waited for
// something else: the end or a failure means the client left, which
// cancels the request (as the watch of a connection served on a goroutine
// does, watchClient). Bytes (a pipelined request) stay for the next read.
func (c *sconn) peek() {
	fc, ok := c.nc.(*fdConn)
	if !ok {
		return
	}
	gone := false
	_ = fc.rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = (err == nil && n == 0) || (err != nil && err != syscall.EAGAIN && err != syscall.EINTR)
	})
	if gone {
		c.cancel()
	}
}

// coroOf returns the coroutine ctx's request runs on while it is on its
// serve loop, else nil.
func coroOf(ctx context.Context) *coro {
	if ctx == nil || !loopsStarted.Load() {
		return nil // no serve loop in the process: no context lookup
	}
	if x, ok := ctx.(*connCtx); ok {
		return x.co.Load()
	}
	co, _ := ctx.Value(coroKey{}).(*coro)
	return co
}

// loopIndex is the index of co's loop (the backend connections' pool of
// it); -1 for none.
func (co *coro) loopIndex() int {
	if co == nil {
		return -1
	}
	return co.lp.idx
}

// bind makes the backend connection c wait on co's loop: its socket made
// loose if it is not, and pooled with the loop's (c.loop).
func (co *coro) bind(c *conn) {
	if co == nil {
		return
	}
	fc, ok := c.nc.(*fdConn)
	if !ok || !fc.loose {
		lc, err := loosen(c.nc)
		if err != nil || lc == nil {
			return // not a socket: its reads block the loop (LoopStalls)
		}
		c.setConn(lc)
		fc = lc
	}
	fc.co = co
	c.loop = co.lp.idx
	c.co = co
	co.bound = append(co.bound, c)
}

// unbind is bind undone when c leaves co's request (pooled or closed).
func (co *coro) unbind(c *conn) {
	c.co = nil
	if fc, ok := c.nc.(*fdConn); ok {
		fc.co = nil
	}
	co.bound, _ = cutOne(co.bound, c)
}

// Detach takes the connection of ctx's request off its serve loop, when it
// is on one, before the request waits for anything but its sockets: its
// sockets go back to the runtime's poller and its coroutine gets a
// goroutine of its own, for the rest of the connection's life. A no-op
// elsewhere.
func Detach(ctx context.Context) {
	if co := coroOf(ctx); co != nil {
		co.detach(true)
	}
}

// detach, on co (and so on its loop's goroutine); watch: the request under
// way is watched from now on as on a goroutine (the sweep's watch), else
// the caller watches it.
func (co *coro) detach(watch bool) {
	c := co.c
	c.ctx.co.Store(nil)
	if fc, ok := c.nc.(*fdConn); ok && fc.loose {
		fc.co = nil
		if nc, err := tighten(fc); err == nil {
			c.replaceConn(nc)
		} else {
			// Closed: the connection's reads and writes fail and it ends.
			_ = fc.Close()
		}
	}
	for len(co.bound) > 0 {
		b := co.bound[0]
		co.unbind(b)
		b.loop = -1
		if fc, ok := b.nc.(*fdConn); ok && fc.loose {
			ab := b.ab
			if ab != nil {
				ab.Unwatch(b.nc)
			}
			nc, err := tighten(fc)
			if err != nil {
				b.nc = fc // closed: its use fails
				continue
			}
			b.setConn(nc)
			if ab != nil && !ab.Watch(nc) {
				_ = nc.Close()
			}
		}
	}
	c.onLoop.Store(false)
	if watch && c.state.Load() == stateActive {
		c.arm() // the watch of a request under way is the sweep's from now on
	}
	co.detaching = true
	co.yield(struct{}{})
}
