package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Writers as middleware in front of the gateway wrap it.
type (
	// flushErrWriter flushes through FlushError (as h1's and net/http's).
	flushErrWriter struct {
		http.ResponseWriter
		n *int
	}
	// plainFlushWriter flushes through http.Flusher only.
	plainFlushWriter struct {
		http.ResponseWriter
		n *int
	}
	// unwrapWriter flushes nothing itself: http.ResponseController reaches
	// what it wraps.
	unwrapWriter struct{ http.ResponseWriter }
	// opaqueWriter hides what it wraps: it cannot flush.
	opaqueWriter struct{ w http.ResponseWriter }
	// refusingWriter says it cannot flush when asked.
	refusingWriter struct{ http.ResponseWriter }
)

func (w flushErrWriter) FlushError() error           { *w.n++; return nil }
func (w plainFlushWriter) Flush()                    { *w.n++ }
func (w unwrapWriter) Unwrap() http.ResponseWriter   { return w.ResponseWriter }
func (w opaqueWriter) Header() http.Header           { return w.w.Header() }
func (w opaqueWriter) Write(p []byte) (int, error)   { return w.w.Write(p) }
func (w opaqueWriter) WriteHeader(code int)          { w.w.WriteHeader(code) }
func (w refusingWriter) FlushError() error           { return fmt.Errorf("refused: %w", http.ErrNotSupported) }
func (w refusingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestFlusherOf: flusherOf finds what http.ResponseController.Flush calls,
// in its order, through any depth of Unwrap.
func TestFlusherOf(t *testing.T) {
	var n int
	for _, tc := range []struct {
		name string
		w    http.ResponseWriter
		want int // flushes counted by one call; -1: no flusher
	}{
		{"FlushError", flushErrWriter{nil, &n}, 1},
		{"Flush", plainFlushWriter{nil, &n}, 1},
		{"FlushError under two Unwraps", unwrapWriter{unwrapWriter{flushErrWriter{nil, &n}}}, 1},
		{"Flush under an Unwrap", unwrapWriter{plainFlushWriter{nil, &n}}, 1},
		{"cannot flush", opaqueWriter{flushErrWriter{nil, &n}}, -1},
		{"unwraps to nothing", unwrapWriter{opaqueWriter{nil}}, -1},
	} {
		n = 0
		f := flusherOf(tc.w)
		if tc.want < 0 {
			if f != nil {
				t.Errorf("%s: a flusher, want none", tc.name)
			}
			if err := http.NewResponseController(tc.w).Flush(); !errors.Is(err, http.ErrNotSupported) {
				t.Errorf("%s: http.ResponseController finds one (%v)", tc.name, err)
			}
			continue
		}
		if f == nil {
			t.Errorf("%s: no flusher", tc.name)
			continue
		}
		if err := f(); err != nil || n != tc.want {
			t.Errorf("%s: flushed %d times (%v), want %d", tc.name, n, err, tc.want)
		}
		n = 0
		_ = http.NewResponseController(tc.w).Flush()
		if n != tc.want {
			t.Errorf("%s: http.ResponseController flushed %d times, flusherOf %d", tc.name, n, tc.want)
		}
	}
}

// TestStreamThroughWrappers: a stream through middleware in front of the
// gateway: each token reaches the client before the backend sends the
// next when the wrapper lets it flush (the backend waits for the client to
// have read it), and the whole answer arrives, unflushed, when it cannot
// (a wrapper that says so when asked is not the client gone).
func TestStreamThroughWrappers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wrap      func(http.ResponseWriter) http.ResponseWriter
		flushable bool
	}{
		{"none", func(w http.ResponseWriter) http.ResponseWriter { return w }, true},
		{"Unwrap", func(w http.ResponseWriter) http.ResponseWriter { return unwrapWriter{w} }, true},
		{"cannot flush", func(w http.ResponseWriter) http.ResponseWriter { return opaqueWriter{w} }, false},
		{"refuses to flush", func(w http.ResponseWriter) http.ResponseWriter { return refusingWriter{w} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := make(chan struct{}, 3)
			a := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/x-ndjson")
				for i := range 3 {
					fmt.Fprintf(w, "{\"token\":%d}\n", i)
					w.(http.Flusher).Flush()
					switch {
					case i == 2:
					case tc.flushable:
						select {
						case <-read:
						case <-time.After(5 * time.Second):
							t.Errorf("token %d did not reach the client", i)
							return
						}
					default:
						// Spaced, so that the gateway reads each token
						// apart and tries to flush it (not a wait for a
						// condition: the answer must arrive whole either
						// way).
						time.Sleep(20 * time.Millisecond)
					}
				}
			})
			g, err := New(Options{ProbeInterval: -1, WaitForBackend: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			g.SetBackends("p", []Backend{a.backend("p")})
			gs := Tuning{}.server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				g.ServeHTTP(tc.wrap(w), r)
			}), serverEngine)
			srv := listen(t, gs)
			defer func() { _ = gs.Close(); srv.wait(t) }()
			resp, err := http.Post(srv.URL+"/api/chat", "application/json", strings.NewReader(`{"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for i := range 3 {
				l, err := br.ReadString('\n')
				if want := fmt.Sprintf("{\"token\":%d}\n", i); err != nil || l != want {
					t.Fatalf("line %q, %v; want %q", l, err, want)
				}
				read <- struct{}{}
			}
			if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
				t.Fatalf("after the tokens: %q, %v", rest, err)
			}
			waitUntil(t, "the answer ends", func() bool { return g.InFlight("a") == 0 })
			if s := status(t, g, "a"); s.Failures != 0 {
				t.Errorf("the backend counted %d failures", s.Failures)
			}
		})
	}
}
