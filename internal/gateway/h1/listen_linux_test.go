package h1

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// acceptOne listens on address with listen, dials it, and returns both
// ends: the accepted connection and the dialer's.
func acceptOne(t *testing.T, listen func(network, address string) (net.Listener, error), network, address string) (accepted, dialed net.Conn) {
	t.Helper()
	ln, err := listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err = net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialed.Close() })
	accepted, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { accepted.Close() })
	return accepted, dialed
}

// sockOptions reads the TCP options an accepted socket is given.
func sockOptions(t *testing.T, c net.Conn) map[string]int {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	if err := rc.Control(func(fd uintptr) {
		for _, o := range []struct {
			name       string
			level, opt int
		}{
			{"TCP_NODELAY", unix.IPPROTO_TCP, unix.TCP_NODELAY},
			{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE},
			{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
			{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
			{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
		} {
			v, err := unix.GetsockoptInt(int(fd), o.level, o.opt)
			if err != nil {
				t.Errorf("getsockopt %s: %v", o.name, err)
			}
			got[o.name] = v
		}
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestListenAcceptsAsPackageNet: a connection accepted by Listen's
// listener has what one accepted by package net's has, though nothing is
// set on it: the options come from the listening socket (Linux copies them
// at accept), the peer's address from accept4, its own when asked.
func TestListenAcceptsAsPackageNet(t *testing.T) {
	for _, tc := range []struct{ network, address string }{
		{"tcp4", "127.0.0.1:0"},
		{"tcp6", "[::1]:0"},
		{"tcp", "127.0.0.1:0"},
	} {
		t.Run(tc.network, func(t *testing.T) {
			if tc.network == "tcp6" {
				if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
					t.Skipf("no IPv6 loopback: %v", err)
				} else {
					ln.Close()
				}
			}
			ref, _ := acceptOne(t, net.Listen, tc.network, tc.address)
			got, dialed := acceptOne(t, Listen, tc.network, tc.address)
			if _, ok := got.(*fdConn); !ok {
				t.Fatalf("accepted a %T, want *fdConn", got)
			}
			want := sockOptions(t, ref)
			if want["TCP_NODELAY"] == 0 || want["SO_KEEPALIVE"] == 0 {
				t.Fatalf("package net's accepted socket: %v, want TCP_NODELAY and SO_KEEPALIVE on", want)
			}
			if opts := sockOptions(t, got); !equalMaps(opts, want) {
				t.Errorf("options %v, want package net's %v", opts, want)
			}
			if got.RemoteAddr().String() != dialed.LocalAddr().String() {
				t.Errorf("RemoteAddr %v, want the dialer's %v", got.RemoteAddr(), dialed.LocalAddr())
			}
			if got.LocalAddr().String() != dialed.RemoteAddr().String() {
				t.Errorf("LocalAddr %v, want the dialed %v", got.LocalAddr(), dialed.RemoteAddr())
			}
			if _, ok := got.RemoteAddr().(*net.TCPAddr); !ok {
				t.Errorf("RemoteAddr is a %T, want *net.TCPAddr", got.RemoteAddr())
			}
			// And it carries bytes both ways.
			if _, err := dialed.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(got, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("read %q, %v", buf, err)
			}
			if _, err := got.Write([]byte("pong")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(dialed, buf); err != nil || string(buf) != "pong" {
				t.Fatalf("peer read %q, %v", buf, err)
			}
		})
	}
}

func equalMaps(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestListenerClose: Close ends a waiting Accept with net.ErrClosed, and a
// second Close says it was closed.
func TestListenerClose(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		accepted <- err
	}()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v, want net.ErrClosed", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("a dial to the closed listener's address connected")
	}
}

// TestListenOtherNetworks: a network other than TCP is net.Listen's.
func TestListenOtherNetworks(t *testing.T) {
	ln, err := Listen("unix", t.TempDir()+"/s")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, ok := ln.(*net.UnixListener); !ok {
		t.Errorf("Listen(unix) is a %T, want *net.UnixListener", ln)
	}
	if _, err := Listen("tcp", "127.0.0.1:notaport"); err == nil {
		t.Error("Listen on a bad port: no error")
	}
}

// TestFdConnErrors: an fdConn fails as a *net.TCPConn does, in the forms
// its callers test for (io.EOF, timeouts, net.ErrClosed, errnos).
func TestFdConnErrors(t *testing.T) {
	t.Run("EOF", func(t *testing.T) {
		c, peer := acceptOne(t, Listen, "tcp", "127.0.0.1:0")
		_, _ = peer.Write([]byte("x"))
		peer.Close()
		b, err := io.ReadAll(c)
		if err != nil || string(b) != "x" {
			t.Fatalf("ReadAll: %q, %v", b, err)
		}
		if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("Read at the end: %d, %v, want io.EOF itself", n, err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		c, _ := acceptOne(t, Listen, "tcp", "127.0.0.1:0")
		if err := c.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		_, err := c.Read(make([]byte, 1))
		checkTimeout(t, err, "read")
		rc, _ := c.(syscall.Conn).SyscallConn()
		err = rc.Read(func(uintptr) bool { return false })
		checkTimeout(t, err, "raw-read")
		if err := c.SetDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		c, _ := acceptOne(t, Listen, "tcp", "127.0.0.1:0")
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read after Close: %v, want net.ErrClosed", err)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Write after Close: %v, want net.ErrClosed", err)
		}
		rc, _ := c.(syscall.Conn).SyscallConn()
		if err := rc.Read(func(uintptr) bool { return true }); !errors.Is(err, net.ErrClosed) {
			t.Errorf("RawConn.Read after Close: %v, want net.ErrClosed", err)
		}
		if err := c.Close(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("second Close: %v, want net.ErrClosed", err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		c, peer := acceptOne(t, Listen, "tcp", "127.0.0.1:0")
		_ = peer.(*net.TCPConn).SetLinger(0)
		peer.Close() // a reset
		var err error
		for range 100 {
			if _, err = c.Write([]byte("x")); err != nil {
				break
			}
		}
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("Write to a reset peer: %v, want ECONNRESET or EPIPE", err)
		}
		var se *os.SyscallError
		if !errors.As(err, &se) || se.Syscall != "write" {
			t.Errorf("%v: want an *os.SyscallError of write, as package net's", err)
		}
	})
	t.Run("CloseWrite", func(t *testing.T) {
		c, peer := acceptOne(t, Listen, "tcp", "127.0.0.1:0")
		cw, ok := c.(interface{ CloseWrite() error })
		if !ok {
			t.Fatal("no CloseWrite")
		}
		if err := cw.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(peer); err != nil || len(b) != 0 {
			t.Fatalf("peer after CloseWrite: %q, %v, want EOF", b, err)
		}
		// The other way still carries bytes.
		_, _ = peer.Write([]byte("late"))
		peer.Close()
		if b, err := io.ReadAll(c); err != nil || string(b) != "late" {
			t.Fatalf("read after CloseWrite: %q, %v", b, err)
		}
	})
}

func checkTimeout(t *testing.T, err error, op string) {
	t.Helper()
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != op {
		t.Errorf("%v: want a *net.OpError of %q", err, op)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("%v: want a timeout (os.ErrDeadlineExceeded)", err)
	}
}

// TestSockaddrAddr reads the socket addresses accept4(2) and getsockname(2)
// fill in (sockaddr_in and sockaddr_in6 of <netinet/in.h>: the family in
// the host's order, the port in the network's).
func TestSockaddrAddr(t *testing.T) {
	v4 := func(a [4]byte, port uint16) *unix.RawSockaddrAny {
		var rsa unix.RawSockaddrAny
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&rsa))
		sa.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], port)
		sa.Addr = a
		return &rsa
	}
	v6 := func(a [16]byte, port uint16, scope uint32) *unix.RawSockaddrAny {
		var rsa unix.RawSockaddrAny
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&rsa))
		sa.Family = unix.AF_INET6
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], port)
		sa.Addr = a
		sa.Scope_id = scope
		return &rsa
	}
	linkLocal := [16]byte{0xfe, 0x80, 15: 1}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	var unixAddr unix.RawSockaddrAny
	unixAddr.Addr.Family = unix.AF_UNIX
	for _, tc := range []struct {
		name string
		rsa  *unix.RawSockaddrAny
		want string
	}{
		{"IPv4", v4([4]byte{127, 0, 0, 1}, 8080), "127.0.0.1:8080"},
		{"IPv4, high port", v4([4]byte{10, 1, 2, 3}, 65535), "10.1.2.3:65535"},
		{"IPv6", v6([16]byte{15: 1}, 443, 0), "[::1]:443"},
		{"IPv4-mapped IPv6", v6([16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1}, 80, 0), "192.0.2.1:80"},
		{"link-local, a known interface", v6(linkLocal, 1, uint32(lo.Index)), "[fe80::1%lo]:1"},
		{"link-local, an interface gone", v6(linkLocal, 1, 999999), "[fe80::1%999999]:1"},
		{"not IP", &unixAddr, "<nil>"},
	} {
		got := sockaddrAddr(tc.rsa)
		s := "<nil>"
		if got != nil {
			s = got.String()
		}
		if s != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, s, tc.want)
		}
	}
}
