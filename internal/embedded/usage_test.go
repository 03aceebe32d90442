package embedded

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

func TestParseUsage(t *testing.T) {
	cases := []struct {
		name             string
		tail             string
		model            string
		prompt, complete int64
		ok               bool
	}{
		{"ollama whole answer", `{"model":"qwen2:0.5b","message":{"role":"assistant","content":"x"},"done":true,"prompt_eval_count":12,"eval_count":24}`, "qwen2:0.5b", 12, 24, true},
		{"ollama stream, last line counts", "{\"model\":\"m\",\"done\":false}\n{\"model\":\"m\",\"done\":true,\"prompt_eval_count\":3,\"eval_count\":7}\n", "m", 3, 7, true},
		{"openai whole answer", `{"model":"qwen2:0.5b","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}`, "qwen2:0.5b", 5, 9, true},
		{"openai stream usage chunk", "data: {\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n", "m", 2, 4, true},
		// The Responses API (the OpenAI API reference, "The response
		// object" and the response.completed streaming event).
		{"responses whole answer", `{"id":"resp_1","object":"response","model":"m","output":[{"type":"message","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":6,"input_tokens_details":{"cached_tokens":0},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":9}}`, "m", 6, 3, true},
		{"responses stream, completed event", "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"m\",\"usage\":{\"input_tokens\":4,\"output_tokens\":8,\"total_tokens\":12}}}\n\n", "m", 4, 8, true},
		{"a delta quoting usage is text, not usage", "data: {\"type\":\"response.output_text.delta\",\"delta\":\"\\\"output_tokens\\\":5\"}\n\n", "", 0, 0, false},
		// Embeddings count prompt tokens only (Ollama docs/api.md
		// "Generate Embeddings"; the OpenAI embeddings response object).
		{"ollama embed", `{"model":"m","embeddings":[[0.1,0.2]],"total_duration":1,"prompt_eval_count":5}`, "m", 5, 0, true},
		{"openai embeddings", `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"m","usage":{"prompt_tokens":7,"total_tokens":7}}`, "m", 7, 0, true},
		{"unfinished stream", "{\"model\":\"m\",\"done\":false}\n", "m", 0, 0, false},
		{"error", `{"error":"model not found"}`, "", 0, 0, false},
	}
	for _, tc := range cases {
		m, p, c, ok := ParseUsage([]byte(tc.tail))
		if m != tc.model || p != tc.prompt || c != tc.complete || ok != tc.ok {
			t.Errorf("%s: ParseUsage = %q %d %d %t, want %q %d %d %t", tc.name, m, p, c, ok, tc.model, tc.prompt, tc.complete, tc.ok)
		}
	}
}

func TestTailWriterKeepsTheEnd(t *testing.T) {
	tw := &tailWriter{ResponseWriter: nopWriter{}}
	var all bytes.Buffer
	for i := 0; i < 500; i++ {
		chunk := []byte(strings.Repeat("x", i%37) + "\n")
		all.Write(chunk)
		tw.keep(chunk)
	}
	want := all.Bytes()[all.Len()-len(tw.tail()):]
	if len(tw.tail()) < tailSize/2 || !bytes.Equal(tw.tail(), want) {
		t.Fatalf("tail of %d bytes is not the end of the answer", len(tw.tail()))
	}
	big := bytes.Repeat([]byte("y"), 3*tailSize)
	tw.keep(big)
	if len(tw.tail()) != tailSize {
		t.Fatalf("tail after a big write = %d bytes, want %d", len(tw.tail()), tailSize)
	}
}

type nopWriter struct{}

func (nopWriter) Header() http.Header         { return http.Header{} }
func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriter) WriteHeader(int)             {}

func FuzzParseUsage(f *testing.F) {
	f.Add([]byte(`{"model":"m","done":true,"prompt_eval_count":3,"eval_count":7}`))
	f.Add([]byte(`{"usage":{"prompt_tokens":2,"completion_tokens":4}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, p, c, ok := ParseUsage(b)
		if p < 0 || c < 0 || (!ok && (p != 0 || c != 0)) {
			t.Fatalf("ParseUsage(%q) = %d %d %t", b, p, c, ok)
		}
	})
}
