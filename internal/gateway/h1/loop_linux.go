//go:build linux

package h1

// Streamed answers on an event loop.
//
// A streamed answer waits for its next token for seconds at a time, and a
// token is a few hundred bytes: for each one, the goroutine of the stream
// is woken by the runtime's poller, reads one chunk from the backend,
// writes one chunk to the client and parks again. At thousands of open
// streams, the scheduling around those two system calls (the park, the
// wake-up, the poller's and sysmon's turns) is the part of the CPU per
// stream that nginx, which runs an event loop, does not pay (BENCHMARKS.md,
// issue 19). Here a committed stream whose backend and client connections
// are both this package's (Client, Server) is carried by a Loop instead:
// both sockets leave the runtime's poller (duplicated, the runtime's
// descriptor closed), a loop's goroutine waits, through the runtime's
// poller, for an epoll instance of its own that holds many streams (as few
// loops as carry the streams run, up to one per core: loopload.go), and for
// each ready backend it runs the same turn as Body.Each (pump), with
// non-blocking receives and sends the scheduler is not told of. A client
// slower than its backend holds its bytes in the stream (it is then no
// longer read from the backend) until the socket takes them. At the end the sockets go back to the runtime's poller, so
// that both connections stay alive for their next requests.
//
// Written here rather than taken from a library: the event-loop servers
// for Go (gnet, evio, nbio) own the whole connection from accept on, and
// would replace the HTTP server and the backend client instead of carrying
// the streams of the ones the gateway has.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Loop carries streams (see the comment above). Its zero value is not
// usable; the package starts them as streams need them (loopFor).
type Loop struct {
	ep   int             // epoll, non-blocking
	epc  syscall.RawConn // ep in the runtime's poller
	kick int             // eventfd: streams were added

	mu    sync.Mutex
	nslot int32 // slots handed out
	free  []int32
	fresh []*loopStream // added, not yet pumped
	gen   int32         // streams added: tells a slot's streams apart

	// The loop's goroutine's own: the streams by slot, set when one
	// starts and nil when it ends, read for each event without a lock.
	slots []*loopStream

	meter   loopMeter    // run's own
	sharePm atomic.Int32 // busy share of the last window closed, in thousandths
	shareAt atomic.Int64 // when it closed (mono; 0: none yet)
}

// The epoll data of the kick eventfd; a stream's is its slot (Fd), and
// (Pad) which socket and the stream's generation, so that an event of a
// stream that ended earlier in a batch does not reach the next stream in
// its slot.
const (
	kickSlot    = -1
	sideBackend = 0
	sideClient  = 1
)

var (
	loopCarried atomic.Int64 // streams handed to a loop
	loopHeld    atomic.Int64 // times a loop held a stream for its client

	loopsMu sync.Mutex
	loops   []*Loop // in the order they were started (loopload.go)
)

// monoStart is the origin of mono.
var monoStart = time.Now()

// mono is a monotonic reading in nanoseconds (never 0).
func mono() int64 { return int64(time.Since(monoStart)) + 1 }

// loopFor returns the loop for a new stream (pickLoop), starting it if it
// is a new one.
func loopFor() (*Loop, error) {
	loopsMu.Lock()
	defer loopsMu.Unlock()
	now := mono()
	var buf [16]float64
	loads := buf[:0]
	for _, l := range loops {
		loads = append(loads, shareAt(float64(l.sharePm.Load())/1000, l.shareAt.Load(), now))
	}
	i := pickLoop(loads, runtime.GOMAXPROCS(0))
	if i < len(loops) {
		return loops[i], nil
	}
	l, err := newLoop()
	if err != nil {
		return nil, err
	}
	loops = append(loops, l)
	go l.run()
	return l, nil
}

func newLoop() (*Loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	kick, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: kickSlot}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, kick, &ev); err != nil {
		unix.Close(ep)
		unix.Close(kick)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	// The loop waits for its epoll instance in the runtime's poller (an
	// epoll descriptor is readable while it has events), not in a blocking
	// epoll_wait: a thread blocked in a system call has its P handed to
	// another thread by sysmon, which then keeps waking every 20 µs.
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		unix.Close(kick)
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(ep), "epoll")
	epc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		unix.Close(kick)
		return nil, err
	}
	return &Loop{ep: ep, epc: epc, kick: kick}, nil
}

// loopStream is one stream on a Loop.
type loopStream struct {
	l    *Loop
	slot int32
	gen  int32
	b    *Body
	s    Sink
	w    *response // its c is the client's connection
	bfd  int       // the backend socket
	cfd  int       // the client socket
	ps   pumpState

	pending  []byte // written by the sink, not yet taken by the client socket
	ending   bool   // the body ended or failed: the stream ends once pending is out
	cerr     error  // the client socket failed
	panicked any    // a panic in the sink, carried back to the handler
	done     chan struct{}

	mu      sync.Mutex // guards open, against Close on another goroutine
	open    bool       // bfd is the stream's
	aborted atomic.Bool
}

// errAborted ends a stream whose request context ended (Close).
var errAborted = errors.New("h1: stream aborted")

// Close ends the stream as closing its backend connection would (the
// request's context watches it, Abortable): the backend socket is shut
// down, which the loop reads as its end.
func (st *loopStream) Close() error {
	st.aborted.Store(true)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.open {
		rawShutdown(st.bfd, unix.SHUT_RDWR)
	}
	return nil
}

// EachOnLoop is Each for an answer that w, the h1 Server's response (or a
// wrapper of it with Unwrap), sends to its client as a chunked stream: when
// both connections are sockets of this package, the stream is carried by
// an event loop (see Loop) while the caller waits; else, or when the loop
// cannot take it, by Each.
func (b *Body) EachOnLoop(w http.ResponseWriter, s Sink) error {
	r := findResponse(w)
	if r != nil {
		// A stream's wait below is not for a socket of its own: off the
		// serve loop first (a no-op for a connection not on one).
		if co := r.c.ctx.co.Load(); co != nil {
			co.detach(false) // the stream's loop watches the client
		}
	}
	b.settle()
	if r == nil || b.err != nil || b.c == nil || b.c.sk.rc == nil || b.c.ab == nil {
		return b.Each(s)
	}
	// Bytes that came with the head (a server that sends its head with
	// its first token) go out from here, before the hand-over: the first
	// token leaves with the answer's head, which the caller did not flush
	// (Ready), in one write, without waiting for the loop's turn.
	var ps pumpState
	if b.Ready() && b.emitReady(s, &ps) == emitStop {
		return b.eachResult(&ps, nil)
	}
	if !r.loopable() {
		return b.Each(s)
	}
	l, err := loopFor()
	if err != nil {
		return b.Each(s)
	}
	c, sc := b.c, r.c
	bfd, err := dupSocket(c.nc)
	if err != nil {
		return b.Each(s)
	}
	cfd, err := dupSocket(sc.nc)
	if err != nil {
		rawClose(bfd)
		return b.Each(s)
	}
	st := &loopStream{l: l, b: b, s: s, w: r, bfd: bfd, cfd: cfd, ps: ps, open: true, done: make(chan struct{})}
	// The request's context now ends the stream instead of closing the
	// backend connection.
	if !c.ab.Unwatch(c.nc) || !c.ab.Watch(st) {
		rawClose(bfd)
		rawClose(cfd)
		b.fail(net.ErrClosed)
		return b.result()
	}
	// The runtime's descriptors go (and with them the sockets leave its
	// poller); the duplicates are the loop's.
	_ = c.nc.Close()
	_ = sc.nc.Close()
	sc.loop = st
	loopCarried.Add(1)
	l.add(st)
	<-st.done
	sc.loop = nil
	return st.settle()
}

// settle, on the handler's goroutine once the loop let go of the stream,
// gives both sockets back to the runtime (or closes them) and settles the
// body as Each does.
func (st *loopStream) settle() error {
	b, c, sc := st.b, st.b.c, st.w.c
	st.mu.Lock()
	st.open = false
	st.mu.Unlock()
	stillWatched := c.ab.Unwatch(st)

	// The client's connection: back to the server, unless it failed, or
	// closes after this answer: then the answer's last bytes go out on the
	// loop's descriptor (writeTail), which saves giving a socket about to
	// close to the runtime's poller (a dup, a registration, two address
	// lookups).
	if st.cerr == nil {
		if sc.closesAfter(st.w) {
			sc.setTail(st.cfd)
		} else if nc, err := fileConn(st.cfd, sc.nc); err == nil {
			sc.replaceConn(nc)
		} else {
			st.cerr = err
		}
	} else {
		rawClose(st.cfd)
	}
	if st.cerr != nil {
		st.w.err, st.w.closeAfter = st.cerr, true
	}

	// The backend's: back to the client's pool at a clean end, if the pool
	// has room for it (else put would close it).
	if st.ps.end && stillWatched && !st.aborted.Load() && b.reuse && b.cl.hasRoom(c) {
		if nc, err := fileConn(st.bfd, c.nc); err == nil {
			c.setConn(nc)
			if !c.ab.Watch(nc) {
				b.reuse = false
			}
		} else {
			b.reuse = false
		}
	} else {
		rawClose(st.bfd)
		b.reuse = false // the runtime's descriptor is closed: finish closes c
		if st.aborted.Load() && (st.ps.rerr == io.EOF || (!st.ps.end && st.ps.rerr == nil && st.ps.ferr == nil)) {
			st.ps.rerr = errAborted
		}
	}
	if st.panicked != nil {
		b.fail(errAborted)
		panic(st.panicked)
	}
	return b.eachResult(&st.ps, nil)
}

// add hands st to the loop, which pumps it once (bytes may be buffered
// already) and then on every readiness of its backend.
func (l *Loop) add(st *loopStream) {
	l.mu.Lock()
	if n := len(l.free); n > 0 {
		st.slot = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		st.slot = l.nslot
		l.nslot++
	}
	l.gen++
	st.gen = l.gen & 0x3fffffff
	l.fresh = append(l.fresh, st)
	l.mu.Unlock()
	rawKick(l.kick)
}

func (l *Loop) run() {
	events := make([]unix.EpollEvent, 256)
	err := l.epc.Read(func(uintptr) bool {
		for {
			n, err := rawEpollWait(l.ep, events)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				panic("h1: epoll_wait: " + err.Error())
			}
			if n == 0 {
				return false // wait in the runtime's poller
			}
			t0 := mono()
			l.handle(events[:n])
			t1 := mono()
			if share, closed := l.meter.record(t0, t1); closed {
				l.sharePm.Store(int32(share * 1000))
				l.shareAt.Store(t1)
			}
		}
	})
	panic("h1: the event loop's epoll left the runtime's poller: " + fmt.Sprint(err))
}

// handle runs the streams of a batch of events.
func (l *Loop) handle(events []unix.EpollEvent) {
	for i := range events {
		ev := &events[i]
		if ev.Fd == kickSlot {
			rawDrain(l.kick)
			l.mu.Lock()
			fresh := l.fresh
			l.fresh = nil
			l.mu.Unlock()
			for _, st := range fresh {
				st.start()
			}
			continue
		}
		var st *loopStream
		if int(ev.Fd) < len(l.slots) {
			st = l.slots[ev.Fd]
		}
		if st == nil || st.gen != ev.Pad>>1 {
			continue // ended earlier in this batch
		}
		if ev.Pad&1 == sideClient {
			st.clientReady(ev.Events)
		} else {
			st.step()
		}
	}
}

// start registers st's sockets and runs its first turn.
func (st *loopStream) start() {
	l := st.l
	for int(st.slot) >= len(l.slots) {
		l.slots = append(l.slots, nil)
	}
	l.slots[st.slot] = st
	be := unix.EpollEvent{Events: unix.EPOLLIN, Fd: st.slot, Pad: st.gen<<1 | sideBackend}
	ce := unix.EpollEvent{Events: 0, Fd: st.slot, Pad: st.gen<<1 | sideClient} // errors and hang-ups only
	if err := rawEpollCtl(l.ep, unix.EPOLL_CTL_ADD, st.bfd, &be); err != nil {
		st.ps.rerr = os.NewSyscallError("epoll_ctl", err)
		st.end()
		return
	}
	if err := rawEpollCtl(l.ep, unix.EPOLL_CTL_ADD, st.cfd, &ce); err != nil {
		st.ps.rerr = os.NewSyscallError("epoll_ctl", err)
		st.end()
		return
	}
	st.step()
}

// step runs a turn of the stream's pump, unless the client holds it.
func (st *loopStream) step() {
	if st.ps.held || st.ending {
		return
	}
	if !st.pumpSafely() {
		st.ending = true
		if len(st.pending) == 0 || st.cerr != nil || st.panicked != nil {
			st.end()
		}
	}
}

// pumpSafely runs pump, carrying a panic of the sink back to the handler
// (as a panic on a handler's goroutine would have ended its request only).
func (st *loopStream) pumpSafely() (wait bool) {
	defer func() {
		if p := recover(); p != nil {
			st.panicked = p
			wait = false
		}
	}()
	return st.b.pump(st.bfd, st.s, &st.ps)
}

// write is the client connection's write while the loop has the stream
// (sconn.write): non-blocking; what the socket does not take is held, and
// the backend is no longer read until it is out.
func (st *loopStream) write(p []byte) error {
	if st.cerr != nil {
		return st.cerr
	}
	if len(st.pending) > 0 {
		st.pending = append(st.pending, p...)
		return nil
	}
	rest, err := st.send(p)
	if err != nil {
		st.cerr = err
		return err
	}
	if len(rest) > 0 {
		st.hold(rest)
	}
	return nil
}

// send writes p to the client socket until it is all out or the socket is
// full; it returns what is left.
func (st *loopStream) send(p []byte) ([]byte, error) {
	for len(p) > 0 {
		n, err := rawWrite(st.cfd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return p, nil
		case err != nil:
			return p, os.NewSyscallError("write", err)
		}
		p = p[n:]
	}
	return nil, nil
}

// interest sets what the loop waits for: the backend's bytes (reading),
// or the client socket's room for what is held.
func (st *loopStream) interest(reading bool) {
	be := unix.EpollEvent{Events: unix.EPOLLIN, Fd: st.slot, Pad: st.gen<<1 | sideBackend}
	ce := unix.EpollEvent{Events: 0, Fd: st.slot, Pad: st.gen<<1 | sideClient} // errors and hang-ups only
	if !reading {
		be.Events, ce.Events = 0, unix.EPOLLOUT
	}
	_ = rawEpollCtl(st.l.ep, unix.EPOLL_CTL_MOD, st.bfd, &be)
	_ = rawEpollCtl(st.l.ep, unix.EPOLL_CTL_MOD, st.cfd, &ce)
}

// hold keeps p for the client socket, which is waited for, and stops
// reading the backend meanwhile.
func (st *loopStream) hold(p []byte) {
	st.pending = append(st.pending[:0], p...)
	st.ps.held = true
	loopHeld.Add(1)
	st.interest(false)
}

// clientReady writes what is held once the client socket takes it, and
// ends a stream whose client is gone.
func (st *loopStream) clientReady(events uint32) {
	if len(st.pending) == 0 {
		if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			st.cerr = ErrClientGone
			st.ps.ferr = ErrClientGone
			st.end()
		}
		return
	}
	rest, err := st.send(st.pending)
	st.pending = rest
	switch {
	case err != nil:
		st.cerr, st.ps.ferr = err, err
		st.end()
		return
	case len(rest) > 0:
		return
	}
	st.pending = nil
	st.ps.held = false
	if st.ending {
		st.end()
		return
	}
	st.interest(true)
	st.step()
}

// ErrClientGone is Body.EachOnLoop's error when the client's socket hung
// up while the stream waited for the backend (a failed write is the
// Sink's own error).
var ErrClientGone = errors.New("h1: client connection closed")

// end takes st off the loop and hands it back to the handler.
func (st *loopStream) end() {
	l := st.l
	_ = rawEpollCtl(l.ep, unix.EPOLL_CTL_DEL, st.bfd, nil)
	_ = rawEpollCtl(l.ep, unix.EPOLL_CTL_DEL, st.cfd, nil)
	l.slots[st.slot] = nil
	l.mu.Lock()
	l.free = append(l.free, st.slot)
	l.mu.Unlock()
	close(st.done)
}

// dupSocket duplicates nc's socket descriptor (close-on-exec).
func dupSocket(nc net.Conn) (int, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1, errors.New("h1: not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) {
		fd, derr = rawDup(int(s))
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl", derr)
	}
	return fd, nil
}

// fileConn gives the socket fd back to the runtime as the net.Conn old
// was (now closed: its addresses are carried over). Unlike net.FileConn
// it makes no system call the scheduler is told of: no dup, no address
// lookups, and none of the options the socket kept (listen_linux.go).
func fileConn(fd int, old net.Conn) (net.Conn, error) {
	laddr, raddr := connAddrs(old)
	return newFdConn(fd, laddr, raddr)
}

// writeTail sends b on c.tail (see sconn.tail). When the socket cannot take
// it all now, the socket goes back to the runtime and the rest is written
// through it, as any write.
func (c *sconn) writeTail(b []byte) error {
	for len(b) > 0 {
		n, err := rawWrite(c.tail, b)
		switch {
		case n > 0:
			b = b[n:]
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			if err := c.untail(); err != nil {
				return err
			}
			_, err := c.nc.Write(b)
			return err
		default:
			c.closeTail()
			return err
		}
	}
	return nil
}

// setTail makes fd the connection's tail, unless the server closed the
// connection meanwhile: then fd is closed, and the answer's writes fail on
// the closed connection.
func (c *sconn) setTail(fd int) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.state.Load() == stateClosed {
		rawClose(fd)
		return
	}
	c.tail, c.hasTail = fd, true
}

// dropTail takes the tail from the connection (under the server's lock,
// against abortTail).
func (c *sconn) dropTail() (int, bool) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	fd, ok := c.tail, c.hasTail
	c.hasTail = false
	return fd, ok
}

// untail gives the tail back to the runtime as the connection's socket.
func (c *sconn) untail() error {
	fd, ok := c.dropTail()
	if !ok {
		return net.ErrClosed
	}
	nc, err := fileConn(fd, c.nc)
	if err != nil {
		return err
	}
	c.replaceConn(nc)
	return nil
}

// closeTail closes the tail.
func (c *sconn) closeTail() {
	if fd, ok := c.dropTail(); ok {
		rawClose(fd)
	}
}

// abortTail, under the server's lock (Server.Close), shuts the tail down:
// its writes fail from then on. Its owner closes it.
func (c *sconn) abortTail() {
	if c.hasTail {
		rawShutdown(c.tail, unix.SHUT_RDWR)
	}
}

// findResponse returns the h1 response under w's wrappers (Unwrap), or nil.
func findResponse(w http.ResponseWriter) *response {
	for range 8 {
		switch x := w.(type) {
		case *response:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// loopable reports whether the answer can go on a loop: a chunked stream
// whose head is out, with nothing read from its client beyond the request
// (a pipelined request stays on the goroutine path), on a socket.
func (w *response) loopable() bool {
	c := w.c
	if !w.headSent || !w.chunked || w.err != nil || w.req.Method == http.MethodHead || c.loop != nil {
		return false
	}
	if c.br != nil && c.br.Buffered() > 0 {
		return false
	}
	c.mu.Lock()
	idle := c.wstate.Load() == watchOff && !c.watching
	c.mu.Unlock()
	if !idle {
		return false
	}
	_, ok := c.nc.(syscall.Conn)
	return ok
}

// LoopStats returns how many streams the event loops have carried, and how
// many times one held a stream for a client slower than its backend.
func LoopStats() (streams, held int64) { return loopCarried.Load(), loopHeld.Load() }
