package h1

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The backends' keep-alive (internal/gateway's newBackendClient).
var testKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}

// TestDialerConnectsAsPackageNet: a connection Dialer made has what a
// net.Dialer with the same settings makes: the options, the addresses,
// and bytes both ways; over IPv4, IPv6 and an IPv4-mapped address.
func TestDialerConnectsAsPackageNet(t *testing.T) {
	for _, tc := range []struct{ name, network, listen, dial string }{
		{"IPv4", "tcp", "127.0.0.1:0", ""},
		{"IPv4, tcp4", "tcp4", "127.0.0.1:0", ""},
		{"IPv6", "tcp6", "[::1]:0", ""},
		{"IPv4-mapped", "tcp", "127.0.0.1:0", "[::ffff:127.0.0.1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen(tc.network, tc.listen)
			if err != nil {
				if tc.network == "tcp6" {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				t.Fatal(err)
			}
			defer ln.Close()
			addr := ln.Addr().String()
			if tc.dial != "" {
				addr = net.JoinHostPort(tc.dial[1:len(tc.dial)-1], strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
			}
			d := &Dialer{Timeout: time.Second, KeepAlive: testKeepAlive}
			c, err := d.DialContext(context.Background(), tc.network, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, ok := c.(*fdConn); !ok {
				t.Fatalf("dialed a %T, want *fdConn", c)
			}
			peer, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Close()
			ref, err := (&net.Dialer{KeepAliveConfig: testKeepAlive}).Dial(tc.network, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			if got, want := sockOptions(t, c), sockOptions(t, ref); !equalMaps(got, want) {
				t.Errorf("options %v, want a net.Dialer's %v", got, want)
			}
			if c.RemoteAddr().String() != peer.LocalAddr().String() {
				t.Errorf("RemoteAddr %v, want %v", c.RemoteAddr(), peer.LocalAddr())
			}
			if c.LocalAddr().String() != peer.RemoteAddr().String() {
				t.Errorf("LocalAddr %v, want %v", c.LocalAddr(), peer.RemoteAddr())
			}
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("peer read %q, %v", buf, err)
			}
			_, _ = peer.Write([]byte("pong"))
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
				t.Fatalf("read %q, %v", buf, err)
			}
		})
	}
}

// TestDialerKeepAliveOff: with Enable false, no keep-alive is set.
func TestDialerKeepAliveOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := (&Dialer{}).DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if o := sockOptions(t, c); o["SO_KEEPALIVE"] != 0 || o["TCP_NODELAY"] != 1 {
		t.Errorf("options %v, want no keep-alive and TCP_NODELAY", o)
	}
}

// TestDialerFailures: a refused dial, a network that cannot reach the
// address, and a context already done fail as package net's do (a
// *net.OpError of "dial", with the errno), which is what the gateway's
// passive health check reads (isConnectFailure).
func TestDialerFailures(t *testing.T) {
	d := &Dialer{Timeout: time.Second, KeepAlive: testKeepAlive}
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}()
	_, err := d.DialContext(context.Background(), "tcp", refused)
	var oe *net.OpError
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &oe) || oe.Op != "dial" {
		t.Errorf("refused: %v, want a dial *net.OpError with ECONNREFUSED", err)
	}
	if _, err := d.DialContext(context.Background(), "tcp6", "127.0.0.1:1"); err == nil {
		t.Error("tcp6 to an IPv4 address: no error")
	}
	if _, err := d.DialContext(context.Background(), "tcp4", "[::1]:1"); err == nil {
		t.Error("tcp4 to an IPv6 address: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.DialContext(ctx, "tcp", refused); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v, want context.Canceled", err)
	}
}

// TestDialerFallsBack: a host name goes to the net.Dialer.
func TestDialerFallsBack(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	c, err := (&Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp4", net.JoinHostPort("localhost", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Errorf("dialed a %T by name, want the net.Dialer's *net.TCPConn", c)
	}
}

// fullListener returns the address of a listening socket whose accept
// queue is full and never accepted from: a connect to it waits for the
// handshake until it times out (Linux drops the SYNs), as one to a host
// gone does.
func fullListener(t *testing.T) string {
	addr, _ := fullListenerFd(t)
	return addr
}

// fullListenerFd is fullListener, with the listening socket.
func fullListenerFd(t *testing.T) (string, int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
	// Fill the queue: connects that complete until one does not.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
		if i == 16 {
			t.Fatal("the accept queue never filled")
		}
	}
	return addr, fd
}

// TestDialerWaits: a connect under way is waited for in the runtime's
// poller, and ends at the dialer's timeout, or when the context is
// cancelled, with the errors package net gives.
func TestDialerWaits(t *testing.T) {
	addr := fullListener(t)

	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		_, err := (&Dialer{Timeout: 100 * time.Millisecond}).DialContext(context.Background(), "tcp", addr)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connect that cannot finish: %v, want a timeout", err)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "dial" {
			t.Errorf("%v: want a dial *net.OpError", err)
		}
		if el := time.Since(start); el < 100*time.Millisecond {
			t.Errorf("timed out after %v, before the dialer's 100 ms", el)
		}
	})
	t.Run("context deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := (&Dialer{Timeout: time.Minute}).DialContext(ctx, "tcp", addr)
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a context deadline: %v, want it exceeded", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		timer := time.AfterFunc(50*time.Millisecond, cancel) // whenever it lands, the dial must end Canceled
		defer timer.Stop()
		_, err := (&Dialer{}).DialContext(ctx, "tcp", addr)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled dial: %v, want context.Canceled", err)
		}
	})
}

// TestDialerWaitsToTheEnd: a connect that finishes in the poller (the
// queue frees up while the dial waits, and the kernel's retried SYN, a
// second later, is answered) returns a working connection.
func TestDialerWaitsToTheEnd(t *testing.T) {
	addr, lfd := fullListenerFd(t)
	timer := time.AfterFunc(200*time.Millisecond, func() {
		// Make room in the queue: wherever the dial is by then, it ends
		// connected.
		for range 2 {
			if nfd, _, err := unix.Accept(lfd); err == nil {
				unix.Close(nfd)
			}
		}
	})
	defer timer.Stop()
	c, err := (&Dialer{Timeout: 10 * time.Second}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("a connect that can finish: %v", err)
	}
	defer c.Close()
	if c.RemoteAddr().String() != addr {
		t.Errorf("RemoteAddr %v, want %s", c.RemoteAddr(), addr)
	}
}

func TestSecondsAndCount(t *testing.T) {
	for _, tc := range []struct {
		d, def time.Duration
		want   int
	}{
		{0, 15 * time.Second, 15},
		{-1, 15 * time.Second, -1},
		{5 * time.Second, 15 * time.Second, 5},
		{1500 * time.Millisecond, 15 * time.Second, 2},
		{time.Nanosecond, 15 * time.Second, 1},
	} {
		if got := seconds(tc.d, tc.def); got != tc.want {
			t.Errorf("seconds(%v, %v) = %d, want %d", tc.d, tc.def, got, tc.want)
		}
	}
	for _, tc := range []struct{ n, def, want int }{{0, 9, 9}, {-1, 9, -1}, {3, 9, 3}} {
		if got := count(tc.n, tc.def); got != tc.want {
			t.Errorf("count(%d, %d) = %d, want %d", tc.n, tc.def, got, tc.want)
		}
	}
}
