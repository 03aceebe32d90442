package h1

import (
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is the server's http.ResponseWriter. It gathers the body in a
// pooled buffer: an answer the handler finishes without flushing goes out
// in one write, status line, headers (with its Content-Length) and body;
// a flush sends the head (chunked, on HTTP/1.1, unless the handler set a
// Content-Length) and what is gathered, in one write, and gives the
// buffer back, so a stream waiting for its next token holds none.
//
// The head reflects the header at WriteHeader, as with net/http: it is
// written into its own buffer then, and only the framing (Content-Length
// or Transfer-Encoding, Connection, Date and a sniffed Content-Type) is
// added when it goes out.
type response struct {
	c    *sconn
	req  *http.Request
	body *body

	header      http.Header
	pass        Fields // written after header's fields (PassFields)
	status      int
	wroteHeader bool // the status is decided
	headSent    bool

	head *[]byte // the head being built, from WriteHeader until it is sent
	buf  *[]byte // the gathered body bytes, at (*buf)[chunkRoom:], nil when none
	n    int

	// From the header at WriteHeader:
	length     int64 // the handler's Content-Length, -1 if none
	hasType    bool  // a Content-Type key is present (nil suppresses sniffing)
	hasDate    bool
	trailers   []string // declared in Trailer
	chunked    bool     // the body's framing once the head is sent
	closeAfter bool
	written    int64 // body bytes the handler wrote
	err        error // sticky: the first write error
}

const (
	bufSize   = 4 << 10
	chunkRoom = 18 // before the data: 16 hex digits and CRLF
	tailRoom  = 2  // after the data: CRLF
	bufData   = bufSize - chunkRoom - tailRoom
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) == bufSize {
		*b = (*b)[:bufSize]
		bufPool.Put(b)
	}
}

// reset makes w the writer of the connection's next request, keeping the
// last one's header map, if any, emptied.
func (w *response) reset(c *sconn, req *http.Request, b *body) {
	h := w.header
	if h != nil {
		h = recycle(h, 8)
	}
	*w = response{c: c, req: req, body: b, header: h}
}

// Header implements http.ResponseWriter.
func (w *response) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header, 8)
	}
	return w.header
}

// WriteHeader implements http.ResponseWriter.
func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.wroteHeader {
		return
	}
	if code < 200 {
		w.writeInformational(code)
		return
	}
	w.wroteHeader = true
	w.status = code
	h := w.header
	w.length = -1
	// A proxy that passes every field on (PassFields) leaves the header
	// empty: nothing to look up in it.
	inHeader := len(h) > 0
	if inHeader {
		w.readHeader(h)
	}
	hb := getBuf()
	b := appendStatusLine((*hb)[:0], w.req.ProtoMinor, code)
	if inHeader {
		b = appendFields(b, h)
	}
	// The passed fields (PassFields) that the header does not set, but for
	// those the server frames itself; they count as the header's would.
	for _, x := range w.pass {
		set := false
		if inHeader {
			_, set = h[x.Name]
		}
		if set || framing(x.Name) {
			if n, ok := parseLength(x.Value); ok && !set && x.Name == "Content-Length" && w.length < 0 {
				w.length = n
			}
			continue
		}
		switch x.Name {
		case "Content-Type":
			w.hasType = true
		case "Date":
			w.hasDate = true
		}
		b = append(b, x.Name...)
		b = append(b, ": "...)
		b = append(b, x.Value...)
		b = append(b, "\r\n"...)
	}
	*hb = b
	w.head = hb
}

// readHeader notes what the header says of the answer's framing: its
// length, type, date, trailers and Connection: close.
func (w *response) readHeader(h http.Header) {
	if v := h["Content-Length"]; len(v) > 0 {
		if n, ok := parseLength(strings.TrimSpace(v[0])); ok {
			w.length = n
		}
	}
	_, w.hasType = h["Content-Type"]
	_, w.hasDate = h["Date"]
	for _, v := range h["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" {
				w.trailers = append(w.trailers, k)
			}
		}
	}
	if httpguts.HeaderValuesContainsToken(h["Connection"], "close") {
		w.closeAfter = true
	}
}

// writeInformational sends a 1xx answer at once (103 Early Hints with the
// header as it is; 100 only if the server has not sent it yet).
func (w *response) writeInformational(code int) {
	if code == http.StatusContinue {
		if w.body != nil {
			w.body.sendContinue()
		}
		return
	}
	if code == http.StatusSwitchingProtocols || w.err != nil {
		return
	}
	hb := getBuf()
	b := appendStatusLine((*hb)[:0], w.req.ProtoMinor, code)
	b = appendFields(b, w.header)
	b = append(b, "\r\n"...)
	w.c.write(w, b)
	*hb = b
	putBuf(hb)
}

// bodyAllowed reports whether the status can have a body.
func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}

// Write implements http.ResponseWriter.
func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.req.Method == http.MethodHead {
		return len(p), nil
	}
	n := len(p)
	if w.headSent && w.n == 0 && n > bufData {
		return n, w.writeLarge(p)
	}
	// Gathered into the buffer, which goes out when full (so the first
	// bytes are there to sniff a Content-Type from).
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = getBuf()
		}
		k := copy((*w.buf)[chunkRoom+w.n:chunkRoom+bufData], p)
		w.n += k
		p = p[k:]
		if len(p) == 0 {
			break
		}
		if err := w.flushData(); err != nil {
			return n - len(p), err
		}
		if len(p) > bufData {
			return n, w.writeLarge(p)
		}
	}
	return n, nil
}

// WriteString implements io.StringWriter.
func (w *response) WriteString(s string) (int, error) {
	// Small strings are copied into the buffer without a conversion.
	if w.wroteHeader && w.err == nil && len(s) > 0 && w.n+len(s) <= bufData && bodyAllowed(w.status) &&
		w.req.Method != http.MethodHead && (w.length < 0 || w.written+int64(len(s)) <= w.length) {
		if w.buf == nil {
			w.buf = getBuf()
		}
		w.written += int64(len(s))
		w.n += copy((*w.buf)[chunkRoom+w.n:], s)
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// ReadFrom implements io.ReaderFrom, so that io.Copy to the response
// copies through a pooled buffer instead of allocating 32 KiB for each
// answer.
func (w *response) ReadFrom(r io.Reader) (int64, error) {
	bp := getBuf()
	defer putBuf(bp)
	return io.CopyBuffer(writerOnly{w}, r, *bp)
}

// writerOnly hides ReadFrom from io.CopyBuffer.
type writerOnly struct{ io.Writer }

// Flush implements http.Flusher: the head, if not yet sent, and what is
// gathered go out now.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush that reports a failed write (http.ResponseController
// uses it).
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	if !w.headSent {
		w.sendHead(false)
		return w.err
	}
	return w.flushData()
}

// flushData sends the gathered bytes (the head with them if it is not
// sent yet).
func (w *response) flushData() error {
	if !w.headSent {
		w.sendHead(false)
		return w.err
	}
	if w.n == 0 || w.err != nil {
		w.release()
		return w.err
	}
	w.c.write(w, w.frame(nil))
	w.release()
	return w.err
}

// frame returns the gathered bytes ready to send: after the head if head
// is not nil (copied in front of them when it fits), in a chunk when the
// body is chunked.
func (w *response) frame(head []byte) []byte {
	b := *w.buf
	start, end := chunkRoom, chunkRoom+w.n
	if w.chunked {
		var size [16]byte
		hex := strconv.AppendUint(size[:0], uint64(w.n), 16)
		start -= 2 + len(hex)
		copy(b[start:], hex)
		b[chunkRoom-2], b[chunkRoom-1] = '\r', '\n'
		b[end], b[end+1] = '\r', '\n'
		end += 2
	}
	if head == nil {
		return b[start:end]
	}
	return append(head, b[start:end]...)
}

// writeLarge sends p, larger than the buffer, without copying it.
func (w *response) writeLarge(p []byte) error {
	if !w.chunked {
		w.c.write(w, p)
		return w.err
	}
	var size [18]byte
	head := append(strconv.AppendUint(size[:0], uint64(len(p)), 16), '\r', '\n')
	bufs := net.Buffers{head, p, crlf}
	w.c.writeBuffers(w, &bufs)
	return w.err
}

var crlf = []byte("\r\n")

func (w *response) release() {
	w.n = 0
	if w.buf != nil {
		putBuf(w.buf)
		w.buf = nil
	}
}

// sendHead sends the head with the gathered bytes. final tells that the
// handler has returned: the body is all there, and its length known.
func (w *response) sendHead(final bool) {
	w.headSent = true
	hb := w.head
	w.head = nil
	b := *hb
	w.c.beforeHead(w)
	allowed := bodyAllowed(w.status)
	switch {
	case !allowed:
	case w.length >= 0:
		if w.req.Method != http.MethodHead || w.length > 0 {
			b = appendLength(b, w.length)
		}
	case final && len(w.trailers) == 0:
		if w.req.Method != http.MethodHead || w.written > 0 {
			b = appendLength(b, w.written)
		}
	case w.req.Method == http.MethodHead:
	case w.req.ProtoMinor == 1:
		w.chunked = true
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	default:
		w.closeAfter = true // HTTP/1.0: the body ends with the connection
	}
	if !w.hasType && allowed && w.n > 0 && w.req.Method != http.MethodHead {
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType((*w.buf)[chunkRoom:chunkRoom+min(w.n, 512)])...)
		b = append(b, "\r\n"...)
	}
	if !w.hasDate {
		b = append(b, "Date: "...)
		b = append(b, httpDate()...)
		b = append(b, "\r\n"...)
	}
	switch {
	case w.closeAfter:
		b = append(b, "Connection: close\r\n"...)
	case w.req.ProtoMinor == 0:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	b = append(b, "\r\n"...)
	if w.n > 0 {
		b = w.frame(b)
	}
	w.c.write(w, b)
	*hb = b
	putBuf(hb)
	w.release()
}

// finish completes the answer once the handler has returned.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return
	}
	if !w.headSent {
		w.sendHead(true)
		if !w.chunked {
			return
		}
	}
	if w.length >= 0 && w.written < w.length {
		w.closeAfter = true // the body is short: only a close tells the client
	}
	if !w.chunked {
		_ = w.flushData()
		return
	}
	if w.n > 0 {
		b := w.frame(nil)
		b = w.appendLastChunk(b)
		w.c.write(w, b)
		w.release()
		return
	}
	hb := getBuf()
	b := w.appendLastChunk((*hb)[:0])
	w.c.write(w, b)
	*hb = b
	putBuf(hb)
}

// appendLastChunk appends the last chunk and the trailers: the declared
// ones and those set with http.TrailerPrefix.
func (w *response) appendLastChunk(b []byte) []byte {
	b = append(b, "0\r\n"...)
	for _, k := range w.trailers {
		for _, v := range w.header[k] {
			b = appendField(b, k, v)
		}
	}
	for k, vv := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && name != "" {
			for _, v := range vv {
				b = appendField(b, http.CanonicalHeaderKey(name), v)
			}
		}
	}
	return append(b, "\r\n"...)
}

// appendStatusLine appends "HTTP/1.x code text\r\n".
func appendStatusLine(b []byte, minor, code int) []byte {
	if minor == 0 {
		b = append(b, "HTTP/1.0 "...)
	} else {
		b = append(b, "HTTP/1.1 "...)
	}
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, "\r\n"...)
}

// framing are the fields the server writes itself.
func framing(k string) bool {
	return k == "Content-Length" || k == "Transfer-Encoding" || k == "Connection"
}

// appendFields appends the header's fields, sorted by name, as net/http
// writes them: names that are not tokens are dropped, and line breaks in
// values become spaces. Fields set with http.TrailerPrefix and those the
// server frames itself are left out.
func appendFields(b []byte, h http.Header) []byte {
	var arr [24]string
	keys := arr[:0]
	for k := range h {
		if framing(k) || strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range h[k] {
			b = appendField(b, k, v)
		}
	}
	return b
}

func appendField(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, ": "...)
	start := len(b)
	b = append(b, strings.TrimSpace(v)...)
	for i := start; i < len(b); i++ {
		if c := b[i]; c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return append(b, "\r\n"...)
}

func appendLength(b []byte, n int64) []byte {
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, n, 10)
	return append(b, "\r\n"...)
}

// dateCache holds the Date header's value for the current second.
type dateCache struct {
	sec  int64
	text string
}

var lastDate atomic.Pointer[dateCache]

// httpDate returns the current time in the Date header's format, formatted
// once a second.
func httpDate() string {
	now := time.Now()
	if d := lastDate.Load(); d != nil && d.sec == now.Unix() {
		return d.text
	}
	d := &dateCache{sec: now.Unix(), text: now.UTC().Format(http.TimeFormat)}
	lastDate.Store(d)
	return d.text
}
