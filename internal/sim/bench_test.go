package sim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkServeChat measures the simulator's own overhead per request
// (no simulated delays): a streamed Ollama chat and a streamed OpenAI chat
// of 32 tokens over a real socket.
func BenchmarkServeChat(b *testing.B) {
	for _, tc := range []struct{ name, path, body string }{
		{"ollama", "/api/chat", `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hello"}]}`},
		{"openai", "/v1/chat/completions", `{"model":"qwen2:0.5b","stream":true,"messages":[{"role":"user","content":"hello"}]}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := New(Config{TTFT: -1, TokenTime: -1, MaxBatch: 64})
			defer s.Close()
			ts := httptest.NewServer(s)
			defer ts.Close()
			srv := ts.URL
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := http.Post(srv+tc.path, "application/json", strings.NewReader(tc.body))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
