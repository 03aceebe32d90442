//go:build linux

package main

import (
	"net"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCoroLoopProxies runs one coroutine loop (-engine coro) on real
// sockets.
func TestCoroLoopProxies(t *testing.T) {
	ba := echoBackend(t)
	ln, err := reusePortListener(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(ln)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*unix.SockaddrInet4).Port
	go func() { t.Log(coroLoop(ln, ba)) }()

	checkProxies(t, "http://127.0.0.1:"+strconv.Itoa(port))
}
