package h1

import (
	"bufio"
	"bytes"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestCanonicalize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"content-type", "Content-Type"},
		{"CONTENT-LENGTH", "Content-Length"},
		{"x-forwarded-for", "X-Forwarded-For"},
		{"foo_bar", "Foo_bar"},
		{"a--b", "A--B"},
		{"-x", "-X"},
		{"1abc", "1abc"},
	} {
		b := []byte(tc.in)
		canonicalize(b)
		if string(b) != tc.want || string(b) != http.CanonicalHeaderKey(tc.in) {
			t.Errorf("canonicalize(%q) = %q, want %q (net/http: %q)", tc.in, b, tc.want, http.CanonicalHeaderKey(tc.in))
		}
	}
}

func TestParseLength(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"", 0, false}, {"-1", 0, false}, {"+1", 0, false},
		{"1 ", 0, false}, {"0x10", 0, false}, {"999999999999999999", 999999999999999999, true},
		{"9999999999999999999", 0, false},
	} {
		n, ok := parseLength(tc.in)
		if n != tc.want || ok != tc.ok {
			t.Errorf("parseLength(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.want, tc.ok)
		}
	}
}

// prevHead is the head FuzzReadHead reads before each input, with fields
// and a target unlike the seeds'.
const prevHead = "PUT /old/path?old=1 HTTP/1.1\r\nHost: old\r\nX-Old: 1\r\nX-Old: 2\r\nCookie: c\r\nContent-Length: 3\r\n\r\n"

// FuzzReadHead checks the head reader against net/http's http.ReadRequest,
// the reference: whatever head this server accepts, net/http accepts too,
// and reads the same method, target, Host, length and fields. (This server
// refuses some heads net/http accepts: see headReader.read.)
func FuzzReadHead(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: gw:8080\r\nContent-Type: application/json\r\nContent-Length: 17\r\nAuthorization: Bearer k\r\n\r\n",
		"GET /a?b=c HTTP/1.0\r\nx-a: 1\r\nX-A: 2\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET http://h/p HTTP/1.1\r\nHost: y\r\nConnection: close\r\n\r\n",
		"\r\nGET / HTTP/1.1\nHost: x\n\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX: a\tb \r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// The reader has read another head first, as on a kept-alive
		// connection: nothing of it may show in the next.
		var hr headReader
		var prev, got http.Request
		if err := hr.read(bufio.NewReader(strings.NewReader(prevHead)), 1<<16, &prev); err != nil {
			t.Fatal(err)
		}
		if err := hr.read(bufio.NewReaderSize(bytes.NewReader(in), 64), 1<<16, &got); err != nil {
			return
		}
		// net/http does not skip empty lines before the request line.
		ref := bytes.TrimLeft(in, "\r\n")
		want, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(ref)))
		if err != nil {
			t.Fatalf("accepted what net/http refuses (%v):\n%q", err, in)
		}
		if got.Method != want.Method || got.RequestURI != want.RequestURI || got.Host != want.Host ||
			got.ContentLength != want.ContentLength || got.Close != want.Close || got.ProtoMinor != want.ProtoMinor ||
			got.URL.String() != want.URL.String() {
			t.Fatalf("read %s %s host %q length %d close %v 1.%d; net/http %s %s host %q length %d close %v 1.%d\n%q",
				got.Method, got.RequestURI, got.Host, got.ContentLength, got.Close, got.ProtoMinor,
				want.Method, want.RequestURI, want.Host, want.ContentLength, want.Close, want.ProtoMinor, in)
		}
		// net/http keeps Transfer-Encoding out of the fields, as here.
		if !maps.EqualFunc(got.Header, want.Header, slices.Equal) {
			t.Fatalf("fields %v; net/http %v\n%q", got.Header, want.Header, in)
		}
		if strings.Join(got.TransferEncoding, ",") != strings.Join(want.TransferEncoding, ",") {
			t.Fatalf("transfer encoding %v; net/http %v", got.TransferEncoding, want.TransferEncoding)
		}
	})
}
