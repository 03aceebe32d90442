package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"testing"
)

// decodeAll runs the decoder over in, fed in pieces of at most step bytes,
// as the connection would (unconsumed bytes kept in front of the next
// piece), and returns the data, whether it ended, and the error.
func decodeAll(in []byte, step int) (data []byte, done bool, trailer http.Header, err error) {
	var d chunkDecoder
	var buf []byte
	for off := 0; ; {
		if off < len(in) {
			end := min(off+step, len(in))
			buf = append(buf, in[off:end]...)
			off = end
		}
		for {
			skip, n, ferr := d.frame(buf)
			if skip < 0 || skip+n > len(buf) {
				panic("frame out of bounds")
			}
			buf = buf[skip:]
			if ferr != nil {
				return data, false, d.trailer, ferr
			}
			if n == 0 {
				break
			}
			data = append(data, buf[:n]...)
			buf = buf[n:]
			d.take(n)
		}
		if d.done() {
			return data, true, d.trailer, nil
		}
		if off == len(in) {
			return data, false, d.trailer, io.ErrUnexpectedEOF
		}
	}
}

func TestChunkDecoder(t *testing.T) {
	for _, tc := range []struct {
		name, in, data string
		trailer        http.Header
		err            error // nil: decodes to the end
	}{
		{"one chunk", "5\r\nhello\r\n0\r\n\r\n", "hello", nil, nil},
		{"several", "3\r\nabc\r\n1\r\nd\r\n0\r\n\r\n", "abcd", nil, nil},
		{"hex upper and lower", "A\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n", "01234567890123456789", nil, nil},
		{"extension", "3;name=value\r\nabc\r\n0\r\n\r\n", "abc", nil, nil},
		{"bare LF size line", "3\nabc\r\n0\n\n", "abc", nil, nil},
		{"trailer", "3\r\nabc\r\n0\r\nX-Usage: 12\r\nx-other:  v \r\n\r\n", "abc",
			http.Header{"X-Usage": {"12"}, "X-Other": {"v"}}, nil},
		{"empty body", "0\r\n\r\n", "", nil, nil},
		{"truncated data", "5\r\nhel", "hel", nil, io.ErrUnexpectedEOF},
		{"missing end", "3\r\nabc\r\n", "abc", nil, io.ErrUnexpectedEOF},
		{"bad size", "x\r\nabc\r\n0\r\n\r\n", "", nil, errMalformed},
		{"empty size", "\r\nabc\r\n", "", nil, errMalformed},
		{"no CRLF after data", "3\r\nabcd\r\n0\r\n\r\n", "abc", nil, errMalformed},
		{"too long", "11111111111111111\r\n", "", nil, errChunkLength},
		{"over 63 bits", "8000000000000000\r\n", "", nil, errChunkLength},
		{"bad trailer", "0\r\nno colon\r\n\r\n", "", nil, errMalformed},
		{"long line", strings.Repeat("0", maxLine+10), "", nil, errLineTooLong},
	} {
		for _, step := range []int{1, 2, 3, 7, 1 << 20} {
			data, done, tr, err := decodeAll([]byte(tc.in), step)
			if string(data) != tc.data {
				t.Errorf("%s (step %d): data %q, want %q", tc.name, step, data, tc.data)
			}
			if err != tc.err {
				t.Errorf("%s (step %d): err %v, want %v", tc.name, step, err, tc.err)
			}
			if tc.err == nil && !done {
				t.Errorf("%s (step %d): not done", tc.name, step)
			}
			if tc.trailer != nil && !equalHeader(tr, tc.trailer) {
				t.Errorf("%s (step %d): trailer %v, want %v", tc.name, step, tr, tc.trailer)
			}
		}
	}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}

// FuzzChunkDecoder: the decoder never panics or reads out of bounds, gives
// the same result however the input is split, and agrees with net/http's
// chunked reader on every input both decode to the end.
func FuzzChunkDecoder(f *testing.F) {
	for _, s := range []string{"5\r\nhello\r\n0\r\n\r\n", "3;x=y\r\nabc\r\n0\r\nA: b\r\n\r\n", "0\r\n\r\n", "ff\r\n", "1\r\na\n0\r\n\r\n"} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		whole, wholeDone, _, wholeErr := decodeAll(in, len(in)+1)
		split, splitDone, _, splitErr := decodeAll(in, int(step)%17+1)
		if wholeDone != splitDone || (wholeErr == nil) != (splitErr == nil) || !bytes.HasPrefix(whole, split) && !bytes.HasPrefix(split, whole) {
			t.Fatalf("split changes the result: whole %q %v %v, split %q %v %v", whole, wholeDone, wholeErr, split, splitDone, splitErr)
		}
		if !wholeDone {
			return
		}
		// net/http reads the chunks; the trailer section is the transport's
		// (textproto), so compare the data only.
		std, err := io.ReadAll(httputil.NewChunkedReader(bufio.NewReader(bytes.NewReader(in))))
		if err == nil && !bytes.Equal(std, whole) {
			t.Fatalf("data %q, net/http's %q", whole, std)
		}
	})
}
