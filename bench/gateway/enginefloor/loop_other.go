//go:build !linux

package main

import "log"

func serveLoops(listen, backend string) {
	log.Fatal("-engine loop: epoll, Linux only")
}

func serveCoroLoops(listen, backend string) {
	log.Fatal("-engine coro: epoll, Linux only")
}
