package h1

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestRawEpollWait(t *testing.T) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ep)
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: 7, Pad: 9}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, efd, &ev); err != nil {
		t.Fatal(err)
	}
	events := make([]unix.EpollEvent, 4)

	// Nothing ready: it returns at once with none.
	if n, err := rawEpollWait(ep, events); n != 0 || err != nil {
		t.Fatalf("nothing ready: %d, %v; want 0, nil", n, err)
	}
	// Ready: the event as registered, every time while it stays ready
	// (level-triggered, as the loop registers its sockets).
	one := [8]byte{1}
	if _, err := unix.Write(efd, one[:]); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		n, err := rawEpollWait(ep, events)
		if n != 1 || err != nil {
			t.Fatalf("one ready: %d, %v; want 1, nil", n, err)
		}
		if got := events[0]; got.Fd != 7 || got.Pad != 9 || got.Events&unix.EPOLLIN == 0 {
			t.Fatalf("event %+v, want Fd 7, Pad 9, EPOLLIN", got)
		}
	}
	// Not an epoll descriptor: the error, as unix.EpollWait gives it.
	if _, err := rawEpollWait(efd, events); err != unix.EINVAL {
		t.Fatalf("on an eventfd: %v, want EINVAL", err)
	}
}

// TestConnectEarly dials with ConnectEarly as the dialer's Control: the
// socket is connected when Control returns (the dialer's connect then
// finds it so), the connection works, and a refused dial fails as it does
// without it.
func TestConnectEarly(t *testing.T) {
	connectedInControl := func(t *testing.T, network, addr string) (net.Conn, bool) {
		t.Helper()
		var early bool
		d := net.Dialer{Timeout: 5 * time.Second, Control: func(n, a string, c syscall.RawConn) error {
			err := ConnectEarly(n, a, c)
			_ = c.Control(func(fd uintptr) {
				_, perr := unix.Getpeername(int(fd))
				early = perr == nil
			})
			return err
		}}
		nc, err := d.DialContext(context.Background(), network, addr)
		if err != nil {
			t.Fatalf("dial %s %s: %v", network, addr, err)
		}
		return nc, early
	}
	for _, tc := range []struct{ network, listen string }{
		{"tcp4", "127.0.0.1:0"},
		{"tcp6", "[::1]:0"},
	} {
		t.Run(tc.network, func(t *testing.T) {
			ln, err := net.Listen(tc.network, tc.listen)
			if err != nil {
				t.Skipf("no %s loopback: %v", tc.network, err)
			}
			defer ln.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := ln.Accept()
				if err == nil {
					accepted <- c
				}
				close(accepted)
			}()
			nc, early := connectedInControl(t, tc.network, ln.Addr().String())
			defer nc.Close()
			if !early {
				t.Errorf("the socket was not connected when Control returned")
			}
			if nc.RemoteAddr().String() != ln.Addr().String() {
				t.Errorf("remote address %v, want %v", nc.RemoteAddr(), ln.Addr())
			}
			sc := <-accepted
			if sc == nil {
				t.Fatal("nothing accepted")
			}
			defer sc.Close()
			if _, err := nc.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			var b [4]byte
			if _, err := sc.Read(b[:]); err != nil || string(b[:]) != "ping" {
				t.Fatalf("read %q, %v; want ping", b, err)
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		d := net.Dialer{Timeout: 5 * time.Second, Control: ConnectEarly}
		_, err = d.Dial("tcp4", addr)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial to a closed port: %v, want connection refused", err)
		}
	})

	t.Run("not for it", func(t *testing.T) {
		// Other networks and addresses it cannot read are left to the
		// dialer: nothing is done and no error returned.
		for _, tc := range [][2]string{{"udp4", "127.0.0.1:53"}, {"tcp4", "not an address"}, {"tcp6", "[fe80::1%lo]:80"}} {
			if err := ConnectEarly(tc[0], tc[1], nil); err != nil {
				t.Errorf("ConnectEarly(%q, %q): %v, want nil", tc[0], tc[1], err)
			}
		}
	})
}
