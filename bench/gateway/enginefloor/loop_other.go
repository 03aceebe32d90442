//go:build !linux

package main

import "log"

func serveLoops(listen, backend string) {
	log.Fatal("-engine loop: epoll, Linux only")
}
