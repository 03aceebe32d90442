package h1

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHeaderTimeoutCountsFromTheRequestsEnd: a request the socket does not
// take in one write (16 MB, to a backend that reads it slowly, for longer
// than the header timeout) is still answered: the header timeout starts
// again when the rest of the request has been written (writeThenRead), as
// net/http's ResponseHeaderTimeout counts from the end of the request.
func TestHeaderTimeoutCountsFromTheRequestsEnd(t *testing.T) {
	const size = 16 << 20
	const timeout = 300 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// 64 reads of 256 KB, 10 ms apart: at least 640 ms of writing.
		buf := make([]byte, 256<<10)
		n := 0
		for {
			m, err := io.ReadFull(r.Body, buf)
			n += m
			if err != nil {
				break
			}
			time.Sleep(10 * time.Millisecond) // a slow reader, not a wait for a condition
		}
		io.WriteString(w, strconv.Itoa(n))
	}))
	defer srv.Close()
	cl := New(Options{ResponseHeaderTimeout: timeout})
	defer cl.Close()
	start := time.Now()
	resp, err := cl.RoundTrip(newReq(t, context.Background(), "POST", srv.URL, strings.Repeat("x", size)))
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != strconv.Itoa(size) {
		t.Errorf("the backend read %s bytes, want %d", b, size)
	}
	if took := time.Since(start); took < timeout {
		t.Fatalf("the request took %v, less than the header timeout: it does not test the restart", took)
	}
}
