package h1

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestServerKeepsAcceptingOutOfDescriptors runs the process out of file
// descriptors while two connections wait to be accepted: the server backs
// off instead of returning from Serve (which would stop it for good, and
// the gateway with it), and serves both once descriptors are free again.
// Not parallel: it lowers the process's RLIMIT_NOFILE until the server has
// failed to accept twice. On package net's listener and on Listen's.
func TestServerKeepsAcceptingOutOfDescriptors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen func(network, address string) (net.Listener, error)
	}{
		{"net.Listen", net.Listen},
		{"Listen", Listen},
	} {
		t.Run(tc.name, func(t *testing.T) { keepsAcceptingOutOfDescriptors(t, tc.listen) })
	}
}

func keepsAcceptingOutOfDescriptors(t *testing.T, listen func(network, address string) (net.Listener, error)) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })}
	inner, err := listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &failCounting{Listener: inner}
	addr := inner.Addr().String()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	ap := netip.MustParseAddrPort(addr)
	sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}

	// The clients' sockets exist before the limit is lowered; connecting
	// them takes no descriptor.
	var fds []int
	for range 2 {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}); err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}

	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// A new descriptor takes the lowest free number, which must be below
	// the limit: the limit goes to that number (the directory's own
	// descriptor, closed once it is read, counts as free).
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	inUse := map[int]bool{}
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			if _, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
				inUse[n] = true
			}
		}
	}
	free := 0
	for inUse[free] {
		free++
	}
	low := lim
	low.Cur = uint64(free)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()

	// Confirm the fault: no descriptor can be made now.
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
		unix.Close(fd)
		t.Fatalf("a socket could be made under a limit of %d open descriptors", low.Cur)
	}
	for _, fd := range fds {
		if err := unix.Connect(fd, sa); err != nil {
			t.Fatal(err)
		}
	}
	// The connections are queued on the listener, and every accept fails
	// for as long as the fault lasts: it lasts until the server has tried
	// again after a failure (before the fix, Serve returned at the first).
	if !waitFor(func() bool { return ln.failed.Load() >= 2 }) {
		restore()
		t.Fatalf("the server tried to accept %d times under the fault, want it to keep trying", ln.failed.Load())
	}
	restore()

	for i, fd := range fds {
		req := "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
		if _, err := unix.Write(fd, []byte(req)); err != nil {
			t.Fatal(err)
		}
		var out []byte
		buf := make([]byte, 512)
		for {
			n, err := unix.Read(fd, buf)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				t.Fatalf("client %d: read: %v (got %q)", i, err, out)
			}
			if n == 0 {
				break
			}
			out = append(out, buf[:n]...)
		}
		if !strings.HasPrefix(string(out), "HTTP/1.1 200 OK") || !strings.HasSuffix(string(out), "ok") {
			t.Fatalf("client %d: answer %q, want 200 and ok", i, out)
		}
	}
	// And new connections are served as usual.
	if out := rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasSuffix(out, "ok") {
		t.Fatalf("a new connection: %q", out)
	}
}

// failCounting is a listener that counts its failed accepts.
type failCounting struct {
	net.Listener
	failed atomic.Int32
}

func (l *failCounting) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		l.failed.Add(1)
	}
	return c, err
}

func TestAcceptWillRecover(t *testing.T) {
	opErr := func(e error) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", e)}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"out of descriptors (process)", opErr(syscall.EMFILE), true},
		{"out of descriptors (system)", opErr(syscall.ENFILE), true},
		{"out of buffers", opErr(syscall.ENOBUFS), true},
		{"out of memory", opErr(syscall.ENOMEM), true},
		{"a timeout", opErr(syscall.EAGAIN), true},
		{"listener closed", net.ErrClosed, false},
		{"bad descriptor", opErr(syscall.EBADF), false},
		{"not listening", opErr(syscall.EINVAL), false},
	} {
		if got := acceptWillRecover(tc.err); got != tc.want {
			t.Errorf("%s (%v): %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
