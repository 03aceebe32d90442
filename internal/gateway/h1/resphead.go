package h1

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// maxResponseHead bounds a response head (status line, header lines and
// the empty line). A head longer than the connection's read buffer is read
// into a larger buffer, up to this.
const maxResponseHead = 64 << 10

var errResponseHeadTooLarge = errors.New("h1: response head too large")

// respError is a response head the client refuses.
type respError struct{ msg string }

func (e *respError) Error() string { return "h1: " + e.msg }

func badResp(msg string) error { return &respError{msg} }

// readResponseHead reads one response head from c's buffer, reading more
// as needed, and hands its bytes on. The response has no Body.
func readResponseHead(c *conn, req *http.Request, pass bool) (*respHold, error) {
	from := 0 // where the line not yet scanned for the head's end starts
	for {
		buf := c.buffered()
		n, next := scanHead(buf, from)
		if n >= 0 {
			hold, err := parseResponseHead(buf[:n], req, pass)
			if err != nil {
				return nil, err
			}
			c.consume(n)
			return hold, nil
		}
		from = next
		if len(buf) >= maxResponseHead {
			return nil, errResponseHeadTooLarge
		}
		if c.raw != nil && len(buf) == len(*c.raw) {
			// The buffer is full of an unfinished head: a larger one.
			nb := make([]byte, min(2*len(buf), maxResponseHead))
			m := copy(nb, buf)
			c.release()
			c.raw, c.r, c.w = &nb, 0, m
		}
		if err := c.readMore(); err != nil {
			return nil, err
		}
	}
}

// scanHead looks in b, from the line starting at from, for the empty line
// that ends a head. It returns the head's length through that line's LF,
// or -1 and where the first line not yet ended starts.
func scanHead(b []byte, from int) (int, int) {
	for {
		i := bytes.IndexByte(b[from:], '\n')
		if i < 0 {
			return -1, from
		}
		if i == 0 || (i == 1 && b[from] == '\r') {
			return from + i + 1, from
		}
		from += i + 1
	}
}

// respHold is what one response head makes, in one allocation: the
// Response, its Body (set by the client), and room for the fields of a
// typical head passed on (Options.PassHeads). A short answer made three
// allocations of these before.
type respHold struct {
	resp     http.Response
	body     Body
	fields   Fields // passed on: the head's fields, in fieldArr if they fit
	fieldArr [8]Field
}

// parseResponseHead parses a whole response head b (as scanHead found it:
// lines ending in CRLF or a bare LF, the last one empty). It rewrites the
// header names in b in place. The response's header values are slices of
// one string holding the head.
//
// The fields are set as http.ReadResponse sets them, but it is stricter
// (RFC 9112 section 11: what a lenient reading lets through is how
// responses are split): only HTTP/1.0 and HTTP/1.1, a three-digit status
// code of at least 100, no control character in the status line, no
// header line folded onto the next (obs-fold), no space before a colon, no
// invalid header name or value, no Transfer-Encoding in an HTTP/1.0
// response nor one other than a single chunked, no Transfer-Encoding with
// a Content-Length, no differing Content-Lengths, nor one that is not
// digits.
func parseResponseHead(b []byte, req *http.Request, pass bool) (*respHold, error) {
	// Line ends (the index of each LF), and the header names canonicalised
	// in place, so that the one string made below holds them in their final
	// form.
	var arr [40]int
	ends := arr[:0]
	for start := 0; ; {
		i := bytes.IndexByte(b[start:], '\n')
		if i < 0 {
			return nil, badResp("unterminated response head")
		}
		end := start + i
		line := b[start:end]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) == 0 {
			break
		}
		if len(ends) > 0 {
			colon := bytes.IndexByte(line, ':')
			if colon <= 0 {
				if line[0] == ' ' || line[0] == '\t' {
					return nil, badResp("folded header line (obs-fold) in response")
				}
				return nil, badResp("malformed response header line " + quote(line))
			}
			if !validFieldName(line[:colon]) {
				return nil, badResp("invalid response header name " + quote(line[:colon]))
			}
			canonicalize(line[:colon])
		}
		ends = append(ends, end)
		start = end + 1
	}
	if len(ends) == 0 {
		return nil, badResp("malformed HTTP response: empty status line")
	}
	s := string(b)

	// The status line: proto, code, reason.
	status := lineAt(s, 0, ends[0])
	for i := 0; i < len(status); i++ {
		if c := status[i]; c < ' ' || c == 0x7f {
			return nil, badResp("control character in status line " + strconv.Quote(status))
		}
	}
	proto, rest, ok := strings.Cut(status, " ")
	if !ok {
		return nil, badResp("malformed HTTP response " + strconv.Quote(status))
	}
	hold := &respHold{resp: http.Response{Request: req, ProtoMajor: 1}}
	resp := &hold.resp
	switch proto {
	case "HTTP/1.1":
		resp.Proto, resp.ProtoMinor = "HTTP/1.1", 1
	case "HTTP/1.0":
		resp.Proto, resp.ProtoMinor = "HTTP/1.0", 0
	default:
		return nil, badResp("unsupported HTTP version " + strconv.Quote(proto))
	}
	resp.Status = strings.TrimLeft(rest, " ")
	code, _, _ := strings.Cut(resp.Status, " ")
	if len(code) != 3 || code[0] < '1' || code[0] > '9' || code[1] < '0' || code[1] > '9' || code[2] < '0' || code[2] > '9' {
		return nil, badResp("malformed HTTP status code " + strconv.Quote(code))
	}
	resp.StatusCode = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')

	// The header: one map sized to the lines, one backing array of values;
	// or, passed on, the lines as they are (Fields). The framing fields are
	// gathered from either.
	n := len(ends) - 1
	var (
		h      http.Header
		fields Fields
		fr     framingFields
	)
	start := ends[0] + 1
	if pass {
		fields = hold.fieldArr[:0]
		if n > len(hold.fieldArr) {
			fields = make(Fields, 0, n)
		}
		for _, end := range ends[1:] {
			line := lineAt(s, start, end)
			start = end + 1
			key, v, ok := splitField(line)
			if !ok {
				return nil, badResp("invalid value of response header " + key)
			}
			fields = append(fields, Field{Name: key, Value: v})
			fr.add(key, v)
		}
	} else {
		h = make(http.Header, n)
		vals := make([]string, n)
		for i, end := range ends[1:] {
			line := lineAt(s, start, end)
			start = end + 1
			if key, ok := addField(h, vals, i, line); !ok {
				return nil, badResp("invalid value of response header " + key)
			}
		}
		resp.Header = h
		if p := h["Pragma"]; len(p) > 0 && p[0] == "no-cache" && h["Cache-Control"] == nil {
			h["Cache-Control"] = []string{"no-cache"}
		}
		for _, k := range [...]string{"Connection", "Transfer-Encoding", "Content-Length", "Trailer"} {
			for _, v := range h[k] {
				fr.add(k, v)
			}
		}
	}

	// Connection, as net/http's shouldClose (it removes a Connection:
	// close of HTTP/1.1).
	if resp.ProtoMinor == 0 {
		resp.Close = fr.close || !fr.keepAlive
	} else {
		resp.Close = fr.close
		if fr.close && h != nil {
			delete(h, "Connection")
		}
	}

	chunked := false
	if fr.te > 0 {
		switch {
		case resp.ProtoMinor == 0:
			return nil, badResp("Transfer-Encoding in an HTTP/1.0 response")
		case fr.cl > 0:
			return nil, badResp("both Transfer-Encoding and Content-Length in response")
		case fr.te != 1 || !strings.EqualFold(fr.te0, "chunked"):
			return nil, badResp("unsupported transfer encoding " + strconv.Quote(fr.teAll))
		}
		if h != nil {
			delete(h, "Transfer-Encoding")
		}
		resp.TransferEncoding = chunkedCoding
		chunked = true
	}
	length := int64(-1)
	if fr.cl > 0 {
		if fr.clDiffer {
			return nil, badResp("differing Content-Length headers in response")
		}
		if cl := h["Content-Length"]; len(cl) > 1 {
			h["Content-Length"] = cl[:1:1]
		}
		var ok bool
		if length, ok = parseLength(fr.cl0); !ok {
			return nil, badResp("invalid Content-Length " + strconv.Quote(fr.cl0))
		}
	}

	// The body's length as net/http's fixLength has it; a HEAD response's
	// ContentLength is the Content-Length, though it has no body.
	code3 := resp.StatusCode
	noBody := code3/100 == 1 || code3 == http.StatusNoContent || code3 == http.StatusNotModified
	head := req != nil && req.Method == http.MethodHead
	switch {
	case head:
		resp.ContentLength = length
	case noBody:
		resp.ContentLength = 0
	case chunked:
		resp.ContentLength = -1
	default:
		resp.ContentLength = length
		if length < 0 {
			resp.Close = true // the body ends when the connection does
		}
	}

	if len(fr.trailer) > 0 && chunked {
		if h != nil {
			delete(h, "Trailer")
		}
		resp.Trailer = http.Header{}
		for _, v := range fr.trailer {
			for _, k := range strings.Split(v, ",") {
				k = trimOWS(k)
				if k == "" {
					continue
				}
				k = http.CanonicalHeaderKey(k)
				switch k {
				case "Transfer-Encoding", "Trailer", "Content-Length":
					return nil, badResp("bad trailer key " + strconv.Quote(k))
				}
				resp.Trailer[k] = nil
			}
		}
		if len(resp.Trailer) == 0 {
			resp.Trailer = nil
		}
	}
	hold.fields = fields
	return hold, nil
}

// framingFields are what a response head's framing fields say, gathered
// from its lines or its header map.
type framingFields struct {
	close, keepAlive bool // Connection tokens
	te               int  // Transfer-Encoding values
	te0, teAll       string
	cl               int // Content-Length values
	cl0              string
	clDiffer         bool
	trailer          []string
}

// add takes in one field of the head (the name canonical).
func (f *framingFields) add(k, v string) {
	switch k {
	case "Connection":
		for t := range strings.SplitSeq(v, ",") {
			switch t = trimOWS(t); {
			case strings.EqualFold(t, "close"):
				f.close = true
			case strings.EqualFold(t, "keep-alive"):
				f.keepAlive = true
			}
		}
	case "Transfer-Encoding":
		if f.te == 0 {
			f.te0, f.teAll = v, v
		} else {
			f.teAll += ", " + v
		}
		f.te++
	case "Content-Length":
		if f.cl == 0 {
			f.cl0 = v
		} else if v != f.cl0 {
			f.clDiffer = true
		}
		f.cl++
	case "Trailer":
		f.trailer = append(f.trailer, v)
	}
}

// chunkedCoding is the TransferEncoding of a chunked response or request,
// shared by all of them (nothing changes it).
var chunkedCoding = []string{"chunked"}

// lineAt returns s[start:end] without a CR before the LF at end.
func lineAt(s string, start, end int) string {
	if end > start && s[end-1] == '\r' {
		end--
	}
	return s[start:end]
}

func quote(b []byte) string {
	if len(b) > 80 {
		b = b[:80]
	}
	return strconv.Quote(string(b))
}

// Response header names interned by commonHeader, besides the request ones.
var commonResponseHeaders = []string{
	"Date", "Server", "Vary", "Trailer", "Etag", "Last-Modified", "Expires", "Pragma",
	"Content-Encoding", "Content-Language", "Location", "Set-Cookie", "Retry-After",
	"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials",
	"Access-Control-Allow-Headers", "Access-Control-Allow-Methods",
	"Access-Control-Expose-Headers", "Access-Control-Max-Age",
	"Strict-Transport-Security", "X-Content-Type-Options", "X-Frame-Options",
	"Openai-Processing-Ms", "Openai-Version", "X-Ratelimit-Limit-Requests",
	"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Requests",
	"X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens",
}

func init() {
	for _, k := range commonResponseHeaders {
		commonHeader[k] = k
	}
}
