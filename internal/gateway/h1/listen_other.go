//go:build !linux

package h1

import "net"

// Listen is net.Listen where the raw accept does not exist
// (listen_linux.go).
func Listen(network, address string) (net.Listener, error) {
	return net.Listen(network, address)
}
