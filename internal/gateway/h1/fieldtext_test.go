package h1

import (
	"bytes"
	"strings"
	"testing"
)

// The field-text helpers against the standard library's functions they
// replace (they differ only in not building a byte set on each call).

func TestTrimOWS(t *testing.T) {
	for _, s := range []string{"", " ", "\t", "a", " a", "a\t", "\t a b \t", "  \t", "a\r", "\ra", " \x00 "} {
		if got, want := trimOWS(s), strings.Trim(s, " \t"); got != want {
			t.Errorf("trimOWS(%q) = %q, want %q", s, got, want)
		}
	}
}

func TestValidFieldName(t *testing.T) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		want := b > ' ' && b < 0x7f && strings.IndexByte(`"(),/:;<=>?@[\]{}`, b) < 0
		if got := validFieldName([]byte{'X', b}); got != want {
			t.Errorf("validFieldName(%q) = %v, want %v", []byte{'X', b}, got, want)
		}
	}
	for name, want := range map[string]bool{"": true, "Content-Type": true, "X-Api-Key": true, "a b": false, "a:b": false, "é": false} {
		if got := validFieldName([]byte(name)); got != want {
			t.Errorf("validFieldName(%q) = %v, want %v", name, got, want)
		}
	}
}

// appendFieldValue cleans a value as net/http's Header.Write does: trimmed
// of white space and line ends, and a CR or LF inside turned into a space.
func TestAppendFieldValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"text/plain", "text/plain"},
		{" \t a b \r\n", "a b"},
		{"a\r\nb", "a  b"},
		{"a\nb\rc", "a b c"},
		{"\r\n", ""},
	} {
		var b bytes.Buffer
		appendFieldValue(&b, tc.in)
		if b.String() != tc.want {
			t.Errorf("appendFieldValue(%q) wrote %q, want %q", tc.in, b.String(), tc.want)
		}
	}
}
