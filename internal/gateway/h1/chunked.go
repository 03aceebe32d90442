package h1

import (
	"bytes"
	"errors"
	"net/http"
	"net/textproto"
	"strings"
)

// maxLine bounds a chunk-size line and a trailer line (net/http's chunked
// reader allows 4096 bytes for the former). A line must fit in one read
// buffer.
const maxLine = 4096

var (
	errMalformed   = errors.New("h1: malformed chunked encoding")
	errLineTooLong = errors.New("h1: chunk header or trailer line too long")
	errChunkLength = errors.New("h1: chunk length too large")
)

type chunkState uint8

const (
	stSize    chunkState = iota // expecting a chunk-size line
	stData                      // inside a chunk's data, left bytes to go
	stDataEnd                   // expecting the CRLF after a chunk's data
	stTrailer                   // expecting trailer lines up to a blank one
	stDone                      // the body ended
)

// chunkDecoder decodes HTTP/1.1 chunked transfer coding (RFC 9112 section
// 7.1) incrementally, over whatever bytes have arrived, without copying:
// frame skips the framing at the start of the bytes it is given and says
// how many bytes of data follow. It is pure; the caller owns the bytes.
type chunkDecoder struct {
	st      chunkState
	left    uint64      // data bytes left in the current chunk
	trailer http.Header // trailer fields, if any
}

// done reports whether the terminating chunk and its trailer section were
// read.
func (d *chunkDecoder) done() bool { return d.st == stDone }

// frame consumes the framing at the start of b. It returns skip, the bytes
// of framing consumed, and data, the bytes of chunk data that follow them
// (b[skip:skip+data]), which the caller passes on and then reports with
// take. data 0 and no error means: more bytes are needed (or, if done, the
// body ended at b[skip:]). A line longer than maxLine is an error.
func (d *chunkDecoder) frame(b []byte) (skip, data int, err error) {
	i := 0
	for {
		switch d.st {
		case stData:
			if i == len(b) {
				return i, 0, nil
			}
			return i, int(min(d.left, uint64(len(b)-i))), nil
		case stDataEnd:
			if len(b)-i < 2 {
				if len(b)-i == 1 && b[i] != '\r' {
					return i, 0, errMalformed
				}
				return i, 0, nil
			}
			if b[i] != '\r' || b[i+1] != '\n' {
				return i, 0, errMalformed
			}
			i += 2
			d.st = stSize
		case stSize, stTrailer:
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				if len(b)-i >= maxLine {
					return i, 0, errLineTooLong
				}
				return i, 0, nil
			}
			if j >= maxLine {
				return i, 0, errLineTooLong
			}
			line := b[i : i+j]
			i += j + 1
			if d.st == stSize {
				n, err := parseChunkSize(line)
				if err != nil {
					return i, 0, err
				}
				if n == 0 {
					d.st = stTrailer
				} else {
					d.st, d.left = stData, n
				}
				continue
			}
			line = bytes.TrimSuffix(line, []byte("\r"))
			if len(line) == 0 {
				d.st = stDone
				return i, 0, nil
			}
			if err := d.addTrailer(line); err != nil {
				return i, 0, err
			}
		case stDone:
			return i, 0, nil
		}
	}
}

// take records that n of the data bytes frame reported were consumed.
func (d *chunkDecoder) take(n int) {
	d.left -= uint64(n)
	if d.left == 0 && d.st == stData {
		d.st = stDataEnd
	}
}

// parseChunkSize parses a chunk-size line (without its LF): hex digits,
// optionally followed by a chunk extension after ';' (ignored) and
// whitespace, as net/http's chunked reader accepts it.
func parseChunkSize(line []byte) (uint64, error) {
	line = bytes.TrimRight(line, " \t\r")
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 {
		return 0, errMalformed
	}
	if len(line) > 16 {
		return 0, errChunkLength
	}
	var n uint64
	for _, c := range line {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, errMalformed
		}
		n = n<<4 | uint64(c)
	}
	if n >= 1<<63 {
		return 0, errChunkLength
	}
	return n, nil
}

// addTrailer adds one "Name: value" trailer line.
func (d *chunkDecoder) addTrailer(line []byte) error {
	k, v, ok := bytes.Cut(line, []byte(":"))
	if !ok || len(k) == 0 || !validFieldName(k) {
		return errMalformed
	}
	if d.trailer == nil {
		d.trailer = http.Header{}
	}
	key := textproto.CanonicalMIMEHeaderKey(string(k))
	d.trailer[key] = append(d.trailer[key], strings.TrimSpace(string(v)))
	return nil
}

// validFieldName reports whether k is an RFC 9110 token.
func validFieldName(k []byte) bool {
	for _, c := range k {
		if !tokenByte[c] {
			return false
		}
	}
	return true
}

// tokenByte tells the bytes a token (a field name, RFC 9110 section 5.6.2)
// may hold: visible ASCII but the delimiters.
var tokenByte = func() (t [256]bool) {
	for c := '!'; c < 0x7f; c++ {
		t[c] = !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c)
	}
	return t
}()

// trimOWS trims the optional white space around a field value (spaces and
// tabs, RFC 9110 section 5.6.3), as strings.Trim(s, " \t") does without
// building its set on each call.
func trimOWS(s string) string { return trimFunc(s, isOWS) }

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

func isSpaceOrLineEnd(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// trimFunc trims the bytes drop reports from both ends of s.
func trimFunc(s string, drop func(byte) bool) string {
	for len(s) > 0 && drop(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && drop(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}
