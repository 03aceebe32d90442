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
// take in one write (16 MB, more than loopback's socket buffers hold, to a
// backend that starts reading it only after three header timeouts) is
// still answered: the header timeout starts again when the rest of the
// request has been written (writeThenRead), as net/http's
// ResponseHeaderTimeout counts from the end of the request. The backend
// then reads what is buffered at full speed and answers at once, so the
// answer comes well within a timeout of the write's end.
func TestHeaderTimeoutCountsFromTheRequestsEnd(t *testing.T) {
	const size = 16 << 20
	const timeout = 300 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3 * timeout) // a backend slow to start reading: the behaviour under test, not a wait for a condition
		n, _ := io.Copy(io.Discard, r.Body)
		io.WriteString(w, strconv.FormatInt(n, 10))
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
