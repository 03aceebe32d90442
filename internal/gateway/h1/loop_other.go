//go:build !linux

package h1

import (
	"errors"
	"net/http"
)

// loopStream exists on Linux only (loop_linux.go).
type loopStream struct{}

func (*loopStream) write([]byte) error { return nil }

// EachOnLoop is Each where the event loop does not exist (loop_linux.go).
func (b *Body) EachOnLoop(_ http.ResponseWriter, s Sink) error { return b.Each(s) }

// LoopStats returns zeros: there is no event loop here.
func LoopStats() (streams, held int64) { return 0, 0 }

// A connection has no tail without an event loop (loop_linux.go).
func (c *sconn) writeTail([]byte) error { return errors.ErrUnsupported }
func (c *sconn) untail() error          { return errors.ErrUnsupported }
func (c *sconn) closeTail()             {}
func (c *sconn) abortTail()             {}

// ErrClientGone is never returned here (see loop_linux.go).
var ErrClientGone = errors.New("h1: client connection closed")
