package main

// The floor of a goroutine-per-connection proxy (-engine raw): each client
// connection is served by a goroutine of its own, through the runtime's
// poller, with the same least parsing as -engine loop and -engine coro
// (headLength: the head's end and Content-Length), and one backend
// connection of its own. Beside -engine coro it tells apart what the
// concurrency model costs (goroutines and the poller against coroutines
// on event loops) from what an HTTP engine's requests, headers and
// writers cost (-engine h1 against this).

import (
	"log"
	"net"
)

func serveRaw(listen, backend string) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(rawProxy(ln, backend))
}

// rawProxy serves ln's connections until accepting fails.
func rawProxy(ln net.Listener, backend string) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go rawServe(c, backend)
	}
}

// rawServe proxies the requests of c, one at a time, to a connection of
// its own to backend.
func rawServe(c net.Conn, backend string) {
	defer c.Close()
	b, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer b.Close()
	var buf [16 << 10]byte
	for {
		req, err := readMessage(c.Read, buf[:])
		if err != nil {
			return
		}
		if _, err := b.Write(req); err != nil {
			return
		}
		resp, err := readMessage(b.Read, buf[:])
		if err != nil {
			return
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}
