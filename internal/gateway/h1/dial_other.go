//go:build !linux

package h1

import (
	"context"
	"net"
)

// DialContext is the net.Dialer's where the raw connect does not exist
// (dial_linux.go).
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return d.fallback().DialContext(ctx, network, address)
}
