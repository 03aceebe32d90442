//go:build linux

package h1

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// onLoop reports whether the request of ctx is served on a serve loop.
func onLoop(ctx context.Context) bool { return coroOf(ctx) != nil }

// TestServeLoopServesRequests: a default Server serves its connections on
// serve loops, many requests per connection and many connections at once,
// with bodies both ways and a backend reached through the Client on the
// same loop; NoLoops serves them on goroutines.
func TestServeLoopServesRequests(t *testing.T) {
	backend := serve(t, &Server{NoLoops: true, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "backend got %s", b)
	})})
	for _, noLoops := range []bool{false, true} {
		cl := New(Options{Dial: (&Dialer{}).DialContext})
		var mu sync.Mutex
		looped := 0
		addr := serve(t, &Server{NoLoops: noLoops, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if onLoop(r.Context()) {
				mu.Lock()
				looped++
				mu.Unlock()
			}
			body, _ := io.ReadAll(r.Body)
			req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://"+backend+"/", strings.NewReader(string(body)))
			resp, err := cl.RoundTrip(req)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Fprintf(w, "%s via %s", b, r.URL.Path)
		})})
		var wg sync.WaitGroup
		const conns, reqs = 8, 20
		errs := make(chan error, conns)
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				for j := range reqs {
					body := fmt.Sprintf("%d-%d", i, j)
					fmt.Fprintf(c, "POST /p%d HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", j, len(body), body)
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						errs <- err
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if want := fmt.Sprintf("backend got %s via /p%d", body, j); string(b) != want {
						errs <- fmt.Errorf("got %q, want %q", b, want)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("NoLoops %v: %v", noLoops, err)
		}
		cl.Close()
		if want := conns * reqs; !noLoops && looped != want {
			t.Errorf("%d of %d requests on a serve loop", looped, want)
		} else if noLoops && looped != 0 {
			t.Errorf("NoLoops: %d requests on a serve loop", looped)
		}
	}
}

// TestServeLoopNoticesAClientLeaving: a request on a serve loop that waits
// for its backend has its context cancelled, and the backend's connection
// closed, when the client leaves (the loop's watch, sconn.peek).
func TestServeLoopNoticesAClientLeaving(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // reads nothing, answers nothing
		}
	}()
	cl := New(Options{Dial: (&Dialer{}).DialContext})
	defer cl.Close()
	cancelled, waiting := make(chan error, 1), make(chan bool, 1)
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		waiting <- onLoop(r.Context())
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://"+silent.Addr().String()+"/", nil)
		if _, err := cl.RoundTrip(req); err == nil {
			t.Error("an answer from a silent backend")
		}
		cancelled <- r.Context().Err()
	})})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if !<-waiting {
		t.Fatal("the request is not on a serve loop")
	}
	c.Close()
	wantCancelled(t, cancelled, "the request")
}

// TestServeLoopDetach: a handler that detaches before it blocks leaves its
// serve loop to the other connections, which are served meanwhile; its own
// connection then serves its next request.
func TestServeLoopDetach(t *testing.T) {
	if _, err := nextServeLoop(); err != nil {
		t.Fatal(err)
	}
	release, blocked := make(chan struct{}), make(chan struct{})
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			Detach(r.Context())
			if onLoop(r.Context()) {
				t.Error("still on a loop after Detach")
			}
			close(blocked)
			<-release
		}
		fmt.Fprint(w, r.URL.Path)
	})})
	c, br := dialRaw(t, addr)
	_, _ = io.WriteString(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
	<-blocked
	// As many other connections as there are loops: one at least shares
	// the blocked request's.
	for i := range len(serveLoops) + 1 {
		if got := rawExchange(t, addr, fmt.Sprintf("GET /other%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", i)); !strings.HasSuffix(got, fmt.Sprintf("/other%d", i)) {
			t.Fatalf("another connection while one is blocked: %q", got)
		}
	}
	close(release)
	if got := readUntil(t, br, "\r\n\r\n/block"); !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") {
		t.Fatalf("blocked answer %q", got)
	}
	_, _ = io.WriteString(c, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	if got := readUntil(t, br, "\r\n\r\n/next"); !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") {
		t.Fatalf("next answer %q", got)
	}
}

// TestServeLoopCountsStalls: a handler that blocks on its serve loop
// without Detach is counted.
func TestServeLoopCountsStalls(t *testing.T) {
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if onLoop(r.Context()) {
			time.Sleep(2 * stallAfter) // the stall itself is what is tested
		}
		fmt.Fprint(w, "ok")
	})})
	before := LoopStalls()
	if got := rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasSuffix(got, "ok") {
		t.Fatalf("answer %q", got)
	}
	// Counted when the coroutine's turn ends, which may be after the
	// client has read the answer.
	if !waitFor(func() bool { return LoopStalls() > before }) {
		t.Fatal("a stall was not counted")
	}
}

// TestServeLoopHeadTimeout: a head that stalls on a serve loop is cut at
// ReadHeaderTimeout (the loop's deadline).
func TestServeLoopHeadTimeout(t *testing.T) {
	addr := serve(t, &Server{ReadHeaderTimeout: 50 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})})
	c, br := dialRaw(t, addr)
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost")
	start := time.Now()
	_, err := br.ReadByte()
	for err == nil {
		_, err = br.ReadByte() // a 408, if any, then the close
	}
	if err != io.EOF {
		t.Fatalf("read %v, want the server's close", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("closed after %v", d)
	}
}
