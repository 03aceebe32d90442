package h1

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// sock reads and writes a connection's socket with the system calls the
// scheduler is not told of (rawRead, rawWrite, rawWritev: sock_linux.go),
// through its RawConn, so that the runtime's poller still does the waiting
// and deadlines still hold. On a short request each of these calls is most
// of what a proxy does between two waits, and each one the scheduler is
// told of costs two scheduler turns and, when the kernel takes a while
// (loopback writes run the receiver's TCP), a hand-off of the P to another
// thread (BENCHMARKS.md, issue 19, tenth increment). A connection that is
// not a socket (a test's pipe, TLS) and every system but Linux go through
// the net.Conn.
//
// A sock is used by one reader and one writer at a time (the RawConn's
// locks order them); its fields hold one call's state so that the
// functions given to the RawConn are made once per connection.
type sock struct {
	nc  net.Conn
	rc  syscall.RawConn // nil: not a socket
	raw bool            // reads and writes through rc (rawSockets)

	rp   []byte
	rn   int
	rerr error
	rfn  func(fd uintptr) bool

	// An answer's last bytes, held (hold) to be sent in the first turn of
	// the next Read, and what that Read needs (see hold).
	held   *[]byte // from bufPool; nil: nothing held
	pend   []byte  // what of *held is still to send
	perr   error   // the send's failure
	pfn    func(fd uintptr) bool
	onSent func()       // run once the held bytes are out, before the wait
	blind  atomic.Int32 // blindOff, blindWaiting, blindChecked, blindKicked
	kickMu sync.Mutex   // orders a kick's deadline before the waiter's reset of it
	noHold atomic.Bool  // the client pipelines: hold nothing

	wp   []byte
	iov  [maxIovecs]syscall.Iovec
	wv   []syscall.Iovec // iov's part in use
	wn   int
	werr error
	wfn  func(fd uintptr) bool
	wvfn func(fd uintptr) bool
}

func newSock(nc net.Conn) *sock {
	s := &sock{}
	s.reset(nc)
	return s
}

// reset makes nc the socket, for a connection an event loop gave back.
func (s *sock) reset(nc net.Conn) {
	s.nc, s.rc, s.raw = nc, nil, false
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			s.rc, s.raw = rc, rawSockets
			if s.rfn == nil {
				s.rfn, s.wfn, s.wvfn, s.pfn = s.read, s.write, s.writev, s.sendRead
			}
		}
	}
}

// The states of a Read that waits without having received first
// (sock.blind).
const (
	blindOff     int32 = iota // no such wait
	blindWaiting              // waiting, not yet checked (check)
	blindChecked              // checked: nothing had been missed
	blindKicked               // check found bytes missed: the wait is ended
)

// hold keeps b, an answer's last bytes, to be sent by the next Read, in
// the first turn of the function it gives RawConn.Read: after the poller
// has reset the socket's readiness, so that the wait for the next request
// starts without a receive that can only find nothing. A client that waits
// for an answer before sending its next request (every client but one
// that pipelines) cannot send before those bytes are out, so the
// readiness its request brings is never lost; that receive (EAGAIN) was
// the only system call per short request HAProxy does not make
// (BENCHMARKS.md, issue 19, session 22). A request pipelined behind the
// current one and arriving before that reset loses its readiness: check,
// called by the server's sweep for a wait that has lasted a round, finds
// it and ends the wait, and the connection holds nothing from then on.
// false if b is not held (not a socket, a pipelining client, too large):
// the caller writes it.
func (s *sock) hold(b []byte) bool {
	if !s.raw || s.noHold.Load() || len(s.pend)+len(b) > bufSize {
		return false
	}
	if s.held == nil {
		s.held = getBuf()
		*s.held = (*s.held)[:0]
	}
	*s.held = append(*s.held, b...)
	s.pend = *s.held
	return true
}

// holding reports whether bytes are held for the next Read.
func (s *sock) holding() bool { return len(s.pend) > 0 }

// flush sends the held bytes now, for a write that must follow them or a
// connection about to close.
func (s *sock) flush() error {
	if len(s.pend) == 0 {
		return nil
	}
	p := s.pend
	s.pend = nil
	_, err := s.Write(p)
	s.dropHeld()
	return err
}

func (s *sock) dropHeld() {
	s.pend = nil
	if s.held != nil {
		putBuf(s.held)
		s.held = nil
	}
}

// sendRead is the function Read gives RawConn.Read while bytes are held:
// its first turn sends them (a rest the socket does not take ends the
// call, for Read to write), runs onSent and asks to wait; the next turns
// are read's.
func (s *sock) sendRead(fd uintptr) bool {
	if len(s.pend) == 0 {
		return s.read(fd)
	}
	if stop, err := sendTurn(fd, &s.pend); stop {
		s.perr = err
		return true
	}
	s.dropHeld()
	if s.onSent != nil {
		s.onSent()
	}
	s.blind.Store(blindWaiting)
	return false
}

// sendTurn is the first turn of a function given to RawConn.Read that
// sends *p before it waits (the h1 client's request, the server's held
// answer): it sends what the socket takes at once and leaves the rest in
// *p (nil once all is sent). stop is true when the turn must end the
// call: on a failure (err), or with a rest the caller writes.
func sendTurn(fd uintptr, p *[]byte) (stop bool, err error) {
	n, again, err := send(int(fd), *p)
	*p = (*p)[n:]
	if err != nil || again {
		return true, err
	}
	*p = nil
	return false, nil
}

// sendThenRead is Read with bytes held (see hold).
func (s *sock) sendThenRead(p []byte) (int, error) {
	s.rp, s.rn, s.rerr, s.perr = p, 0, nil, nil
	err := s.rc.Read(s.pfn)
	if s.blind.Swap(blindOff) == blindKicked {
		// check set a deadline in the past to end the wait; it is taken
		// back once check is done with it.
		s.kickMu.Lock()
		_ = s.nc.SetReadDeadline(time.Time{})
		s.kickMu.Unlock()
		s.noHold.Store(true)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.rp = nil
			return s.Read(p) // what check found
		}
	}
	s.rp = nil
	switch {
	case s.perr != nil:
		s.dropHeld()
		return 0, s.perr
	case err != nil:
		s.dropHeld()
		return 0, renameOp(err, "read")
	case len(s.pend) > 0: // the socket took part of the held bytes
		if err := s.flush(); err != nil {
			return 0, err
		}
		if s.onSent != nil {
			s.onSent()
		}
		return s.Read(p)
	}
	return s.rn, s.rerr
}

// check looks, without blocking, for bytes a wait that began without a
// receive (see hold) has missed: bytes (or the end, or a failure) found
// end the wait, which then receives them. Nothing found, the wait is
// sound: any byte from now on makes the socket readable. Called by the
// server's sweep, on another goroutine than the reader's.
func (s *sock) check() {
	if s.blind.Load() != blindWaiting {
		return
	}
	missed := false
	_ = s.rc.Control(func(fd uintptr) {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		missed = err != syscall.EAGAIN
	})
	s.kickMu.Lock()
	defer s.kickMu.Unlock()
	if !missed {
		s.blind.CompareAndSwap(blindWaiting, blindChecked)
		return
	}
	if s.blind.CompareAndSwap(blindWaiting, blindKicked) {
		_ = s.nc.SetReadDeadline(time.Now())
	}
}

// Read is one receive into p, waiting until the socket is readable.
func (s *sock) Read(p []byte) (int, error) {
	if len(s.pend) > 0 {
		if s.raw && len(p) > 0 {
			return s.sendThenRead(p)
		}
		if err := s.flush(); err != nil {
			return 0, err
		}
	}
	if !s.raw || len(p) == 0 {
		return s.nc.Read(p)
	}
	s.rp, s.rn, s.rerr = p, 0, nil
	err := s.rc.Read(s.rfn)
	s.rp = nil
	if err != nil {
		return 0, renameOp(err, "read")
	}
	return s.rn, s.rerr
}

func (s *sock) read(fd uintptr) bool {
	n, again, err := recv(int(fd), s.rp)
	if again {
		return false
	}
	s.rn, s.rerr = n, err
	return true
}

// recv is one receive into p on a non-blocking socket: the bytes, or the
// failure as net names it (io.EOF at the end), or again when nothing has
// arrived (the caller then waits until the socket is readable).
func recv(fd int, p []byte) (n int, again bool, err error) {
	for {
		n, err := rawRead(fd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return 0, true, nil
		case err != nil:
			return 0, false, wrapSyscall("read", err)
		case n == 0:
			return 0, false, io.EOF
		}
		return n, false, nil
	}
}

// Write sends all of p, waiting while the socket's buffer is full.
func (s *sock) Write(p []byte) (int, error) {
	if err := s.flush(); err != nil {
		return 0, err
	}
	if !s.raw || len(p) == 0 {
		return s.nc.Write(p)
	}
	s.wp, s.wn, s.werr = p, 0, nil
	err := s.rc.Write(s.wfn)
	s.wp = nil
	if err != nil {
		return s.wn, renameOp(err, "write")
	}
	return s.wn, s.werr
}

func (s *sock) write(fd uintptr) bool {
	n, again, err := send(int(fd), s.wp)
	s.wn += n
	s.wp = s.wp[n:]
	if again {
		return false
	}
	s.werr = err
	return true
}

// send writes p on a non-blocking socket until all of it is sent, the
// socket's buffer is full (again: the caller waits until it is writable,
// or hands the rest on), or a send fails (the failure as net names it).
// n is how much was sent.
func send(fd int, p []byte) (n int, again bool, err error) {
	for n < len(p) {
		m, err := rawWrite(fd, p[n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return n, true, nil
		case err != nil:
			return n, false, wrapSyscall("write", err)
		}
		n += m
	}
	return n, false, nil
}

// maxIovecs is how many buffers one writev takes here; the rest go in the
// next call.
const maxIovecs = 16

// writeBuffers sends all of bufs, in as few writev calls as the socket
// takes, consuming bufs as net.Buffers.WriteTo does.
func (s *sock) writeBuffers(bufs *net.Buffers) (int64, error) {
	if err := s.flush(); err != nil {
		return 0, err
	}
	if !s.raw {
		return bufs.WriteTo(s.nc)
	}
	iov := &s.iov
	var total int64
	for {
		for len(*bufs) > 0 && len((*bufs)[0]) == 0 {
			*bufs = (*bufs)[1:]
		}
		if len(*bufs) == 0 {
			return total, nil
		}
		k := 0
		for _, b := range *bufs {
			if k == len(iov) {
				break
			}
			if len(b) > 0 {
				iov[k].Base = &b[0]
				iov[k].SetLen(len(b))
				k++
			}
		}
		s.wv, s.wn, s.werr = iov[:k], 0, nil
		err := s.rc.Write(s.wvfn)
		s.wv = nil
		clear(iov[:k]) // holds no buffer after the call
		total += int64(s.wn)
		consume(bufs, s.wn)
		if err != nil {
			return total, renameOp(err, "write")
		}
		if s.werr != nil {
			return total, s.werr
		}
	}
}

// consume drops the first n bytes of bufs.
func consume(bufs *net.Buffers, n int) {
	for n > 0 && len(*bufs) > 0 {
		if n < len((*bufs)[0]) {
			(*bufs)[0] = (*bufs)[0][n:]
			return
		}
		n -= len((*bufs)[0])
		*bufs = (*bufs)[1:]
	}
}

func (s *sock) writev(fd uintptr) bool {
	for {
		n, err := rawWritev(int(fd), s.wv)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false
		case err != nil:
			s.werr = wrapSyscall("writev", err)
		default:
			s.wn = n
		}
		return true
	}
}

// renameOp names a RawConn's failure (a deadline, a closed connection) as
// the net.Conn's own call would: "read", not "raw-read".
func renameOp(err error, op string) error {
	var oe *net.OpError
	if errors.As(err, &oe) && (oe.Op == "raw-read" || oe.Op == "raw-write") {
		c := *oe
		c.Op = op
		return &c
	}
	return err
}
