//go:build !linux

package main

import "log"

func serveLoops(listen, backend string) {
	log.Fatal("-engine loop: epoll, Linux only")
}

func serveCoroLoops(listen, backend string) {
	log.Fatal("-engine coro: epoll, Linux only")
}

func serveCoroLockedLoops(listen, backend string) {
	log.Fatal("-engine corolocked: epoll, Linux only")
}
