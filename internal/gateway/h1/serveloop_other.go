//go:build !linux

package h1

import (
	"context"
	"net"
)

// Serve loops exist on Linux only (serveloop_linux.go): elsewhere every
// connection is served on a goroutine of its own.

type coro struct{}

func (s *Server) serveOnLoop(*sconn) bool { return false }
func (s *Server) loosen(net.Listener)     {}
func (c *sconn) tighten()                 {}
func coroOf(context.Context) *coro        { return nil }
func (*coro) loopIndex() int              { return -1 }
func (*coro) bind(*conn)                  {}
func (*coro) unbind(*conn)                {}

// Detach is a no-op: there are no serve loops here.
func Detach(context.Context) {}

// LoopStalls returns 0: there are no serve loops here.
func LoopStalls() int64 { return 0 }
