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
func TestCoroLoopProxies(t *testing.T) { checkLoopProxies(t, coroLoop) }

// TestCoroLockedLoopProxies runs one coroutine loop on a locked thread
// (-engine corolocked) on real sockets.
func TestCoroLockedLoopProxies(t *testing.T) { checkLoopProxies(t, coroLockedLoop) }

// TestLoopProxies runs one event loop (-engine loop) on real sockets.
func TestLoopProxies(t *testing.T) { checkLoopProxies(t, loop) }

// checkLoopProxies starts serve on a listening socket of its own, in
// front of echoBackend, and checks it (checkProxies). The loop is left
// running when the test ends.
func checkLoopProxies(t *testing.T, serve func(ln int, ba *net.TCPAddr) error) {
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
	go func() { _ = serve(ln, ba) }()
	checkProxies(t, "http://127.0.0.1:"+strconv.Itoa(port))
}
