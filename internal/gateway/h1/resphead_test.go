package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestScanHead(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		next int
	}{
		{"", -1, 0},
		{"HTTP/1.1 200 OK\r\n", -1, 17},
		{"HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody", 25, 23},
		{"HTTP/1.1 200 OK\nA: b\n\nbody", 22, 21},
		{"HTTP/1.1 200 OK\r\nA: b\r\n\r", -1, 23},
		{"\r\n", 2, 0},
	} {
		n, next := scanHead([]byte(tc.in), 0)
		if n != tc.n || (n < 0 && next != tc.next) {
			t.Errorf("scanHead(%q) = %d, %d; want %d, %d", tc.in, n, next, tc.n, tc.next)
		}
	}
}

func TestParseResponseHead(t *testing.T) {
	get, _ := http.NewRequest("GET", "http://x/", nil)
	head, _ := http.NewRequest("HEAD", "http://x/", nil)
	type want struct {
		code   int
		status string
		minor  int
		header http.Header
		length int64
		close  bool
		te     []string
		tr     http.Header
	}
	for _, tc := range []struct {
		name string
		in   string
		req  *http.Request
		want want
		err  string // a part of the error; "" for none
	}{
		{name: "length", in: "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nContent-Length: 5\r\n\r\n",
			want: want{200, "200 OK", 1, http.Header{"Content-Type": {"text/plain"}, "Content-Length": {"5"}}, 5, false, nil, nil}},
		{name: "chunked with trailers", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nTrailer: x-tokens, X-Other\r\n\r\n",
			want: want{200, "200 OK", 1, http.Header{}, -1, false, []string{"chunked"}, http.Header{"X-Tokens": nil, "X-Other": nil}}},
		{name: "trailer without chunked stays", in: "HTTP/1.1 200 OK\r\nTrailer: X-A\r\nContent-Length: 0\r\n\r\n",
			want: want{200, "200 OK", 1, http.Header{"Trailer": {"X-A"}, "Content-Length": {"0"}}, 0, false, nil, nil}},
		{name: "until EOF closes", in: "HTTP/1.1 200 OK\nX-A:  b \n\n",
			want: want{200, "200 OK", 1, http.Header{"X-A": {"b"}}, -1, true, nil, nil}},
		{name: "connection close removed", in: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
			want: want{200, "200 OK", 1, http.Header{"Content-Length": {"1"}}, 1, true, nil, nil}},
		{name: "1.0 closes", in: "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n",
			want: want{200, "200 OK", 0, http.Header{"Content-Length": {"1"}}, 1, true, nil, nil}},
		{name: "1.0 keep-alive", in: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n",
			want: want{200, "200 OK", 0, http.Header{"Connection": {"keep-alive"}, "Content-Length": {"1"}}, 1, false, nil, nil}},
		{name: "no reason", in: "HTTP/1.1  204\r\n\r\n",
			want: want{204, "204", 1, http.Header{}, 0, false, nil, nil}},
		{name: "304 with length", in: "HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n",
			want: want{304, "304 Not Modified", 1, http.Header{"Content-Length": {"7"}}, 0, false, nil, nil}},
		{name: "HEAD keeps length", req: head, in: "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n",
			want: want{200, "200 OK", 1, http.Header{"Content-Length": {"7"}}, 7, false, nil, nil}},
		{name: "HEAD without length", req: head, in: "HTTP/1.1 200 OK\r\n\r\n",
			want: want{200, "200 OK", 1, http.Header{}, -1, false, nil, nil}},
		{name: "100", in: "HTTP/1.1 100 Continue\r\n\r\n",
			want: want{100, "100 Continue", 1, http.Header{}, 0, false, nil, nil}},
		{name: "same lengths merged", in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
			want: want{200, "200 OK", 1, http.Header{"Content-Length": {"3"}}, 3, false, nil, nil}},
		{name: "repeated header", in: "HTTP/1.1 200 OK\r\nVary: a\r\nvary: b\r\nContent-Length: 0\r\n\r\n",
			want: want{200, "200 OK", 1, http.Header{"Vary": {"a", "b"}, "Content-Length": {"0"}}, 0, false, nil, nil}},
		{name: "pragma", in: "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n",
			want: want{200, "200 OK", 1, http.Header{"Pragma": {"no-cache"}, "Cache-Control": {"no-cache"}, "Content-Length": {"0"}}, 0, false, nil, nil}},

		{name: "differing lengths", in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", err: "differing"},
		{name: "both framings", in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", err: "both"},
		{name: "gzip coding", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", err: "transfer encoding"},
		{name: "two codings", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", err: "transfer encoding"},
		{name: "1.0 chunked", in: "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", err: "HTTP/1.0"},
		{name: "bad length", in: "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n", err: "Content-Length"},
		{name: "obs-fold", in: "HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\n\r\n", err: "obs-fold"},
		{name: "space before colon", in: "HTTP/1.1 200 OK\r\nX-A : b\r\n\r\n", err: "name"},
		{name: "no colon", in: "HTTP/1.1 200 OK\r\nX-A\r\n\r\n", err: "malformed"},
		{name: "control in value", in: "HTTP/1.1 200 OK\r\nX-A: b\x00c\r\n\r\n", err: "value"},
		{name: "bare CR in value", in: "HTTP/1.1 200 OK\r\nX-A: b\rc\r\n\r\n", err: "value"},
		{name: "HTTP/2", in: "HTTP/2.0 200 OK\r\n\r\n", err: "version"},
		{name: "short code", in: "HTTP/1.1 20 OK\r\n\r\n", err: "status code"},
		{name: "code 099", in: "HTTP/1.1 099 OK\r\n\r\n", err: "status code"},
		{name: "no status", in: "HTTP/1.1\r\n\r\n", err: "malformed"},
		{name: "empty", in: "\r\n", err: "empty status line"},
		{name: "bad trailer key", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n", err: "trailer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			if req == nil {
				req = get
			}
			resp, _, err := parseHead([]byte(tc.in), req, false)
			passed, fields, perr := parseHead([]byte(tc.in), req, true)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one about %q", err, tc.err)
				}
				if perr == nil || !strings.Contains(perr.Error(), tc.err) {
					t.Fatalf("passing the fields: err = %v, want one about %q", perr, tc.err)
				}
				return
			}
			if perr != nil {
				t.Fatalf("passing the fields: %v", perr)
			}
			samePassed(t, resp, passed, fields)
			if err != nil {
				t.Fatal(err)
			}
			got := want{resp.StatusCode, resp.Status, resp.ProtoMinor, resp.Header, resp.ContentLength, resp.Close, resp.TransferEncoding, resp.Trailer}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if resp.Request != req || resp.ProtoMajor != 1 || resp.Proto != "HTTP/1."+string(rune('0'+tc.want.minor)) {
				t.Errorf("Request, Proto %q or ProtoMajor %d wrong", resp.Proto, resp.ProtoMajor)
			}
		})
	}
}

// TestLongResponseHead: a head longer than the read buffer is read; one
// longer than maxResponseHead is refused.
func TestLongResponseHead(t *testing.T) {
	for _, tc := range []struct {
		size int
		ok   bool
	}{{rawSize * 3, true}, {maxResponseHead + 1, false}} {
		a, b := net.Pipe()
		go func() {
			head := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("x", tc.size) + "\r\nContent-Length: 2\r\n\r\nhi"
			_, _ = a.Write([]byte(head))
			a.Close()
		}()
		c := newConn(b, "pipe")
		req, _ := http.NewRequest("GET", "http://x/", nil)
		resp, _, err := readHead(c, req, false)
		if !tc.ok {
			if !errors.Is(err, errResponseHeadTooLarge) {
				t.Errorf("size %d: err = %v, want errResponseHeadTooLarge", tc.size, err)
			}
			c.close()
			continue
		}
		if err != nil {
			t.Fatalf("size %d: %v", tc.size, err)
		}
		if len(resp.Header.Get("X-Big")) != tc.size || resp.ContentLength != 2 {
			t.Errorf("size %d: X-Big of %d bytes, ContentLength %d", tc.size, len(resp.Header.Get("X-Big")), resp.ContentLength)
		}
		for len(c.buffered()) < 2 {
			if err := c.readMore(); err != nil {
				t.Fatal(err)
			}
		}
		if got := string(c.buffered()); got != "hi" {
			t.Errorf("size %d: body bytes %q", tc.size, got)
		}
		c.close()
	}
}

// TestResponseHeadTextIsItsOwn: a head's strings (its status and fields,
// passed on or in a map) hold a copy of the head, so that the bytes the
// connection reads next into its buffer leave them as they were.
func TestResponseHeadTextIsItsOwn(t *testing.T) {
	req, _ := http.NewRequest("GET", "http://x/", nil)
	for _, size := range []int{0, 200, 5000} {
		for _, pass := range []bool{false, true} {
			head := "HTTP/1.1 200 OK\r\nX-Pad: " + strings.Repeat("p", size) + "\r\nContent-Length: 2\r\n\r\n"
			b := []byte(head)
			resp, fields, err := parseHead(b, req, pass)
			if err != nil {
				t.Fatalf("size %d, pass %v: %v", size, pass, err)
			}
			for i := range b {
				b[i] = '#' // the connection's buffer, read into again
			}
			pad := resp.Header.Get("X-Pad")
			if pass {
				pad = fields.Get("X-Pad")
			}
			if resp.Status != "200 OK" || pad != strings.Repeat("p", size) || resp.ContentLength != 2 {
				t.Errorf("size %d, pass %v: after the buffer was overwritten, status %q, X-Pad %q, ContentLength %d",
					size, pass, resp.Status, pad, resp.ContentLength)
			}
		}
	}
}

// TestInformationalSkipped: 1xx heads before the answer are skipped, in
// one read or several.
func TestInformationalSkipped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(nc)
			if _, err := http.ReadRequest(br); err != nil {
				nc.Close()
				continue
			}
			_, _ = nc.Write([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"))
			_, _ = nc.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
		}
	}()
	cl := New(Options{})
	defer cl.Close()
	req := newReq(t, context.Background(), "GET", "http://"+ln.Addr().String()+"/", "")
	resp, err := cl.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "ok" || err != nil {
		t.Fatalf("%d %q %v", resp.StatusCode, b, err)
	}
}

// FuzzReadResponseHead: whatever head parseResponseHead accepts,
// http.ReadResponse accepts with the same fields.
func FuzzReadResponseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Tokens\r\n\r\n0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\nPragma: no-cache\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
		"HTTP/1.1 200 OK\nx-a: b\nX-A:  c \n\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, isHead bool) {
		method := "GET"
		if isHead {
			method = "HEAD"
		}
		req, _ := http.NewRequest(method, "http://x/", nil)
		n, _ := scanHead(data, 0)
		if n < 0 {
			return
		}
		head := bytes.Clone(data[:n])
		ours, _, err := parseHead(head, req, false)
		passed, fields, perr := parseHead(bytes.Clone(data[:n]), req, true)
		if (err == nil) != (perr == nil) {
			t.Fatalf("%q: with a header map err = %v, passing the fields err = %v", data[:n], err, perr)
		}
		if err != nil {
			return
		}
		samePassed(t, ours, passed, fields)
		theirs, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data[:n])), req)
		if err != nil {
			t.Fatalf("%q: we accept, net/http refuses: %v", data[:n], err)
		}
		if ours.StatusCode != theirs.StatusCode || ours.Status != theirs.Status ||
			ours.Proto != theirs.Proto || ours.ProtoMajor != theirs.ProtoMajor || ours.ProtoMinor != theirs.ProtoMinor ||
			ours.ContentLength != theirs.ContentLength || ours.Close != theirs.Close {
			t.Fatalf("%q:\nours   %d %q %s %d close=%v\ntheirs %d %q %s %d close=%v", data[:n],
				ours.StatusCode, ours.Status, ours.Proto, ours.ContentLength, ours.Close,
				theirs.StatusCode, theirs.Status, theirs.Proto, theirs.ContentLength, theirs.Close)
		}
		if !reflect.DeepEqual(ours.Header, theirs.Header) {
			t.Fatalf("%q: header\nours   %q\ntheirs %q", data[:n], ours.Header, theirs.Header)
		}
		if !reflect.DeepEqual(ours.TransferEncoding, theirs.TransferEncoding) {
			t.Fatalf("%q: TransferEncoding ours %q, theirs %q", data[:n], ours.TransferEncoding, theirs.TransferEncoding)
		}
		if !reflect.DeepEqual(ours.Trailer, theirs.Trailer) {
			t.Fatalf("%q: Trailer ours %q, theirs %q", data[:n], ours.Trailer, theirs.Trailer)
		}
	})
}

// samePassed fails unless a head parsed with its fields passed on (Fields)
// says what the same head parsed into a header map says: the same framing,
// and the same fields once the framing ones are set aside.
func samePassed(t *testing.T, resp, passed *http.Response, fields Fields) {
	t.Helper()
	if passed.Header != nil {
		t.Fatalf("passing the fields: Header %v, want nil", passed.Header)
	}
	if resp.StatusCode != passed.StatusCode || resp.Status != passed.Status || resp.ProtoMinor != passed.ProtoMinor ||
		resp.ContentLength != passed.ContentLength || resp.Close != passed.Close ||
		!reflect.DeepEqual(resp.TransferEncoding, passed.TransferEncoding) || !reflect.DeepEqual(resp.Trailer, passed.Trailer) {
		t.Fatalf("passing the fields: %+v\nwith a header map: %+v", passed, resp)
	}
	folded := http.Header{}
	for _, f := range fields {
		folded[f.Name] = append(folded[f.Name], f.Value)
	}
	mapped := resp.Header.Clone()
	for _, k := range []string{"Connection", "Transfer-Encoding", "Content-Length", "Trailer", "Cache-Control"} {
		delete(folded, k)
		delete(mapped, k)
	}
	if len(mapped) == 0 {
		mapped = http.Header{}
	}
	if !reflect.DeepEqual(folded, mapped) {
		t.Fatalf("passed fields %q, header map %q", folded, mapped)
	}
}

// parseHead is parseResponseHead's results apart.
func parseHead(b []byte, req *http.Request, pass bool) (*http.Response, Fields, error) {
	h, err := parseResponseHead(b, req, pass)
	if err != nil {
		return nil, nil, err
	}
	return &h.resp, h.fields, nil
}

// readHead is readResponseHead's results apart.
func readHead(c *conn, req *http.Request, pass bool) (*http.Response, Fields, error) {
	h, err := readResponseHead(c, req, pass)
	if err != nil {
		return nil, nil, err
	}
	return &h.resp, h.fields, nil
}
