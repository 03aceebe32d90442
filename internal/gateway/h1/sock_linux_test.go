package h1

import (
	"testing"

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
