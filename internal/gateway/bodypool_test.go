package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPooledBodiesReachTheirBackend: request bodies read into pooled
// buffers (readBody) reach the backend whole and unmixed while other
// requests run at the same time, across a retry (the first backend answers
// 502 to every third request it gets, which the gateway retries on the
// other), and while streams whose bodies were given back at commit still
// run. Each backend checks the body it got against the digest the client
// put in a header. A buffer given back too early and reused by another
// request shows as a mismatch; checked by giving the buffer back in
// readBody, before the attempts: the test fails.
func TestPooledBodiesReachTheirBackend(t *testing.T) {
	var bad atomic.Int64
	var firstBad atomic.Value
	check := func(w http.ResponseWriter, r *http.Request) bool {
		b, err := io.ReadAll(r.Body)
		sum := sha256.Sum256(b)
		if err != nil || hex.EncodeToString(sum[:]) != r.Header.Get("X-Body-Sum") {
			if bad.Add(1) == 1 {
				firstBad.Store(fmt.Sprintf("%d bytes, err %v: %.80q", len(b), err, b))
			}
			http.Error(w, "body mismatch", http.StatusBadRequest)
			return false
		}
		return true
	}
	answer := func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("X-Stream"), "yes") {
			_, _ = io.WriteString(w, `{"done":true}`)
			return
		}
		// A stream outlives its request's body, given back at commit.
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := range 3 {
			fmt.Fprintf(w, "{\"i\":%d}\n", i)
			_ = rc.Flush()
			time.Sleep(2 * time.Millisecond) // the pace of tokens, not a wait for a condition
		}
	}
	var aCount atomic.Int64
	flaky := newBackend(t, "flaky", func(w http.ResponseWriter, r *http.Request) {
		if !check(w, r) {
			return
		}
		if aCount.Add(1)%3 == 0 {
			http.Error(w, "try another", http.StatusBadGateway)
			return
		}
		answer(w, r)
	})
	steady := newBackend(t, "steady", func(w http.ResponseWriter, r *http.Request) {
		if check(w, r) {
			answer(w, r)
		}
	})
	h := newHarness(t, Options{Policy: PolicyRoundRobin, EjectAfter: -1})
	h.g.SetBackends("p", []Backend{flaky.backend("p"), steady.backend("p")})

	const clients, each = 8, 40
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for i := range each {
				// 100 B to 20 KB, pooled; now and then past maxPooledBody.
				size := 100 + rng.IntN(20<<10)
				if i%17 == 0 {
					size = maxPooledBody + rng.IntN(4<<10)
				}
				content := make([]byte, size)
				for j := range content {
					content[j] = 'a' + byte(rng.IntN(26))
				}
				stream := i%4 == 0
				body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"%s"}],"stream":%v}`, content, stream)
				sum := sha256.Sum256([]byte(body))
				hdr := []string{"X-Body-Sum", hex.EncodeToString(sum[:])}
				if stream {
					hdr = append(hdr, "X-Stream", "yes")
				}
				resp, got := h.do(t, http.MethodPost, "/api/chat", body, hdr...)
				if resp.StatusCode != http.StatusOK {
					t.Errorf("client %d request %d (%d bytes): status %d: %.100q", c, i, len(body), resp.StatusCode, got)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d request bodies reached a backend changed; the first: %v", n, firstBad.Load())
	}
	if aCount.Load() < 3 {
		t.Fatalf("the flaky backend got %d requests: no retry was exercised", aCount.Load())
	}
}
