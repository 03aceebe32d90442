package h1

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Server serves HTTP/1.0 and HTTP/1.1 to an http.Handler, for the
// gateway's data plane. Our own: net/http's server costs the gateway more
// CPU per short request than the whole proxy path of HAProxy (BENCHMARKS.md,
// "The floor of each HTTP engine"): every request starts a background
// read of the client connection, to notice the client leaving, and ends it
// by moving the connection's read deadline; and it keeps a 4 KiB read and a
// 4 KiB write buffer and that second goroutine for as long as an answer
// streams. fasthttp, the engine made for this, does not serve an
// http.Handler (the gateway's tenant, usage, CORS and fair-share handlers
// are written against net/http). So this server runs one goroutine per
// connection, the handler's, and:
//
//   - watches the client connection for the client leaving only for a
//     request still waiting for its answer's head after WatchAfter (a
//     non-streamed generation, or a request queued for a backend), and
//     stops watching when the head goes out; a client that leaves a stream
//     is noticed by the next write, which fails;
//   - writes an answer the handler finishes without flushing in one write
//     (head, Content-Length and body), and each flush of a stream as one
//     chunk in one write, holding a write buffer only while it writes;
//   - sends an answer's last bytes from inside the read that then waits
//     for the connection's next request (sock.hold), so that the wait
//     starts without a receive that finds nothing; a request pipelined
//     into that window is found by the sweep (see Server.sweep);
//   - holds a read buffer only while it reads a request: a connection
//     waiting for its answer's tokens holds none.
//
// It reuses, for each request of a kept-alive connection, what the last
// one was made of besides its strings: the *http.Request, its Header map
// (and the array of its values), URL and Body, the ResponseWriter and its
// Header map. So a handler must not keep r, r.Header, r.URL, r.Body,
// r.Context() or w after it returns, nor leave anything that uses them
// running (a goroutine, a context.AfterFunc, a context derived from
// r.Context() that it does not cancel), as with fasthttp's RequestCtx:
// copy what must outlive the request. The strings (the target, the header
// values) are each request's own and may be kept. r.Context() is the
// connection's: it is cancelled when the client leaves or the server
// closes (either ends the connection), not when the handler returns.
//
// What it leaves out, by design: HTTP/2 and TLS (serve those with
// net/http), Hijack and protocol upgrades, request trailers (read and
// dropped), and transfer codings other than chunked. It is stricter than
// net/http where leniency lets requests be smuggled (see headReader.read).
type Server struct {
	// Handler serves the requests.
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request's head; 0 means
	// IdleTimeout.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long (to
	// within a round of the sweep: an eighth of it, or half of
	// WatchAfter if that is shorter); 0 means none.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's head; 0 means
	// http.DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// WatchAfter is how long a request waits for its answer's head
	// before the server watches its connection for the client leaving
	// (which cancels the request's context); 0 means DefaultWatchAfter,
	// below 0 never.
	WatchAfter time.Duration
	// ErrorLog logs handler panics; nil means log.Default().
	ErrorLog *log.Logger

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*sconn]struct{}
	shutdown  atomic.Bool
	sweeping  bool         // a sweep runs (under mu)
	ticks     atomic.Int64 // the sweep's rounds so far
	// NoLoops serves each connection on a goroutine of its own. By
	// default a connection that is a socket is served as a coroutine of a
	// serve loop (serveloop_linux.go; Linux only), and a handler that
	// waits for anything but the request's sockets calls Detach first.
	NoLoops bool
}

// DefaultWatchAfter is Server.WatchAfter's default: short answers never
// pay for a watch; a client that leaves a long one is noticed within about
// one and a half times this (the sweep's rounds are half of it apart).
const DefaultWatchAfter = 250 * time.Millisecond

// maxDrain is how much of a request body the handler left unread is read
// and dropped to keep the connection (net/http's figure).
const maxDrain = 256 << 10

// Serve accepts connections on ln and serves each on a goroutine of its
// own. It returns http.ErrServerClosed after Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln) {
		return http.ErrServerClosed
	}
	defer s.untrack(ln)
	s.loosen(ln)
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutdown.Load() {
				return http.ErrServerClosed
			}
			if acceptWillRecover(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay) // back off, as net/http does, when accept fails for want of descriptors
				continue
			}
			return err
		}
		delay = 0
		c := newSconn(s, nc)
		if !s.add(c) {
			_ = nc.Close()
			return http.ErrServerClosed
		}
		if !s.serveOnLoop(c) {
			c.tighten()
			go c.serve()
		}
	}
}

// acceptWillRecover reports whether an accept failed for a reason that
// passes: the process or the system out of descriptors or memory for the
// socket (the connection waits in the listener's queue meanwhile), or a
// timeout. net/http retries on these (net.Error's Temporary); returning
// would stop the server for good, and with it every stream it carries.
func acceptWillRecover(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (s *Server) track(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown.Load() {
		return false
	}
	if s.listeners == nil {
		s.listeners = map[net.Listener]struct{}{}
	}
	s.listeners[ln] = struct{}{}
	return true
}

func (s *Server) untrack(ln net.Listener) {
	s.mu.Lock()
	delete(s.listeners, ln)
	s.mu.Unlock()
}

func (s *Server) add(c *sconn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = map[*sconn]struct{}{}
	}
	s.conns[c] = struct{}{}
	if !s.sweeping {
		// Always on sockets: it checks the waits that began without a
		// receive (sock.check).
		if period, watchN, idleN := s.sweepPeriod(); watchN > 0 || idleN > 0 || rawSockets {
			s.sweeping = true
			go s.sweep(period, watchN, idleN)
		}
	}
	return true
}

// sweepPeriod returns how far apart the sweep's rounds are, and after how
// many rounds a request's watch starts and an idle connection closes (0:
// never): half of WatchAfter, an eighth of IdleTimeout, from 1 ms to 1 s.
func (s *Server) sweepPeriod() (period time.Duration, watchN, idleN int64) {
	period = time.Second
	w := s.WatchAfter
	if w == 0 {
		w = DefaultWatchAfter
	}
	if w > 0 {
		period = min(period, w/2)
	}
	if s.IdleTimeout > 0 {
		period = min(period, s.IdleTimeout/8)
	}
	period = max(period, time.Millisecond)
	rounds := func(d time.Duration) int64 { return int64((d + period - 1) / period) }
	if w > 0 {
		watchN = rounds(w)
	}
	if s.IdleTimeout > 0 {
		idleN = rounds(s.IdleTimeout)
	}
	return period, watchN, idleN
}

// sweep, while the server has connections, starts the watch of each
// request that has waited watchN rounds for its answer's head, closes
// each connection idle for idleN rounds, and checks once each wait for a
// next request that began without a receive and has lasted two rounds
// (sock.check): a pipelined request or a FIN that came before that wait
// began is answered within three rounds instead of never. One sweep for the whole server
// instead of a timer and two deadlines moved per request: those cost 3-5 %
// of the gateway's CPU per short request (BENCHMARKS.md, issue 19 session
// 19). A request or an idle spell that starts within a round is counted
// from that round's start, so each waits between n and n+1 rounds: never
// less than WatchAfter or IdleTimeout, at most a round more.
func (s *Server) sweep(period time.Duration, watchN, idleN int64) {
	t := time.NewTicker(period)
	defer t.Stop()
	for range t.C {
		now := s.ticks.Add(1)
		s.mu.Lock()
		if len(s.conns) == 0 {
			s.sweeping = false
			s.mu.Unlock()
			return
		}
		for c := range s.conns {
			if idleN > 0 && c.state.Load() == stateIdle && now-c.idleSince.Load() > idleN &&
				c.state.CompareAndSwap(stateIdle, stateClosed) {
				_ = c.nc.Close()
				continue
			}
			if c.state.Load() == stateIdle && now-c.idleSince.Load() >= 2 && !c.onLoop.Load() {
				// A wait that has lasted a whole round: one whose
				// request is arriving as it is checked would be taken
				// for a pipelining client's, and its connection would
				// hold nothing from then on.
				c.sk.check()
			}
			if watchN > 0 && c.wstate.Load() == watchArmed && now-c.armedAt.Load() > watchN &&
				c.wstate.CompareAndSwap(watchArmed, watchStarting) {
				go c.watchClient()
			}
		}
		s.mu.Unlock()
	}
}

func (s *Server) remove(c *sconn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Server) closeListeners() {
	for ln := range s.listeners {
		_ = ln.Close()
	}
}

// Shutdown stops accepting, closes idle connections, and waits for the
// answers under way to end (each connection closes after its answer). If
// ctx ends first it returns ctx's error; Close then ends what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdown.Store(true)
	s.mu.Lock()
	s.closeListeners()
	s.mu.Unlock()
	wait := time.Millisecond
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		if s.closeIdle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			// Polled, as net/http does: a connection that ends its answer
			// goes idle and is closed at the next round.
			wait = min(2*wait, 100*time.Millisecond)
			t.Reset(wait)
		}
	}
}

// closeIdle closes the idle connections; true if none is left serving.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	done := true
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			_ = c.nc.Close()
		}
		if c.state.Load() != stateClosed {
			done = false
		}
	}
	return done
}

// Close closes the listeners and every connection, and cancels the
// requests under way.
func (s *Server) Close() error {
	s.shutdown.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeListeners()
	for c := range s.conns {
		c.state.Store(stateClosed)
		_ = c.nc.Close()
		c.abortTail()
		c.cancel()
	}
	return nil
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// Connection states.
const (
	stateIdle   int32 = iota // between requests: Shutdown may close it
	stateActive              // reading or answering a request
	stateClosed              // closed by Shutdown, Close or the idle timeout
)

// The states of a request's watch (sconn.wstate).
const (
	watchOff      int32 = iota // no request waits for its answer's head
	watchArmed                 // one does, since the round armedAt
	watchStarting              // the sweep started the watch (watchClient)
)

// sconn is one client connection.
type sconn struct {
	s      *Server
	nc     net.Conn
	sk     *sock         // nc's reads and writes (sock.go)
	br     *bufio.Reader // nil while no request is read
	hr     headReader
	remote string
	state  atomic.Int32

	// What each request of the connection is served with, reused (see
	// Server): ctx is its requests' context, cancelled (cancel) when the
	// client leaves or the server closes; blank is a request with only ctx
	// set, that each request starts as.
	ctx   *connCtx
	blank http.Request
	req   http.Request
	w     response
	body  body

	// The watch (see sweep): wstate moves from watchOff to watchArmed on
	// the handler's goroutine (arm), to watchStarting on the sweep's, and
	// back to watchOff on the handler's (disarm, under mu unless it is
	// still watchArmed). idleSince is the round in which the connection
	// last went idle.
	wstate    atomic.Int32
	armedAt   atomic.Int64
	idleSince atomic.Int64

	mu       sync.Mutex
	cond     sync.Cond
	watching bool // the watch is reading the connection
	aborting bool // the watch is being stopped
	curBody  atomic.Pointer[body]
	linger   bool // closing with request bytes unread

	loop *loopStream // the answer's stream while an event loop carries it
	// After a stream on an event loop, when the connection closes after the
	// answer: the client socket's own descriptor, not given back to the
	// runtime (hasTail), on which the answer's last bytes go out (writeTail).
	tail    int
	hasTail bool

	// holdLast is set while the answer's last bytes may be held for the
	// next read (sock.hold).
	holdLast bool

	// onLoop is set while the connection is served on a serve loop
	// (serveloop_linux.go).
	onLoop atomic.Bool
}

// closesAfter reports whether the connection closes once w's answer is
// sent (as serveOne decides it, from what is known before the end).
func (c *sconn) closesAfter(w *response) bool {
	return w.req.Close || w.closeAfter || c.s.shutdown.Load()
}

// replaceConn puts nc in place of the connection's socket, given back by
// an event loop; a connection the server closed meanwhile is closed.
func (c *sconn) replaceConn(nc net.Conn) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.nc = nc
	c.sk.reset(nc)
	if c.br != nil {
		c.br.Reset(c.sk)
	}
	if c.state.Load() == stateClosed {
		_ = nc.Close()
	}
}

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bufSize) }}

func newSconn(s *Server, nc net.Conn) *sconn {
	c := &sconn{s: s, nc: nc, sk: newSock(nc)}
	c.idleSince.Store(s.ticks.Load())
	c.sk.onSent = c.idle
	c.ctx = newConnCtx()
	c.blank = *c.blank.WithContext(c.ctx)
	return c
}

// idle marks the connection idle once its answer is out; it runs on the
// connection's goroutine, in the read that sends the answer's held bytes.
func (c *sconn) idle() {
	c.idleSince.Store(c.s.ticks.Load())
	c.state.CompareAndSwap(stateActive, stateIdle)
}

// cancel ends the context of the connection's requests.
func (c *sconn) cancel() { c.ctx.end() }

// connCtx is the context of a connection's requests, ended when the client
// leaves or the server closes. It is also an Abortable: what a handler
// hands it (a proxy's attempts) is closed when it ends, with no allocation
// per request, where a context.AfterFunc on it costs three.
type connCtx struct {
	context.Context
	cancelFn context.CancelFunc

	mu      sync.Mutex
	ended   bool
	watched []io.Closer

	co atomic.Pointer[coro] // the coroutine serving the connection on its serve loop
}

type coroKey struct{}

// Value implements context.Context: a handler's contexts made from a
// request's find the connection's coroutine (coroOf).
func (x *connCtx) Value(k any) any {
	if _, ok := k.(coroKey); ok {
		return x.co.Load()
	}
	return x.Context.Value(k)
}

func newConnCtx() *connCtx {
	x := &connCtx{}
	x.Context, x.cancelFn = context.WithCancel(context.Background())
	return x
}

func (x *connCtx) end() {
	x.cancelFn()
	x.mu.Lock()
	x.ended = true
	w := x.watched
	x.watched = nil
	x.mu.Unlock()
	for _, c := range w {
		_ = c.Close()
	}
}

// Watch implements Abortable.
func (x *connCtx) Watch(c io.Closer) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ended {
		return false
	}
	x.watched = append(x.watched, c)
	return true
}

// Unwatch implements Abortable.
func (x *connCtx) Unwatch(c io.Closer) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	var found bool
	if x.watched, found = cutOne(x.watched, c); found {
		return true
	}
	return !x.ended
}

// cutOne removes the first v from s, moving the last element into its place
// (order is not kept), and reports whether v was there.
func cutOne[T comparable](s []T, v T) ([]T, bool) {
	for i, e := range s {
		if e == v {
			last := len(s) - 1
			s[i] = s[last]
			var zero T
			s[last] = zero
			return s[:last], true
		}
	}
	return s, false
}

func (c *sconn) serve() {
	defer c.close()
	c.remote = c.nc.RemoteAddr().String()
	c.cond.L = &c.mu
	s := c.s
	max := s.MaxHeaderBytes
	if max <= 0 {
		max = http.DefaultMaxHeaderBytes
	}
	for {
		if c.br == nil {
			c.br = readerPool.Get().(*bufio.Reader)
			c.br.Reset(c.sk)
		}
		if c.sk.holding() && c.br.Buffered() > 0 {
			// The next request is here already: the client pipelines,
			// and the answer goes out before it is read.
			c.sk.noHold.Store(true)
			if c.sk.flush() != nil {
				return
			}
			c.idle()
		}
		// Idle, the connection is closed by the sweep after IdleTimeout.
		deadline := false
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return // closed by Shutdown
		}
		if d := cmp.Or(s.ReadHeaderTimeout, s.IdleTimeout); d > 0 && !headComplete(buffered(c.br)) {
			// A head already whole in the buffer is read without a
			// system call: it needs no deadline. Without a
			// ReadHeaderTimeout, the idle timeout bounds a head that
			// stalls (the sweep closes only idle connections).
			_ = c.nc.SetReadDeadline(time.Now().Add(d))
			deadline = true
		}
		c.req = c.blank
		if err := c.hr.read(c.br, max, &c.req); err != nil {
			c.refuse(err)
			return
		}
		if deadline {
			_ = c.nc.SetReadDeadline(time.Time{})
		}
		if !c.serveOne() || s.shutdown.Load() {
			return
		}
		if !c.sk.holding() {
			// Else idle once the held answer is out (c.idle, from the
			// read that sends it).
			c.idleSince.Store(s.ticks.Load())
			c.state.Store(stateIdle)
		}
	}
}

func (c *sconn) close() {
	// Ends whatever a handler left running on the context, against the
	// contract.
	defer c.cancel()
	_ = c.sk.flush() // an answer held for the next read
	c.disarm()
	if c.hasTail {
		if !c.linger {
			c.closeTail()
		} else if err := c.untail(); err != nil {
			c.linger = false
		}
	}
	if c.linger {
		c.lingerClose()
	}
	_ = c.nc.Close()
	c.releaseReader()
	c.s.remove(c)
}

func (c *sconn) releaseReader() {
	if c.br != nil {
		c.br.Reset(nil)
		readerPool.Put(c.br)
		c.br = nil
	}
}

// serveOne serves the request read into c.req; false if the connection
// is to be closed.
func (c *sconn) serveOne() bool {
	if c.sk.holding() {
		// Not reached (serve sends a held answer before it reads a
		// request from the buffer), and must not be: a read while the
		// request is served (its body, the watch) would send it and mark
		// the connection idle.
		_ = c.sk.flush()
	}
	req, w := &c.req, &c.w
	req.RemoteAddr = c.remote
	var b *body
	if req.ContentLength != 0 {
		b = &c.body
		b.reset(c, w, req)
		req.Body = b
	}
	w.reset(c, req, b)
	c.curBody.Store(b)
	c.arm()
	ok := c.handle(w, req)
	c.disarm()
	if ok {
		c.holdLast = true
		w.finish()
		c.holdLast = false
	}
	if w.head != nil {
		putBuf(w.head)
		w.head = nil
	}
	w.release()
	c.curBody.Store(nil)
	if b != nil && !b.done.Load() && w.err == nil {
		// A body the handler answered without reading, not drained: the
		// client may still be sending it.
		c.linger = true
		return false
	}
	// A cancelled context cannot serve the next request: the client left.
	return ok && !w.closeAfter && w.err == nil && !req.Close && c.ctx.Err() == nil
}

// handle runs the handler; false if it panicked.
func (c *sconn) handle(w *response, req *http.Request) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			ok = false
			if p != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.logf("h1: panic serving %s: %v\n%s", c.remote, p, buf)
			}
		}
	}()
	c.s.Handler.ServeHTTP(w, req)
	return true
}

// beforeHead runs when the answer's head is about to go out: the watch
// ends (a write notices a client that leaves from now on), the rest of a
// body the handler did not read is dropped, and the read buffer is let go
// if it holds nothing.
func (c *sconn) beforeHead(w *response) {
	c.disarm()
	if b := w.body; b != nil && !b.done.Load() {
		if b.expect && !b.continued {
			// The client waits for 100 Continue before sending the body,
			// and will not get it: it may or may not send the body now.
			w.closeAfter = true
		} else if n, _ := io.CopyN(io.Discard, rawBody{b}, maxDrain+1); n > maxDrain || !b.done.Load() {
			w.closeAfter = true
		}
	}
	if b := w.body; b != nil {
		b.answered = true
	}
	if w.req.Close || c.s.shutdown.Load() {
		w.closeAfter = true
	}
	if c.br != nil && c.br.Buffered() == 0 && (w.body == nil || w.body.done.Load()) {
		c.releaseReader()
	}
}

// lingerTime is how long a connection closed with request bytes unread
// reads and drops them first (net/http waits as long).
const lingerTime = 500 * time.Millisecond

// lingerClose ends the connection's sending side and reads what the client
// still sends, for up to lingerTime: closed at once, the kernel would reset
// the connection, and a client still writing its body would lose the
// answer (a 413 to a large upload) before reading it.
func (c *sconn) lingerClose() {
	tc, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || tc.CloseWrite() != nil {
		return
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(lingerTime))
	if c.br != nil {
		_, _ = c.br.Discard(c.br.Buffered())
	}
	buf := getBuf()
	for {
		if _, err := c.nc.Read(*buf); err != nil {
			break
		}
	}
	putBuf(buf)
}

// write sends b for w; a failure is w's error from then on.
func (c *sconn) write(w *response, b []byte) {
	if w.err != nil {
		return
	}
	if c.loop != nil {
		if err := c.loop.write(b); err != nil {
			w.err, w.closeAfter = err, true
		}
		return
	}
	if c.hasTail {
		if err := c.writeTail(b); err != nil {
			w.err, w.closeAfter = err, true
		}
		return
	}
	if c.holdLast && c.sk.hold(b) {
		return
	}
	if _, err := c.sk.Write(b); err != nil {
		w.err, w.closeAfter = err, true
	}
}

func (c *sconn) writeBuffers(w *response, bufs *net.Buffers) {
	if w.err != nil {
		return
	}
	if c.loop != nil || c.hasTail {
		for _, b := range *bufs {
			c.write(w, b)
		}
		return
	}
	if _, err := c.sk.writeBuffers(bufs); err != nil {
		w.err, w.closeAfter = err, true
	}
}

// refuse answers a request head that cannot be served, then the
// connection is closed. A head that did not arrive whole is not answered.
func (c *sconn) refuse(err error) {
	var he *headError
	if !errors.As(err, &he) {
		return
	}
	text := strconv.Itoa(he.status) + " " + http.StatusText(he.status)
	msg := text + ": " + he.msg
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(c.nc, "HTTP/1.1 "+text+"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: "+
		strconv.Itoa(len(msg))+"\r\n\r\n"+msg)
}

// arm starts the wait after which the sweep watches the connection.
func (c *sconn) arm() {
	if c.s.WatchAfter < 0 || c.onLoop.Load() {
		// On a serve loop the loop watches (sconn.peek).
		return
	}
	c.armedAt.Store(c.s.ticks.Load())
	c.wstate.Store(watchArmed)
}

// disarm ends the watch, stopping a read under way.
func (c *sconn) disarm() {
	if c.wstate.CompareAndSwap(watchArmed, watchOff) || c.wstate.Load() == watchOff {
		return // the watch had not started: no lock taken
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watching {
		c.aborting = true
		_ = c.nc.SetReadDeadline(aLongTimeAgo)
		for c.watching {
			c.cond.Wait()
		}
		c.aborting = false
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	c.wstate.Store(watchOff)
}

var aLongTimeAgo = time.Unix(1, 0)

// watchClient, on a goroutine of the sweep's, reads the connection until
// the client sends something (the next request, pipelined), leaves (which
// cancels the request), or disarm stops it. A request whose body is still
// being read is armed again, for a later round: its reads are the
// handler's. A call the sweep started for the last request that gets the
// lock only after the next one was armed finds the watch armed and
// returns, or, if the sweep started it again meanwhile, watches for the
// next request; watching keeps two calls from reading at once.
func (c *sconn) watchClient() {
	c.mu.Lock()
	if c.wstate.Load() != watchStarting || c.watching || c.br == nil {
		c.mu.Unlock()
		return
	}
	// The response's body is read on the handler's goroutine; done is
	// atomic.
	if !c.bodyDone() {
		c.armedAt.Store(c.s.ticks.Load())
		c.wstate.CompareAndSwap(watchStarting, watchArmed)
		c.mu.Unlock()
		return
	}
	c.watching = true
	br := c.br
	c.mu.Unlock()
	_, err := br.Peek(1)
	c.mu.Lock()
	c.watching = false
	if err != nil && !c.aborting {
		c.cancel() // the client left, or its connection failed
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

// bodyDone reports whether the request under way has no body left to
// read. Called with c.mu held.
func (c *sconn) bodyDone() bool {
	b := c.curBody.Load()
	return b == nil || b.done.Load()
}
