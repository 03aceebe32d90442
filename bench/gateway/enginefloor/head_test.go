package main

import (
	"bytes"
	"testing"
)

func TestHeadLength(t *testing.T) {
	for _, tc := range []struct {
		in     string
		end    int
		length int64
	}{
		{"", -1, -1},
		{"GET / HTTP/1.1\r\nHost: x\r\n", -1, -1},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27, -1},
		{"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 38, 5},
		{"HTTP/1.1 200 OK\r\nContent-Type: a\r\nContent-Length: 12\r\n\r\n", 56, 12},
		// After the head, a Content-Length line is body, not a field.
		{"GET / HTTP/1.1\r\n\r\nContent-Length: 3\r\n", 18, -1},
	} {
		end, length := headLength([]byte(tc.in))
		if end != tc.end || length != tc.length {
			t.Errorf("headLength(%q) = %d, %d; want %d, %d", tc.in, end, length, tc.end, tc.length)
		}
	}
}

// FuzzHeadLength: any bytes; a head's end, when found, is just past the
// first blank line, and the input is not changed.
func FuzzHeadLength(f *testing.F) {
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"))
	f.Fuzz(func(t *testing.T, p []byte) {
		in := bytes.Clone(p)
		end, _ := headLength(p)
		if !bytes.Equal(in, p) {
			t.Fatal("headLength changed its input")
		}
		if want := bytes.Index(p, []byte("\r\n\r\n")); want >= 0 && end != want+4 || want < 0 && end != -1 {
			t.Fatalf("end %d for %q", end, p)
		}
	})
}
