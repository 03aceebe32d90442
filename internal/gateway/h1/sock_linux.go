package h1

import (
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
