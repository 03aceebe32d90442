package h1

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
)

// TestReady: Ready is true exactly when the next Next has bytes without a
// read. The backend is a net.Pipe, whose reads return what one write sent,
// so what is buffered after each read is known.
func TestReady(t *testing.T) {
	type step struct {
		send  string // written by the backend before the Next (one write)
		next  string // what Next returns ("EOF": the end)
		ready bool   // Ready after that Next
	}
	const chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	cases := []struct {
		name  string
		head  string
		steps []step
	}{
		{"two chunks together, then one alone", chunked, []step{
			{send: "1\r\na\r\n2\r\nbc\r\n", next: "a", ready: true},
			{next: "bc", ready: false},
			{send: "1\r\nd\r\n", next: "d", ready: false},
			{send: "0\r\n\r\n", next: "EOF", ready: false},
		}},
		{"the next chunk's header only", chunked, []step{
			{send: "1\r\na\r\n2\r\n", next: "a", ready: false},
			{send: "bc\r\n0\r\n\r\n", next: "bc", ready: false},
			{next: "EOF", ready: false},
		}},
		{"a chunk split across reads", chunked, []step{
			{send: "4\r\nab", next: "ab", ready: false},
			{send: "cd\r\n1\r\ne\r\n0\r\n\r\n", next: "cd", ready: true},
			{next: "e", ready: false},
			{next: "EOF", ready: false},
		}},
		{"trailers after the last chunk", chunked, []step{
			{send: "1\r\na\r\n0\r\nX-T: 1\r\n\r\n", next: "a", ready: false},
			{next: "EOF", ready: false},
		}},
		{"content length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", []step{
			{send: "abc", next: "abc", ready: false},
			{send: "de", next: "de", ready: false},
			{next: "EOF", ready: false},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer server.Close()
			cl := New(Options{Dial: func(context.Context, string, string) (net.Conn, error) { return client, nil }})
			defer cl.Close()
			sends := make(chan string)
			go func() {
				defer server.Close()
				if _, err := http.ReadRequest(bufio.NewReader(server)); err != nil {
					return
				}
				for s := range sends {
					if _, err := io.WriteString(server, s); err != nil {
						return
					}
				}
			}()
			type rt struct {
				resp *http.Response
				err  error
			}
			got := make(chan rt, 1)
			go func() {
				resp, err := cl.RoundTrip(newReq(t, context.Background(), "GET", "http://backend/", ""))
				got <- rt{resp, err}
			}()
			sends <- tc.head
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			body := r.resp.Body.(*Body)
			defer body.Close()
			if body.Ready() {
				t.Fatal("Ready before any body byte came")
			}
			for i, s := range tc.steps {
				if s.send != "" {
					sends <- s.send
				}
				p, err := body.Next()
				switch {
				case s.next == "EOF" && err != io.EOF:
					t.Fatalf("step %d: Next %q, %v, want EOF", i, p, err)
				case s.next != "EOF" && (err != nil || string(p) != s.next):
					t.Fatalf("step %d: Next %q, %v, want %q", i, p, err, s.next)
				}
				if r := body.Ready(); r != s.ready {
					t.Fatalf("step %d: Ready %v after %q, want %v", i, r, p, s.ready)
				}
			}
			close(sends)
		})
	}
}
