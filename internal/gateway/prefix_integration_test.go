package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/sim"
)

// simPool starts n simulators with a prefix cache behind a gateway with the
// default policy.
func simPool(t *testing.T, n int, cfg sim.Config) *harness {
	t.Helper()
	var set []Backend
	for i := range n {
		c := cfg
		c.InstanceID = fmt.Sprint("s", i)
		s := sim.New(c)
		srv := httptest.NewServer(s)
		t.Cleanup(func() { srv.Close(); s.Close() })
		set = append(set, Backend{ID: c.InstanceID, Pool: "p", Address: srv.Listener.Addr().String()})
	}
	h := newHarness(t, Options{})
	h.g.SetBackends("p", set)
	return h
}

func chatBody(msgs []map[string]string) string {
	b, _ := json.Marshal(map[string]any{"model": "qwen2:0.5b", "stream": false, "messages": msgs})
	return string(b)
}

// TestPrefixAffinityFollowsConversations: every turn of a multi-turn chat
// goes where its first turn went (its history is the longest prefix
// there), and the conversations of one system prompt share a home.
func TestPrefixAffinityFollowsConversations(t *testing.T) {
	h := simPool(t, 4, sim.Config{TTFT: -1, TokenTime: -1, OutputTokens: 4, PrefixCacheTokens: 1 << 16})
	for tenant := range 3 {
		sys := strings.Repeat(fmt.Sprintf("tenant %d rules. ", tenant), 60) // ~1 KB
		homes := map[string]bool{}
		for conv := range 3 {
			msgs := []map[string]string{{"role": "system", "content": sys}}
			first := ""
			for turn := range 4 {
				msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("question %d of conversation %d", turn, conv)})
				resp, body := h.do(t, http.MethodPost, "/v1/chat/completions", chatBody(msgs))
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				be := resp.Header.Get(BackendHeader)
				if first == "" {
					first = be
				} else if be != first {
					t.Errorf("tenant %d conversation %d turn %d went to %s, its first turn to %s", tenant, conv, turn, be, first)
				}
				msgs = append(msgs, map[string]string{"role": "assistant", "content": "answer " + fmt.Sprint(turn)})
			}
			homes[first] = true
		}
		if len(homes) != 1 {
			t.Errorf("tenant %d's conversations went to %v, want one home", tenant, homes)
		}
	}
}

// TestPrefixHotSpills: one hot prefix sent by more clients at once than a
// backend's batch holds spreads to other backends instead of queueing on
// its home; a short prompt (no prefix signal) is balanced on load.
func TestPrefixHotSpills(t *testing.T) {
	h := simPool(t, 3, sim.Config{TTFT: -1, TokenTime: 5 * time.Millisecond, OutputTokens: 40, MaxBatch: 2, PrefixCacheTokens: 1 << 16})
	sys := strings.Repeat("the one hot system prompt. ", 40)
	for _, tt := range []struct {
		name, content string
	}{{"hot prefix", sys}, {"no prefix signal", "hi"}} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[string]int{}
			var wg sync.WaitGroup
			for c := range 12 {
				wg.Go(func() {
					for i := range 3 {
						body := chatBody([]map[string]string{{"role": "system", "content": tt.content}, {"role": "user", "content": fmt.Sprint(c, i)}})
						resp, err := h.client.Post(h.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
						if err != nil {
							t.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						mu.Lock()
						got[resp.Header.Get(BackendHeader)]++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			for _, id := range []string{"s0", "s1", "s2"} {
				if got[id] < 4 {
					t.Errorf("%s got %d of 36 requests (%v): the load did not spill", id, got[id], got)
				}
			}
		})
	}
}
