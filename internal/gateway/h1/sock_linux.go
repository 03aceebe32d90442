package h1

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawSockets: sock reads and writes with the system calls below.
const rawSockets = true

// rawRead, rawWrite and rawWritev are recv(2), send(2) and writev(2) on a
// non-blocking socket without telling the scheduler: they never block, and
// a system call the scheduler is told of lets sysmon hand the goroutine's P
// to another thread when the kernel takes more than 20 µs over it (a write
// on loopback runs the receiver's side of TCP too, and wakes it), which
// then keeps sysmon waking every 20 µs and moves goroutines between
// threads. recvfrom and sendto rather than read and write: they skip the
// file layer (its position lock and checks), as nginx's recv and writev
// do; MSG_NOSIGNAL: a peer gone fails the send with EPIPE and raises no
// SIGPIPE (writev raises none on a socket the runtime owns: Go ignores
// SIGPIPE on descriptors other than 1 and 2).
func rawRead(fd int, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)), 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func rawWrite(fd int, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)), unix.MSG_NOSIGNAL, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func rawWritev(fd int, iov []syscall.Iovec) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// rawEpollWait is epoll_wait(2) that returns at once (timeout 0), without
// telling the scheduler: it never blocks, and a system call the scheduler
// is told of wakes sysmon when it sleeps because every P was idle. A
// stream's token wakes the process from idle, so on the event loop that
// was a futex wake, sysmon's turn and its sleep again per token
// (BENCHMARKS.md, issue 19, tenth increment). epoll_pwait with no signal
// mask: the system call both amd64 and arm64 have.
func rawEpollWait(ep int, events []unix.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(unsafe.SliceData(events))), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// The other system calls of the event loop and of a stream's hand-over to
// it and back, for the same reason: none of them blocks, and each was seen
// to be the one sysmon took a P from at the starts and ends of 3,000
// streams (BENCHMARKS.md, issue 19, session 27). close(2) of a socket
// without SO_LINGER returns at once, its FIN sent as a write's bytes are;
// the kick is a non-blocking eventfd.

// rawClose is close(2).
func rawClose(fd int) {
	_, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
}

// rawDup duplicates fd (close-on-exec): fcntl(2) F_DUPFD_CLOEXEC.
func rawDup(fd int) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// rawEpollCtl is epoll_ctl(2).
func rawEpollCtl(ep, op, fd int, ev *unix.EpollEvent) error {
	_, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(ep), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// rawShutdown is shutdown(2).
func rawShutdown(fd, how int) {
	_, _, _ = syscall.RawSyscall(syscall.SYS_SHUTDOWN, uintptr(fd), uintptr(how), 0)
}

// rawKick adds one to the eventfd fd; rawDrain reads (and so resets) its
// count: write(2) and read(2) of its 8 bytes.
func rawKick(fd int) {
	one := [8]byte{1}
	_, _, _ = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&one[0])), 8)
}

func rawDrain(fd int) {
	var b [8]byte
	_, _, _ = syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 8)
}

// ConnectEarly is a net.Dialer's Control for the backend dials: it starts
// the TCP connect itself, with a connect(2) the scheduler is not told of,
// before the dialer's own. On loopback and other near peers the handshake
// is done when that call returns, and the dialer's connect then finds the
// socket connected (EISCONN) and returns without waiting for it in the
// runtime's poller; otherwise it finds the connect under way (EALREADY)
// and waits as it always does, and a connect that failed is tried again
// by the dialer and reported as the dialer reports it. A dialer's connect
// runs the peer's side of the handshake in the calling thread, long
// enough for sysmon to hand its P to another thread when the kernel
// preempts it: at 3,000 stream starts it was a third of the retakes
// (BENCHMARKS.md, issue 19, session 27). Not for a dialer with a
// LocalAddr (it binds after Control).
func ConnectEarly(network, address string, c syscall.RawConn) error {
	if network != "tcp4" && network != "tcp6" {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil || ap.Addr().Zone() != "" {
		return nil // a scope id: the dialer's own connect
	}
	var sa [unix.SizeofSockaddrInet6]byte
	n := sockaddrOf(&sa, ap.Addr(), ap.Port())
	_ = c.Control(func(fd uintptr) {
		_, _, _ = syscall.RawSyscall(syscall.SYS_CONNECT, fd, uintptr(unsafe.Pointer(&sa[0])), n)
	})
	return nil
}
