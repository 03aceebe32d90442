package sim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// words returns n distinct four-byte tokens (" a00", " a01", ...) under a
// prefix p, so that the tokenizer's count is exact.
func words(p string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, " %s%02x", p, i%256)
	}
	return b.String()
}

func TestTokenize(t *testing.T) {
	tests := []struct {
		text string
		want int
	}{
		{"", 0},
		{"a", 1},
		{" the", 1},
		{" the cat", 2},
		{" system", 2},     // " sys" "tem"
		{"hello world", 4}, // "hell" "o" " wor" "ld"
		{"\n\n\n\n\n", 2},
		{words("a", 10), 10},
	}
	for _, tt := range tests {
		if got := len(tokenize(tt.text)); got != tt.want {
			t.Errorf("tokenize(%q): %d tokens, want %d", tt.text, got, tt.want)
		}
	}
	a, b := tokenize(words("a", 20)+" x"), tokenize(words("a", 20)+" y")
	for i := range 20 {
		if a[i] != b[i] {
			t.Fatalf("token %d of a common prefix differs", i)
		}
	}
	if a[20] == b[20] {
		t.Fatal("different last words give the same token")
	}
}

func TestPrefixCacheAdmit(t *testing.T) {
	sys := words("s", 32)        // two blocks of 16
	other := words("o", 32)      // two other blocks
	hist := sys + words("h", 16) // sys's blocks and one more
	type step struct {
		model, text string
		wantHit     int
	}
	tests := []struct {
		name     string
		capacity int // tokens
		steps    []step
		wantLen  int // blocks cached at the end
	}{
		{"first sight misses", 64, []step{{"m", sys, 0}}, 2},
		{"same prompt hits its whole blocks", 64, []step{{"m", sys, 0}, {"m", sys, 32}}, 2},
		{"partial block is not cached", 64, []step{{"m", sys + " tail", 0}, {"m", sys + " tail", 32}}, 2},
		{"history extends the prefix", 64, []step{{"m", sys, 0}, {"m", hist, 32}, {"m", hist, 48}}, 3},
		{"another model is another cache key", 64, []step{{"m", sys, 0}, {"lora-a", sys, 0}}, 4},
		{"a different first block shares nothing", 64, []step{{"m", sys, 0}, {"m", other + sys, 0}}, 4}, // 6 blocks, 4 fit
		// sys's deeper block goes first: its first block still hits.
		{"LRU evicts the oldest, deepest first", 64, []step{{"m", sys, 0}, {"m", other, 0}, {"m", words("t", 16), 0}, {"m", sys, 16}}, 4},
		{"LRU evicts the oldest prompt whole", 64, []step{{"m", sys, 0}, {"m", other, 0}, {"m", words("t", 32), 0}, {"m", sys, 0}}, 4},
		// A history's own blocks go before the system prompt they extend
		// (vLLM: same last use, longer prefix evicted first).
		{"a shared prefix outlives a history on it", 64, []step{{"m", hist, 0}, {"m", other, 0}, {"m", sys, 32}}, 4},
		{"a hit refreshes recency", 64, []step{{"m", sys, 0}, {"m", other, 0}, {"m", sys, 32}, {"m", words("t", 32), 0}, {"m", sys, 32}}, 4},
		{"prompt larger than the cache keeps its head", 32, []step{{"m", hist, 0}, {"m", hist, 32}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newPrefixCache(tt.capacity, 16)
			for i, s := range tt.steps {
				if got := c.admit(s.model, tokenize(s.text)); got != s.wantHit {
					t.Errorf("step %d: %d tokens hit, want %d", i, got, s.wantHit)
				}
			}
			if got := c.lru.Len(); got != tt.wantLen {
				t.Errorf("%d blocks cached, want %d", got, tt.wantLen)
			}
			if got, want := c.usage(), float64(tt.wantLen)/float64(tt.capacity/16); got != want {
				t.Errorf("usage %v, want %v", got, want)
			}
		})
	}
	if newPrefixCache(15, 16) != nil || newPrefixCache(0, 0) != nil {
		t.Error("a cache smaller than a block must be off (nil)")
	}
}

func TestPrefillTime(t *testing.T) {
	ms := time.Millisecond
	base := Config{TTFT: 20 * ms, PrefillTokensPerSecond: 1000}.withDefaults()
	slow := base
	slow.SlowFactor = 3
	off := Config{TTFT: 20 * ms}.withDefaults()
	tests := []struct {
		name     string
		cfg      Config
		uncached int
		want     time.Duration
	}{
		{"all cached is the base prefill", base, 0, 20 * ms},
		{"1000 tokens at 1000/s add a second", base, 1000, 1020 * ms},
		{"slow factor multiplies both", slow, 100, 3 * 120 * ms},
		{"no prefill rate: length is free", off, 5000, 20 * ms},
		{"negative counts as none", base, -5, 20 * ms},
	}
	for _, tt := range tests {
		if got := prefillTime(tt.cfg, tt.uncached); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPrefixCacheServer sends the same long prompt twice through the HTTP
// API and checks the second is prefilled faster and counted as hits in
// vLLM's counters (names as in vLLM's metrics docs:
// https://docs.vllm.ai/en/latest/design/metrics.html).
func TestPrefixCacheServer(t *testing.T) {
	s := New(Config{TTFT: -1, TokenTime: -1, OutputTokens: 1, PrefixCacheTokens: 4096, PrefillTokensPerSecond: 2000})
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer s.Close()
	prompt := words("p", 400) // 400 tokens: 25 blocks, 200 ms of prefill uncached
	body := fmt.Sprintf(`{"model":"qwen2:0.5b","stream":false,"messages":[{"role":"system","content":%q},{"role":"user","content":"hi"}]}`, prompt)
	send := func() time.Duration {
		t.Helper()
		start := time.Now()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	first, second := send(), send()
	if first < 190*time.Millisecond {
		t.Errorf("first request took %v, want the prefill of 400 tokens (200 ms)", first)
	}
	if second > first/2 {
		t.Errorf("second request took %v, first %v: the cached prefix was prefilled again", second, first)
	}
	m := "qwen2:0.5b"
	queries := testutil.ToFloat64(s.met.prefixQueries.WithLabelValues(m))
	hits := testutil.ToFloat64(s.met.prefixHits.WithLabelValues(m))
	// The prompt is the system content, "\n", "hi", "\n": 400 + 2 tokens.
	if queries != 2*402 || hits != 400 {
		t.Errorf("queries %v hits %v, want %d and 400", queries, hits, 2*402)
	}
	if n, err := testutil.GatherAndCount(s.met.reg, metricPrefixQueries, metricPrefixHits, metricPrefixUsage); err != nil || n != 3 {
		t.Errorf("gathered %d of the prefix-cache series (%v), want 3", n, err)
	}
}
