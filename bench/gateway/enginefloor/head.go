package main

import (
	"bytes"
	"errors"
	"strconv"
)

// headLength finds the end of an HTTP head at the start of p and its
// Content-Length, the least an HTTP/1.1 proxy reads of each message.
func headLength(p []byte) (end int, length int64) {
	end = bytes.Index(p, []byte("\r\n\r\n"))
	if end < 0 {
		return -1, -1
	}
	length = -1
	if i := bytes.Index(p[:end], []byte("\r\nContent-Length: ")); i >= 0 {
		v := p[i+len("\r\nContent-Length: "):]
		if j := bytes.IndexByte(v, '\r'); j >= 0 {
			length, _ = strconv.ParseInt(string(v[:j]), 10, 64)
		}
	}
	return end + 4, length
}

// readMessage reads one HTTP message with a Content-Length (or none) into
// buf with read (a connection's, or a coroutine's receive), returning it.
// What arrived after the message comes along with it: a floor serves
// clients that wait for each answer (wrk, the tests), not ones that
// pipeline.
func readMessage(read func([]byte) (int, error), buf []byte) ([]byte, error) {
	have := 0
	for {
		n, err := read(buf[have:])
		if err != nil {
			return nil, err
		}
		have += n
		end, length := headLength(buf[:have])
		if end < 0 {
			if have == len(buf) {
				return nil, errors.New("head too large")
			}
			continue
		}
		want := end + int(max(length, 0))
		if want > len(buf) {
			return nil, errors.New("message too large")
		}
		if have >= want {
			return buf[:have], nil
		}
	}
}
