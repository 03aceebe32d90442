package h1

import (
	"net"
	"time"
)

// Dialer dials the backends: a net.Dialer's Timeout and keep-alive, with
// DialContext's own connect on Linux (dial_linux.go).
type Dialer struct {
	// Timeout bounds a connect (0: none but the context's).
	Timeout time.Duration
	// KeepAlive is the TCP keep-alive of each connection, read as
	// net.KeepAliveConfig is (0 fields: package net's defaults); with
	// Enable false there is none.
	KeepAlive net.KeepAliveConfig
}

// fallback is the net.Dialer for what DialContext does not connect itself.
func (d *Dialer) fallback() *net.Dialer {
	nd := &net.Dialer{Timeout: d.Timeout, KeepAliveConfig: d.KeepAlive, Control: ConnectEarly}
	if !d.KeepAlive.Enable {
		nd.KeepAlive = -1
	}
	return nd
}
