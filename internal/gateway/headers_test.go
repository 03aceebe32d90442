package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"reflect"
	"testing"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// TestOwnValues: the values are equal and no longer share the request's
// array; a nil value stays nil.
func TestOwnValues(t *testing.T) {
	shared := []string{"a", "b", "c"}
	h := http.Header{"X-A": shared[0:1:1], "X-B": shared[1:3:3], "X-Forwarded-For": nil, "X-E": {}}
	want := http.Header{"X-A": {"a"}, "X-B": {"b", "c"}, "X-Forwarded-For": nil, "X-E": {}}
	ownValues(h)
	clear(shared) // the server reads the next request into the array
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("got %q, want %q", h, want)
	}
}

// TestSentBodyDrop: the body handed to a Transport is let go at commit
// only once a write has read all of it; a write still under way, or one
// started again by GetBody, keeps it.
func TestSentBodyDrop(t *testing.T) {
	body := []byte("0123456789")
	readAll := func(r io.Reader) string {
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cases := []struct {
		name     string
		run      func(s *sentBody)
		released bool
	}{
		{"nothing read", func(s *sentBody) { s.reader() }, false},
		{"read in part", func(s *sentBody) { _, _ = s.reader().Read(make([]byte, 4)) }, false},
		{"read to the end", func(s *sentBody) {
			if got := readAll(s.reader()); got != string(body) {
				t.Fatalf("read %q", got)
			}
		}, true},
		{"read, then asked again (GetBody)", func(s *sentBody) {
			readAll(s.reader())
			_, _ = s.getBody()
		}, false},
		{"asked again and read again", func(s *sentBody) {
			readAll(s.reader())
			r, _ := s.getBody()
			if got := readAll(r); got != string(body) {
				t.Fatalf("second read %q", got)
			}
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &sentBody{b: body}
			tc.run(s)
			s.drop()
			if released := s.b == nil; released != tc.released {
				t.Fatalf("bytes let go: %v, want %v", released, tc.released)
			}
		})
	}
}

// TestAnswerHeadersPassedOn: a backend's answer fields reach the client
// as they came (several values of one name in order, its own Date) but for
// the hop-by-hop ones (Keep-Alive, those its Connection names) and the
// gateway's own X-Tidegpu-Backend, which is the gateway's alone: on the h1
// server, where the h1 client's fields are written without a header map
// (h1.PassFields), on net/http's server and with a CORS policy, where they
// go through the header map.
func TestAnswerHeadersPassedOn(t *testing.T) {
	const date = "Mon, 02 Jan 2006 15:04:05 GMT"
	be := newBackend(t, "a", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Connection"] = []string{"X-Secret"}
		h["X-Secret"] = []string{"s"}
		h["Keep-Alive"] = []string{"timeout=5"}
		h["Set-Cookie"] = []string{"a=1", "b=2"}
		h["X-Custom"] = []string{"kept"}
		h["Date"] = []string{date}
		h[BackendHeader] = []string{"spoofed"}
		h["Content-Type"] = []string{"application/json"}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	for _, tc := range []struct {
		name   string
		engine string
		opts   Options
	}{
		{"h1 server", "h1", Options{}},
		{"net/http server", "nethttp", Options{}},
		{"CORS policy", "h1", Options{CORS: &CORS{AllowedOrigins: []string{"*"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessOn(t, tc.opts, tc.engine)
			h.g.SetBackends("p", []Backend{be.backend("p")})
			c, err := net.Dial("tcp", h.srv.addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = io.WriteString(c, "GET /api/tags HTTP/1.1\r\nHost: gw\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			got := resp.Header
			for k, want := range map[string][]string{
				"Set-Cookie":   {"a=1", "b=2"},
				"X-Custom":     {"kept"},
				"Date":         {date},
				BackendHeader:  {"a"},
				"Content-Type": {"application/json"},
			} {
				if !reflect.DeepEqual(got[k], want) {
					t.Errorf("%s: %q, want %q", k, got[k], want)
				}
			}
			for _, k := range []string{"X-Secret", "Keep-Alive"} {
				if v, ok := got[k]; ok {
					t.Errorf("hop-by-hop %s passed on: %q", k, v)
				}
			}
			if string(body) != `{"ok":true}` || resp.ContentLength != int64(len(body)) {
				t.Errorf("body %q, Content-Length %d", body, resp.ContentLength)
			}
		})
	}
}

// TestPassable: the fields passed on lose the hop-by-hop ones and those
// their Connection fields name, whatever the case of the names there.
func TestPassable(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   h1.Fields
		want []string
	}{
		{"none", h1.Fields{{Name: "Content-Type", Value: "a"}, {Name: "Date", Value: "d"}}, []string{"Content-Type", "Date"}},
		{"hop-by-hop", h1.Fields{{Name: "Keep-Alive", Value: "t"}, {Name: "X-A", Value: "1"}, {Name: "Transfer-Encoding", Value: "chunked"}, {Name: "Upgrade", Value: "h2c"}}, []string{"X-A"}},
		{"named by Connection", h1.Fields{{Name: "Connection", Value: "x-secret, keep-alive"}, {Name: "X-Secret", Value: "s"}, {Name: "X-B", Value: "2"}}, []string{"X-B"}},
		{"empty", h1.Fields{}, []string{}},
		{"a backend's own backend header", h1.Fields{{Name: BackendHeader, Value: "inner"}, {Name: "X-C", Value: "3"}}, []string{"X-C"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names := []string{}
			for _, f := range passable(tc.in) {
				names = append(names, f.Name)
			}
			if !reflect.DeepEqual(names, tc.want) {
				t.Fatalf("passed %q, want %q", names, tc.want)
			}
		})
	}
}

// TestShapeOutboundMatchesOutboundHeader: what the h1 client sends for an
// exchange shaped by shapeOutbound (the client's header but SkipField's,
// then ExtraFields) is the header outboundHeader builds for the Transport,
// but the User-Agent placeholder, which neither client writes.
func TestShapeOutboundMatchesOutboundHeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		h      http.Header
		remote string
		host   string
	}{
		{"plain", http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer k"}}, "10.0.0.9:5000", "gw"},
		{"prior X-Forwarded-For", http.Header{"X-Forwarded-For": {"1.1.1.1", "2.2.2.2"}}, "10.0.0.9:5000", "gw"},
		{"nil X-Forwarded-For (do not add)", http.Header{"X-Forwarded-For": nil}, "10.0.0.9:5000", "gw"},
		{"client's X-Forwarded-Host and -Proto", http.Header{"X-Forwarded-Host": {"a.example"}, "X-Forwarded-Proto": {"https"}}, "10.0.0.9:5000", "gw"},
		{"hop-by-hop and Expect", http.Header{"Connection": {"X-Secret, keep-alive"}, "X-Secret": {"s"}, "Keep-Alive": {"t"}, "Expect": {"100-continue"}, "Upgrade": {"websocket"}, "Proxy-Authorization": {"x"}, "X-Kept": {"1"}}, "10.0.0.9:5000", "gw"},
		{"Connection names X-Forwarded-For", http.Header{"Connection": {"x-forwarded-for"}, "X-Forwarded-For": {"9.9.9.9"}}, "10.0.0.9:5000", "gw"},
		{"Te: trailers", http.Header{"Te": {"trailers, deflate"}}, "10.0.0.9:5000", "gw"},
		{"Te without trailers", http.Header{"Te": {"deflate"}}, "10.0.0.9:5000", "gw"},
		{"no host, remote without port", http.Header{"User-Agent": {"curl/8"}}, "pipe", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{Header: tc.h, RemoteAddr: tc.remote, Host: tc.host}
			want := outboundHeader(r)
			if ua := want["User-Agent"]; len(ua) == 1 && ua[0] == "" {
				delete(want, "User-Agent")
			}
			e := &exchange{r: r}
			e.shapeOutbound()
			got := http.Header{}
			for k, vv := range r.Header {
				if !e.SkipField(k) {
					got[k] = vv
				}
			}
			for _, f := range e.ExtraFields() {
				got[f.Name] = append(got[f.Name], f.Value)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("shaped %q\nwant   %q", got, want)
			}
		})
	}
}

func TestNamedIn(t *testing.T) {
	cases := []struct {
		conn []string
		k    string
		want bool
	}{
		{nil, "Keep-Alive", false},
		{[]string{"keep-alive"}, "Keep-Alive", true},
		{[]string{"close"}, "Keep-Alive", false},
		{[]string{"Upgrade, x-foo"}, "X-Foo", true},
		{[]string{" X-FOO ,bar"}, "X-Foo", true},
		{[]string{"close", "x-bar"}, "X-Bar", true},
		{[]string{"x-foo"}, "X-Foo-Bar", false},
		{[]string{"x-foo-bar"}, "X-Foo", false},
		{[]string{",,"}, "X-Foo", false},
		{[]string{"\u212aeep-alive"}, "Keep-Alive", false}, // the Kelvin sign folds to k in Unicode, not in ASCII
		{[]string{"x_foo"}, "X-Foo", false},
		{[]string{"x@foo"}, "X`foo", false}, // '@' and '`' differ by 0x20 but are not letters
	}
	for _, c := range cases {
		if got := namedIn(c.conn, c.k); got != c.want {
			t.Errorf("namedIn(%q, %q) = %v, want %v", c.conn, c.k, got, c.want)
		}
	}
}

// TestBackendHeaderIsTheGateways: the answer names the backend that
// answered, once, also when that backend sent the header itself (a gateway
// behind a gateway), and whether the server passes the answer's fields on
// without a header map (h1) or copies them into one (net/http).
func TestBackendHeaderIsTheGateways(t *testing.T) {
	for _, engine := range []string{"h1", "nethttp"} {
		t.Run(engine, func(t *testing.T) {
			inner := newBackend(t, "outer", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(BackendHeader, "inner")
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{}`)
			})
			h := newHarnessOn(t, Options{}, engine)
			h.g.SetBackends("p", []Backend{inner.backend("p")})
			resp, _ := h.do(t, http.MethodPost, "/api/chat", `{"model":"m","stream":false}`)
			if got := resp.Header.Values(BackendHeader); len(got) != 1 || got[0] != "outer" {
				t.Fatalf("%s = %q, want [outer]", BackendHeader, got)
			}
			if got := resp.Header.Get("Content-Type"); got != "application/json" {
				t.Fatalf("Content-Type = %q", got)
			}
		})
	}
}
