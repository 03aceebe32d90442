package gateway

import (
	"io"
	"net/http"
	"reflect"
	"testing"
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
