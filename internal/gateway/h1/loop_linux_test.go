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
