package h1

import (
	"io"
	"net/http"
	"runtime"
	"sync"
	"testing"
)

// loopCount is how many loops run.
func loopCount() int {
	loopsMu.Lock()
	defer loopsMu.Unlock()
	return len(loops)
}

// TestLightStreamsShareOneLoop: streams that keep no loop busy are packed
// onto one loop, however many cores there are (before, the package started
// one loop per core on first use); a loop measured busy has the next
// stream start another.
func TestLightStreamsShareOneLoop(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one core: one loop either way")
	}
	if n := loopCount(); n > 1 {
		t.Skipf("%d loops already run in this process", n)
	}
	const streams = 6
	backend, release, want := heldBackend(t, 5) // every stream is open at once
	cl := New(Options{})
	t.Cleanup(cl.Close)
	addr := loopProxy(t, cl, backend+"/stream")
	before, _ := LoopStats()

	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get("http://" + addr + "/s")
			if err != nil {
				t.Errorf("stream %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			if b, err := io.ReadAll(resp.Body); err != nil || string(b) != want {
				t.Errorf("stream %d: %q, %v", i, b, err)
			}
		}()
	}
	if !waitFor(func() bool { n, _ := LoopStats(); return n-before == streams }) {
		close(release)
		wg.Wait()
		t.Fatal("the streams did not all reach a loop")
	}
	close(release)
	wg.Wait()
	if n := loopCount(); n != 1 {
		t.Fatalf("%d loops carry %d light streams, want 1", n, streams)
	}

	// The loop measured busy (a window just closed at 90 %): the next
	// stream starts a second loop.
	loopsMu.Lock()
	l := loops[0]
	loopsMu.Unlock()
	l.sharePm.Store(900)
	l.shareAt.Store(mono())
	got, err := loopFor()
	l.shareAt.Store(0)
	if err != nil {
		t.Fatal(err)
	}
	if got == l || loopCount() != 2 {
		t.Fatalf("a busy loop: the next stream went to loop %p (the busy one: %p), %d loops run; want a second loop", got, l, loopCount())
	}
}

// onLoopSink is writerSink that notes, for each Emit, whether the stream's
// client connection was on the event loop then.
type onLoopSink struct {
	writerSink
	mu     *sync.Mutex
	onLoop *[]bool
}

func (s onLoopSink) Emit(p []byte, flush bool) error {
	on := findResponse(s.w).c.loop != nil
	s.mu.Lock()
	*s.onLoop = append(*s.onLoop, on)
	s.mu.Unlock()
	return s.writerSink.Emit(p, flush)
}

// TestEachOnLoopSendsWhatCameWithTheHead: a backend that answers at its
// first token sends the head and that token in one write; the token goes
// to the client from the handler's goroutine before the stream is handed
// to the loop, not on the loop's next turn (under load, that turn is the
// tail of the time to first token). The rest of the stream is the loop's.
func TestEachOnLoopSendsWhatCameWithTheHead(t *testing.T) {
	backend, release, want := heldBackend(t, 3) // the first line with the head, then held
	cl := New(Options{})
	t.Cleanup(cl.Close)
	var mu sync.Mutex
	var onLoop []bool
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, backend+"/stream", nil)
		resp, err := cl.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		if err := resp.Body.(*Body).EachOnLoop(w, onLoopSink{writerSink{w}, &mu, &onLoop}); err != nil {
			t.Errorf("EachOnLoop: %v", err)
		}
	})}
	ln, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Close() })
	before, _ := LoopStats()

	resp, err := http.Get("http://" + ln.Addr().String() + "/s")
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, len("{\"i\":0}\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		close(release)
		t.Fatalf("first line: %v", err)
	}
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if got := string(first) + string(rest); err != nil || got != want {
		t.Fatalf("body %q, %v; want %q", got, err, want)
	}
	if n, _ := LoopStats(); n-before != 1 {
		t.Fatalf("%d streams reached a loop, want 1 (the rest of the stream is the loop's)", n-before)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(onLoop) < 2 || onLoop[0] || !onLoop[len(onLoop)-1] {
		t.Fatalf("on the loop at each Emit: %v; want the first (the line that came with the head) off it, the last on it", onLoop)
	}
}
