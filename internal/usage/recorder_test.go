package usage

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/sim"
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

// The usage of a stream reaches the ledger exactly once, whether or not the
// client asked for it (OpenAI API reference, "Create chat completion" →
// stream_options.include_usage: the usage chunk is "an additional chunk ...
// streamed before the data: [DONE] message"): through the real gateway onto
// the simulator.
func TestStreamUsageReachesTheLedger(t *testing.T) {
	s := sim.New(sim.Config{TTFT: -1, TokenTime: -1, InstanceID: "i-1"})
	backend := httptest.NewServer(s)
	t.Cleanup(func() { backend.Close(); s.Close() })

	ledger := cost.NewLedger(cost.Options{})
	info := cost.InstanceInfo{ID: "i-1", Pool: "chat", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a",
		InstanceType: "g5.xlarge", Market: market.Spot}
	start := time.Now().Add(-time.Minute)
	eff, list, err := (&cost.Resolver{Catalog: market.DefaultCatalog()}).Prices(info.Query(), start)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.Start(info, start, eff, list); err != nil {
		t.Fatal(err)
	}
	rec := &Recorder{Sink: func(id, model string, p, c int64) { ledger.AddTokens(id, model, p, c, time.Now()) }}
	gw, err := gateway.New(gateway.Options{ProbeInterval: -1, WaitForBackend: -1, OnUsage: rec.StreamUsage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	rec.Next = gw
	gw.SetBackends("chat", []gateway.Backend{{ID: "i-1", Pool: "chat", Address: strings.TrimPrefix(backend.URL, "http://")}})
	front := httptest.NewServer(rec)
	t.Cleanup(front.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream := func(base string, includeUsage bool) (openai.CompletionUsage, int) {
		c := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
		params := openai.ChatCompletionNewParams{
			Model:     "qwen2:0.5b",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("How many tokens is this?")},
			MaxTokens: openai.Int(9),
		}
		if includeUsage {
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		st := c.Chat.Completions.NewStreaming(ctx, params)
		var usage openai.CompletionUsage
		usageChunks := 0
		for st.Next() {
			if ch := st.Current(); len(ch.Choices) == 0 {
				usage = ch.Usage
				usageChunks++
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		return usage, usageChunks
	}
	// What the simulator generates for this request, asked straight.
	want, _ := stream(backend.URL, true)
	if want.CompletionTokens != 9 || want.PromptTokens == 0 {
		t.Fatalf("simulator's usage: %+v", want)
	}
	tokens := func() (prompt, completion float64) {
		for _, r := range ledger.Report("chat", cost.Window{To: time.Now().Add(time.Hour)}) {
			for _, m := range r.Models {
				if m.Model == "qwen2:0.5b" {
					prompt, completion = prompt+m.PromptTokens, completion+m.CompletionTokens
				}
			}
		}
		return prompt, completion
	}

	if _, n := stream(front.URL, false); n != 0 {
		t.Fatalf("client without include_usage got %d usage chunks", n)
	}
	if p, c := tokens(); p != float64(want.PromptTokens) || c != float64(want.CompletionTokens) {
		t.Fatalf("ledger after a stream without include_usage: %v prompt, %v completion; want %d, %d", p, c, want.PromptTokens, want.CompletionTokens)
	}
	if got, n := stream(front.URL, true); n != 1 || got.PromptTokens != want.PromptTokens || got.CompletionTokens != want.CompletionTokens {
		t.Fatalf("client with include_usage: %d usage chunks, %+v", n, got)
	}
	// The recorder reads the tail once the gateway's handler has returned,
	// which may be after the client has read the end of the stream.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		p, c := tokens()
		if p == 2*float64(want.PromptTokens) && c == 2*float64(want.CompletionTokens) {
			break
		}
		if time.Now().After(deadline) || p > 2*float64(want.PromptTokens) {
			t.Fatalf("ledger after both streams: %v prompt, %v completion; want twice %d, %d", p, c, want.PromptTokens, want.CompletionTokens)
		}
	}
}
