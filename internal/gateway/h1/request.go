package h1

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// headError is a request head the server refuses: the status it answers
// (400, 417, 431, 501, 505) and why.
type headError struct {
	status int
	msg    string
}

func (e *headError) Error() string { return e.msg }

func badHead(msg string) error { return &headError{http.StatusBadRequest, msg} }

// errHeadTooLarge is a head longer than the server's MaxHeaderBytes.
var errHeadTooLarge = &headError{http.StatusRequestHeaderFieldsTooLarge, "request header too large"}

// headReader reads request heads. It keeps, between requests on one
// connection, the scratch space a head is gathered in and what a request
// is made of besides its strings: the header map, the backing array of its
// values and the URL, which each head overwrites (the Server's contract:
// a handler keeps none of them once it returns).
type headReader struct {
	buf    []byte // the head's lines without their line ends
	ends   []int  // where each line ends in buf
	header http.Header
	vals   []string
	url    url.URL
}

// maxEmptyLines is how many empty lines before a request line are skipped
// (RFC 9112 section 2.2: a client may send a CRLF after a body).
const maxEmptyLines = 4

// read reads one request head from br, at most max bytes of request line
// and header lines, into req, whose fields other than its context must be
// zero. The request has no body; ContentLength tells how the body is
// framed (-1: chunked).
//
// It is stricter than net/http where a lenient reading is how requests are
// smuggled (RFC 9112 section 11.2): a request with both Content-Length and
// Transfer-Encoding, a transfer coding other than chunked, differing
// Content-Lengths, a header line folded onto the next (obs-fold) or a
// space before the colon are refused. Only HTTP/1.0 and HTTP/1.1 are
// served.
func (hr *headReader) read(br *bufio.Reader, max int, req *http.Request) error {
	hr.buf, hr.ends = hr.buf[:0], hr.ends[:0]
	total := 0
	skipped := 0
	for {
		line, err := readLine(br, hr.buf, max-total)
		if err != nil {
			return err
		}
		total += len(line) - len(hr.buf) + 2
		if len(hr.ends) == 0 && len(line) == len(hr.buf) {
			// An empty line before the request line.
			if skipped++; skipped > maxEmptyLines {
				return badHead("empty request line")
			}
			continue
		}
		if len(line) == len(hr.buf) {
			break // the end of the head
		}
		hr.buf = line
		hr.ends = append(hr.ends, len(line))
	}
	// Canonicalise the header names in place, so that the one string made
	// below holds them in their final form.
	start := hr.ends[0]
	for _, end := range hr.ends[1:] {
		line := hr.buf[start:end]
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
				return badHead("folded header line (obs-fold)")
			}
			return badHead("malformed header line: no name and colon")
		}
		if !validFieldName(line[:colon]) {
			return badHead("invalid header name " + strconv.Quote(string(line[:colon])))
		}
		canonicalize(line[:colon])
		start = end
	}
	s := string(hr.buf)
	return hr.build(s, req)
}

// headComplete reports whether b, the start of what a connection sent,
// holds a whole request head: after the empty lines a client may send
// before a request (which read skips), the empty line that ends a head,
// after a CRLF or a bare LF. Reading such a head cannot wait for the
// client. Pure.
func headComplete(b []byte) bool {
	i := 0
	for i < len(b) && (b[i] == '\r' || b[i] == '\n') {
		i++
	}
	b = b[i:]
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n"))
}

// buffered returns the bytes br holds, without reading.
func buffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// readLine appends the next line of br, without its line end (CRLF or a
// bare LF), to dst, reading at most max bytes.
func readLine(br *bufio.Reader, dst []byte, max int) ([]byte, error) {
	n := 0
	for {
		frag, err := br.ReadSlice('\n')
		n += len(frag)
		if n > max {
			return nil, errHeadTooLarge
		}
		switch {
		case err == nil:
			dst = append(dst, frag...)
			dst = dst[:len(dst)-1]
			if len(dst) > 0 && dst[len(dst)-1] == '\r' {
				dst = dst[:len(dst)-1]
			}
			return dst, nil
		case errors.Is(err, bufio.ErrBufferFull):
			dst = append(dst, frag...)
		default:
			return nil, err
		}
	}
}

// build fills req from the head s, whose lines end at hr.ends.
func (hr *headReader) build(s string, req *http.Request) error {
	line := s[:hr.ends[0]]
	method, rest, ok1 := strings.Cut(line, " ")
	uri, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "" || uri == "" {
		return badHead("malformed request line " + strconv.Quote(line))
	}
	if !validMethod(method) {
		return badHead("invalid method " + strconv.Quote(method))
	}
	method = internMethod(method)
	var minor int
	switch proto {
	case "HTTP/1.1":
		proto, minor = "HTTP/1.1", 1
	case "HTTP/1.0":
		proto, minor = "HTTP/1.0", 0
	default:
		if _, _, ok := http.ParseHTTPVersion(proto); ok {
			return &headError{http.StatusHTTPVersionNotSupported, "unsupported protocol version " + strconv.Quote(proto)}
		}
		return badHead("malformed protocol version " + strconv.Quote(proto))
	}
	u := &hr.url
	if parseTarget(uri, u) != nil {
		return badHead("invalid request target " + strconv.Quote(uri))
	}

	n := len(hr.ends) - 1
	h := recycle(hr.header, n)
	hr.header = h
	vals := hr.values(n)
	start := hr.ends[0]
	var seen framingSeen // which of the fields read below the head has
	for i, end := range hr.ends[1:] {
		line := s[start:end]
		start = end
		key, ok := addField(h, vals, i, line)
		if !ok {
			return badHead("invalid value of header " + key)
		}
		seen.note(key)
	}

	req.Method, req.URL, req.Proto, req.ProtoMajor, req.ProtoMinor = method, u, proto, 1, minor
	req.Header, req.RequestURI, req.Body = h, uri, http.NoBody
	var hosts []string
	if seen.has(seenHost) {
		hosts = h["Host"]
	}
	switch {
	case len(hosts) > 1:
		return badHead("more than one Host header")
	case len(hosts) == 0 && minor == 1:
		return badHead("missing required Host header")
	case len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]):
		return badHead("malformed Host header")
	}
	req.Host = u.Host
	if req.Host == "" && len(hosts) == 1 {
		req.Host = hosts[0]
	}
	if hosts != nil {
		delete(h, "Host")
	}

	var conn []string
	if seen.has(seenConnection) {
		conn = h["Connection"]
	}
	if minor == 1 {
		req.Close = httpguts.HeaderValuesContainsToken(conn, "close")
	} else {
		req.Close = !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
	}

	var te, cl []string
	if seen.has(seenTransferEncoding) {
		te = h["Transfer-Encoding"]
	}
	if seen.has(seenContentLength) {
		cl = h["Content-Length"]
	}
	switch {
	case te != nil && cl != nil:
		return badHead("both Transfer-Encoding and Content-Length")
	case te != nil:
		if minor == 0 {
			return badHead("Transfer-Encoding in an HTTP/1.0 request")
		}
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			return &headError{http.StatusNotImplemented, "unsupported Transfer-Encoding " + strconv.Quote(strings.Join(te, ", "))}
		}
		delete(h, "Transfer-Encoding")
		req.TransferEncoding = chunkedCoding
		req.ContentLength = -1
	case cl != nil:
		for _, v := range cl[1:] {
			if v != cl[0] {
				return badHead("differing Content-Length headers")
			}
		}
		n, ok := parseLength(cl[0])
		if !ok {
			return badHead("invalid Content-Length " + strconv.Quote(cl[0]))
		}
		req.ContentLength = n
	}
	if seen.has(seenExpect) {
		if ex := h["Expect"]; len(ex) != 1 || !strings.EqualFold(ex[0], "100-continue") {
			return &headError{http.StatusExpectationFailed, "unsupported Expect " + strconv.Quote(strings.Join(ex, ", "))}
		}
	}
	return nil
}

// framingSeen notes which of the fields that build reads after the
// loop a head has, so that it looks up only those in the header map.
type framingSeen uint8

const (
	seenHost framingSeen = 1 << iota
	seenConnection
	seenTransferEncoding
	seenContentLength
	seenExpect
)

// note records the canonical key of one of the head's fields.
func (f *framingSeen) note(key string) {
	switch key {
	case "Host":
		*f |= seenHost
	case "Connection":
		*f |= seenConnection
	case "Transfer-Encoding":
		*f |= seenTransferEncoding
	case "Content-Length":
		*f |= seenContentLength
	case "Expect":
		*f |= seenExpect
	}
}

func (f framingSeen) has(b framingSeen) bool { return f&b != 0 }

// maxKeptFields bounds the header map kept for the next request: a map
// that once held more names is dropped rather than cleared, so that one
// large head does not make clearing every later one slower.
const maxKeptFields = 64

// recycle returns h emptied, for a head of n fields, or a new map if h is
// nil or was grown by a large head.
func recycle(h http.Header, n int) http.Header {
	if h == nil || len(h) > maxKeptFields {
		return make(http.Header, n)
	}
	clear(h)
	return h
}

// values returns the backing array for the first values of a head's n
// fields: the last head's, cleared (none of its strings stays reachable
// through it), if it is large enough.
func (hr *headReader) values(n int) []string {
	if cap(hr.vals) < n {
		hr.vals = make([]string, n)
	}
	clear(hr.vals[:cap(hr.vals)])
	return hr.vals[:n]
}

// parseTarget parses a request target into u as url.ParseRequestURI
// does. An origin-form target whose path needs neither unescaping nor
// escaping (the usual one) is split without allocating; any other goes
// through url.ParseRequestURI.
func parseTarget(uri string, u *url.URL) error {
	path, query, hasQuery := strings.Cut(uri, "?")
	if len(path) > 0 && path[0] == '/' && plainPath(path) && !hasCTL(query) {
		*u = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
		return nil
	}
	p, err := url.ParseRequestURI(uri)
	if err != nil {
		return err
	}
	*u = *p
	return nil
}

// plainPath reports whether every byte of path is one that url's path
// escaping leaves as it is and that is not '%': then the path is its own
// unescaped form and needs no RawPath.
func plainPath(path string) bool {
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-_.~$&+,/:;=@", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// hasCTL reports whether s holds an ASCII control character, which
// url.ParseRequestURI refuses.
func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			return true
		}
	}
	return false
}

// addField adds a field line of a head ("Name: value", the name valid and
// canonical) to h: the value is trimmed, and kept in vals[i] if it is the
// name's first (a head's values share one backing array). It reports the
// name, and false if the value is not valid.
func addField(h http.Header, vals []string, i int, line string) (string, bool) {
	colon := strings.IndexByte(line, ':')
	key := line[:colon]
	if c, ok := commonHeader[key]; ok {
		key = c
	}
	v := trimOWS(line[colon+1:])
	if !httpguts.ValidHeaderFieldValue(v) {
		return key, false
	}
	if old := h[key]; old != nil {
		h[key] = append(old, v)
		return key, true
	}
	vals[i] = v
	h[key] = vals[i : i+1 : i+1]
	return key, true
}

// parseLength parses a Content-Length: decimal digits only.
func parseLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// validMethod reports whether m is a token (RFC 9110 section 9.1).
func validMethod(m string) bool {
	return validFieldName([]byte(m))
}

func internMethod(m string) string {
	switch m {
	case "GET":
		return http.MethodGet
	case "POST":
		return http.MethodPost
	case "HEAD":
		return http.MethodHead
	case "PUT":
		return http.MethodPut
	case "DELETE":
		return http.MethodDelete
	case "OPTIONS":
		return http.MethodOptions
	case "PATCH":
		return http.MethodPatch
	}
	return m
}

// canonicalize rewrites a header name in place as
// textproto.CanonicalMIMEHeaderKey would: its first letter and every letter
// after a hyphen upper case, the others lower case. k is a valid token.
func canonicalize(k []byte) {
	upper := true
	for i, c := range k {
		switch {
		case upper && 'a' <= c && c <= 'z':
			k[i] = c - ('a' - 'A')
		case !upper && 'A' <= c && c <= 'Z':
			k[i] = c + ('a' - 'A')
		}
		upper = c == '-'
	}
}

// commonHeader interns the names requests to an inference gateway carry,
// so that the header map's keys share these strings instead of the head's.
var commonHeader = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control",
		"Connection", "Content-Length", "Content-Type", "Cookie", "Expect", "Host",
		"Keep-Alive", "Origin", "Referer", "Traceparent", "Tracestate", "Transfer-Encoding",
		"User-Agent", "X-Api-Key", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
		"X-Real-Ip", "X-Request-Id", "X-Stainless-Arch", "X-Stainless-Lang", "X-Stainless-Os",
		"X-Stainless-Package-Version", "X-Stainless-Runtime", "X-Stainless-Runtime-Version",
		"X-Stainless-Retry-Count", "X-Stainless-Timeout", "Openai-Organization", "Openai-Project",
		"Access-Control-Request-Method", "Access-Control-Request-Headers",
	} {
		m[k] = k
	}
	return m
}()
