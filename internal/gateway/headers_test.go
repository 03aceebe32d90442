package gateway

import (
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
