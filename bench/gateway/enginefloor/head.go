package main

import (
	"bytes"
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
