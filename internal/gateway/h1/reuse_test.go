package h1

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServerReusesPerConnection: on a kept-alive connection, a request
// costs the server one allocation, the string of its head; the request,
// its header map and URL, its body and the response writer are the last
// request's. The client is a raw one that allocates nothing.
func TestServerReusesPerConnection(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items: allocations are not the program's")
	}
	reply := []byte(`{"done":true}`)
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write(reply)
	})})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nUser-Agent: t\r\nContent-Type: application/json\r\nAuthorization: Bearer k\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	buf := make([]byte, 4096)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		// The answer comes in one write; it ends with the reply.
		n := 0
		for !bytes.HasSuffix(buf[:n], reply) {
			m, err := c.Read(buf[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += m
		}
	})
	if allocs > 1 {
		t.Errorf("%.1f allocations per request on a kept-alive connection, want at most 1 (the head's string)", allocs)
	}
}

// view is what a handler saw of its request, copied.
type view struct {
	method, url, host string
	header            string // the fields, sorted
	length            int64
	body              string
	respFields        int // fields in w.Header() when the handler began
	cancelled         bool
}

func viewOf(w http.ResponseWriter, r *http.Request) view {
	var fields []string
	for k, vv := range r.Header {
		fields = append(fields, k+"="+strings.Join(vv, ","))
	}
	slices.Sort(fields)
	b, _ := io.ReadAll(r.Body)
	return view{r.Method, r.URL.String(), r.Host, strings.Join(fields, " "), r.ContentLength, string(b),
		len(w.Header()), r.Context().Err() != nil}
}

// TestServerRequestsDoNotSeeEachOther: the requests of one connection
// share their objects (see Server), but a handler never sees anything of
// the request before, nor does a response carry the header the handler
// before set.
func TestServerRequestsDoNotSeeEachOther(t *testing.T) {
	views := make(chan view, 1)
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		views <- viewOf(w, r)
		// Each answer has a field named after its request's Host, and one
		// the handler sets and then deletes; the first has a trailer.
		w.Header().Set("X-Resp-"+r.Host, "1")
		w.Header().Set("X-Gone", "1")
		w.Header().Del("X-Gone")
		if r.Host == "a" {
			w.Header().Set("Trailer", "X-T")
		}
		_, _ = io.WriteString(w, r.URL.Path)
		if r.Host == "a" {
			w.Header().Set("X-T", "t")
		}
	})})
	c, br := dialRaw(t, addr)
	for _, tc := range []struct {
		req  string
		want view
	}{
		{"POST /one?q=1 HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nX-A: 2\r\nX-B: b\r\nContent-Length: 3\r\n\r\nabc",
			view{"POST", "/one?q=1", "a", "Content-Length=3 X-A=1,2 X-B=b", 3, "abc", 0, false}},
		{"GET /two HTTP/1.1\r\nHost: b\r\n\r\n",
			view{"GET", "/two", "b", "", 0, "", 0, false}},
		{"POST /three HTTP/1.1\r\nHost: c\r\nX-C: c\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nde\r\n0\r\n\r\n",
			view{"POST", "/three", "c", "X-C=c", -1, "de", 0, false}},
		{"GET /p%20q?r HTTP/1.1\r\nHost: d\r\nX-D: d\r\n\r\n",
			view{"GET", "/p%20q?r", "d", "X-D=d", 0, "", 0, false}},
		{"GET /five HTTP/1.1\r\nHost: e\r\n\r\n",
			view{"GET", "/five", "e", "", 0, "", 0, false}},
	} {
		path, host := tc.want.url, tc.want.host
		if _, err := io.WriteString(c, tc.req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		// The handler sent its view before it answered.
		select {
		case got := <-views:
			if got != tc.want {
				t.Errorf("%s: the handler saw\n%+v, want\n%+v", path, got, tc.want)
			}
		default:
			t.Fatalf("%s: answered %s without the handler", path, resp.Status)
		}
		u, _ := url.ParseRequestURI(path)
		want := []string{"X-Resp-" + strings.ToUpper(host)}
		var got []string
		for k := range resp.Header {
			if strings.HasPrefix(k, "X-") {
				got = append(got, k)
			}
		}
		if !reflect.DeepEqual(got, want) || string(body) != u.Path {
			t.Errorf("%s: answer with fields %v and body %q, want only %v of the X- fields and %q", path, got, body, want, u.Path)
		}
		if wantT := host == "a"; (resp.Trailer.Get("X-T") == "t") != wantT {
			t.Errorf("%s: trailer %v", path, resp.Trailer)
		}
	}
}

// TestParseTarget: a target is parsed as url.ParseRequestURI parses it,
// on the fast path or not.
func TestParseTarget(t *testing.T) {
	for _, target := range []string{
		"/", "/api/chat", "/v1/chat/completions?x=1&y=2", "/a?", "/a??", "/a?b?c", "//double/slash",
		"/a%20b", "/caf\xc3\xa9", "/a b", "/a!b", "/a'b", "/a*b", "/a;b=c,d:e@f$g&h+i", "/q?\x01",
		"/p\x7f", "*", "http://h:8080/p?q", "http://u:p@h/", "h/p", "", "/a#frag", "/%zz",
	} {
		var got url.URL
		err := parseTarget(target, &got)
		want, werr := url.ParseRequestURI(target)
		if (err == nil) != (werr == nil) {
			t.Errorf("parseTarget(%q): error %v, url.ParseRequestURI's %v", target, err, werr)
			continue
		}
		if err == nil && !reflect.DeepEqual(got, *want) { // DeepEqual: User is a pointer
			t.Errorf("parseTarget(%q) = %#v, url.ParseRequestURI %#v", target, got, *want)
		}
	}
}

// FuzzParseTarget checks parseTarget against url.ParseRequestURI.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"/", "/v1/chat/completions?stream=true", "/a?", "/a%2Fb", "*", "http://h/p", "/a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		var got url.URL
		err := parseTarget(target, &got)
		want, werr := url.ParseRequestURI(target)
		if (err == nil) != (werr == nil) || (err == nil && !reflect.DeepEqual(got, *want)) {
			t.Fatalf("parseTarget(%q) = %#v, %v; url.ParseRequestURI %#v, %v", target, got, err, want, werr)
		}
	})
}
