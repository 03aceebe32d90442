package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const testModel = "qwen2:0.5b"

// fastConfig is a quick backend for tests.
func fastConfig() Config {
	return Config{
		Models:       []string{testModel, "llama3.2"},
		TTFT:         2 * time.Millisecond,
		TokenTime:    500 * time.Microsecond,
		OutputTokens: 8,
		InstanceID:   "sim-test",
	}
}

// startServer serves a simulator over a real socket for the test's duration.
func startServer(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	s := New(cfg)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(s.Close) // runs first: aborts leftover generations
	return s, ts
}

func ollamaClient(t *testing.T, ts *httptest.Server) *api.Client {
	t.Helper()
	u, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	return api.NewClient(u, http.DefaultClient)
}

func openAIClient(ts *httptest.Server) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(ts.URL+"/v1/"),
		option.WithAPIKey("test-key"),
		option.WithMaxRetries(0),
	)
}

// expectedText is the deterministic answer of n tokens starting at seed.
func expectedText(seed, n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(tokenText(seed, i))
	}
	return b.String()
}

func TestOllamaChatStreaming(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := ollamaClient(t, ts)
	msgs := []api.Message{{Role: "user", Content: "Why is the sea salty?"}}
	var chunks []api.ChatResponse
	err := c.Chat(testCtx(t), &api.ChatRequest{Model: testModel, Messages: msgs}, func(r api.ChatResponse) error {
		chunks = append(chunks, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 8+1 {
		t.Fatalf("got %d chunks, want 8 tokens + final", len(chunks))
	}
	var text strings.Builder
	for i, ch := range chunks {
		if ch.Model != testModel || ch.Message.Role != "assistant" || ch.CreatedAt.IsZero() {
			t.Errorf("chunk %d = %+v", i, ch)
		}
		if ch.Done != (i == len(chunks)-1) {
			t.Errorf("chunk %d: done = %v", i, ch.Done)
		}
		text.WriteString(ch.Message.Content)
	}
	seed := textSeed("Why is the sea salty?\n")
	if got, want := text.String(), expectedText(seed, 8); got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
	final := chunks[len(chunks)-1]
	if final.DoneReason != "stop" || final.EvalCount != 8 || final.PromptEvalCount != promptTokenEstimate(len("Why is the sea salty?")) {
		t.Errorf("final = %+v", final)
	}
	if final.TotalDuration <= 0 || final.PromptEvalDuration <= 0 || final.EvalDuration <= 0 ||
		final.TotalDuration < final.PromptEvalDuration+final.EvalDuration {
		t.Errorf("durations = %+v", final.Metrics)
	}
}

func TestOllamaChatNonStreaming(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := ollamaClient(t, ts)
	stream := false
	var got []api.ChatResponse
	err := c.Chat(testCtx(t), &api.ChatRequest{
		Model:    "llama3.2:latest", // resolves to "llama3.2"
		Messages: []api.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}},
		Stream:   &stream,
		Options:  map[string]any{"num_predict": 3, "temperature": 0.2},
	}, func(r api.ChatResponse) error {
		got = append(got, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("got %d responses, want 1", len(got))
	}
	r := got[0]
	want := expectedText(textSeed("Be brief.\nHi\n"), 3)
	if !r.Done || r.DoneReason != "length" || r.EvalCount != 3 || r.Message.Content != want || r.Model != "llama3.2:latest" {
		t.Errorf("response = %+v, want content %q", r, want)
	}
}

func TestOllamaChatLoadOnly(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	var got []api.ChatResponse
	err := ollamaClient(t, ts).Chat(testCtx(t), &api.ChatRequest{Model: testModel}, func(r api.ChatResponse) error {
		got = append(got, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Done || got[0].DoneReason != "load" {
		t.Fatalf("responses = %+v", got)
	}
}

func TestOllamaGenerate(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := ollamaClient(t, ts)
	for _, stream := range []bool{true, false} {
		var text strings.Builder
		var final api.GenerateResponse
		n := 0
		err := c.Generate(testCtx(t), &api.GenerateRequest{Model: testModel, Prompt: "Tell a story", Stream: &stream},
			func(r api.GenerateResponse) error {
				n++
				text.WriteString(r.Response)
				final = r
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		wantN := 1
		if stream {
			wantN = 9
		}
		if n != wantN || !final.Done || final.DoneReason != "stop" || final.EvalCount != 8 {
			t.Errorf("stream=%v: %d responses, final %+v", stream, n, final)
		}
		if got, want := text.String(), expectedText(textSeed("\nTell a story"), 8); got != want {
			t.Errorf("stream=%v: text = %q, want %q", stream, got, want)
		}
	}
}

func TestOllamaListVersionPS(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := ollamaClient(t, ts)
	ctx := testCtx(t)
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Models) != 2 || list.Models[0].Name != testModel || list.Models[1].Model != "llama3.2" {
		t.Fatalf("models = %+v", list.Models)
	}
	if d := list.Models[0].Details; d.Family != "qwen" || d.ParameterSize != "0.5B" || d.Format != "gguf" {
		t.Errorf("details = %+v", d)
	}
	if list.Models[0].Digest == "" || list.Models[0].Size <= 0 {
		t.Errorf("model = %+v", list.Models[0])
	}
	v, err := c.Version(ctx)
	if err != nil || v == "" {
		t.Fatalf("version = %q, %v", v, err)
	}
	ps, err := c.ListRunning(ctx)
	if err != nil || len(ps.Models) != 2 {
		t.Fatalf("ps = %+v, %v", ps, err)
	}
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOllamaErrors(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := ollamaClient(t, ts)
	err := c.Chat(testCtx(t), &api.ChatRequest{Model: "nope", Messages: []api.Message{{Role: "user", Content: "x"}}},
		func(api.ChatResponse) error { return nil })
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || se.ErrorMessage != `model "nope" not found, try pulling it first` {
		t.Fatalf("unknown model error = %#v", err)
	}
}

func TestOpenAIChat(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	params := openai.ChatCompletionNewParams{
		Model: testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are terse."),
			openai.UserMessage("What is a tide?"),
		},
	}
	resp, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := expectedText(textSeed("You are terse.\nWhat is a tide?\n"), 8)
	if len(resp.Choices) != 1 || resp.Choices[0].Message.Content != want || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("choices = %+v, want content %q", resp.Choices, want)
	}
	prompt := int64(promptTokenEstimate(len("You are terse.") + len("What is a tide?")))
	if u := resp.Usage; u.PromptTokens != prompt || u.CompletionTokens != 8 || u.TotalTokens != prompt+8 {
		t.Errorf("usage = %+v", u)
	}
	if resp.Object != "chat.completion" || resp.Model != testModel || !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Created == 0 {
		t.Errorf("response = %+v", resp)
	}

	params.MaxCompletionTokens = openai.Int(2)
	resp, err = c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.CompletionTokens != 2 || resp.Choices[0].FinishReason != "length" {
		t.Errorf("limited: %+v", resp)
	}
}

func TestOpenAIChatStreaming(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	params := openai.ChatCompletionNewParams{
		Model:         testModel,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Stream please")},
		MaxTokens:     openai.Int(5),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	var text strings.Builder
	chunks, usageChunks := 0, 0
	var finish string
	for stream.Next() {
		ch := stream.Current()
		acc.AddChunk(ch)
		chunks++
		if ch.Object != "chat.completion.chunk" {
			t.Errorf("object = %q", ch.Object)
		}
		for _, choice := range ch.Choices {
			text.WriteString(choice.Delta.Content)
			if choice.FinishReason != "" {
				finish = choice.FinishReason
			}
		}
		if len(ch.Choices) == 0 {
			usageChunks++
			if ch.Usage.CompletionTokens != 5 || ch.Usage.TotalTokens != ch.Usage.PromptTokens+5 {
				t.Errorf("usage chunk = %+v", ch.Usage)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	// role chunk + 5 tokens + finish chunk + usage chunk
	if chunks != 8 || usageChunks != 1 || finish != "length" {
		t.Errorf("chunks = %d, usage chunks = %d, finish = %q", chunks, usageChunks, finish)
	}
	want := expectedText(textSeed("Stream please\n"), 5)
	if text.String() != want || acc.Choices[0].Message.Content != want {
		t.Errorf("text = %q, accumulated %q, want %q", text.String(), acc.Choices[0].Message.Content, want)
	}
	if acc.Usage.CompletionTokens != 5 {
		t.Errorf("accumulated usage = %+v", acc.Usage)
	}

	// Same prompt without streaming: same deterministic answer.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	resp, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != want {
		t.Errorf("non-streamed = %q, want %q", resp.Choices[0].Message.Content, want)
	}
}

func TestOpenAICompletions(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	params := openai.CompletionNewParams{
		Model:  testModel,
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
	}
	resp, err := c.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := expectedText(textSeed("Once upon a time"), 8)
	if len(resp.Choices) != 1 || resp.Choices[0].Text != want || resp.Usage.CompletionTokens != 8 {
		t.Fatalf("completion = %+v", resp)
	}
	stream := c.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			text.WriteString(ch.Text)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != want {
		t.Errorf("streamed = %q, want %q", text.String(), want)
	}
}

func TestOpenAIModelsAndErrors(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	page, err := c.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || page.Data[0].ID != testModel || page.Data[0].Object != "model" {
		t.Fatalf("models = %+v", page.Data)
	}
	m, err := c.Models.Get(ctx, testModel)
	if err != nil || m.ID != testModel {
		t.Fatalf("model = %+v, %v", m, err)
	}

	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "gpt-nope",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" ||
		apiErr.Type != "invalid_request_error" || !strings.Contains(apiErr.Message, "gpt-nope") {
		t.Fatalf("unknown model error = %v", err)
	}
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     testModel,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
		MaxTokens: openai.Int(0),
	})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "max_tokens" {
		t.Fatalf("max_tokens=0 error = %v", err)
	}
}

// TestRawHTTP checks wire details the SDKs hide.
func TestRawHTTP(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	do := func(method, path, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(testCtx(t), method, ts.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get(InstanceHeader); got != "sim-test" {
			t.Errorf("%s %s: %s = %q", method, path, InstanceHeader, got)
		}
		return resp, string(b)
	}

	tests := []struct {
		name, method, path, body string
		status                   int
		contains                 string
	}{
		{"root", "GET", "/", "", 200, "Ollama is running"},
		{"healthz", "GET", "/healthz", "", 200, "ok"},
		{"ollama bad json", "POST", "/api/chat", "{", 400, `{"error":"invalid JSON body`},
		{"ollama empty body", "POST", "/api/generate", "", 400, `{"error":"missing request body"}`},
		{"ollama no model", "POST", "/api/chat", `{"messages":[]}`, 400, `{"error":"model is required"}`},
		{"ollama bad option", "POST", "/api/chat", `{"model":"qwen2:0.5b","options":{"num_predict":"x"}}`, 400, "num_predict"},
		{"ollama unknown model", "POST", "/api/generate", `{"model":"x","prompt":"p"}`, 404, `{"error":"model \"x\" not found, try pulling it first"}`},
		{"openai bad json", "POST", "/v1/chat/completions", "[1,", 400, `"type":"invalid_request_error"`},
		{"openai unknown model", "POST", "/v1/chat/completions", `{"model":"x","messages":[{"role":"user","content":"hi"}]}`, 404, `"code":"model_not_found"`},
		{"openai content parts", "POST", "/v1/chat/completions", `{"model":"qwen2:0.5b","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, 200, `"finish_reason":"length"`},
		{"openai bad content", "POST", "/v1/chat/completions", `{"model":"qwen2:0.5b","messages":[{"role":"user","content":5}]}`, 400, `"param":"messages[0].content"`},
		{"wrong method", "GET", "/api/chat", "", 405, ""},
		{"unknown path", "GET", "/nope", "", 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(tt.method, tt.path, tt.body)
			if resp.StatusCode != tt.status || !strings.Contains(body, tt.contains) {
				t.Errorf("%s %s = %d %q, want %d containing %q", tt.method, tt.path, resp.StatusCode, body, tt.status, tt.contains)
			}
		})
	}

	t.Run("ollama ndjson", func(t *testing.T) {
		resp, body := do("POST", "/api/chat", `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"options":null}`)
		if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
			t.Errorf("content type %q", ct)
		}
		lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
		if len(lines) != 9 {
			t.Fatalf("%d lines: %q", len(lines), body)
		}
		var final map[string]any
		if err := json.Unmarshal([]byte(lines[8]), &final); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"model", "created_at", "message", "done", "done_reason", "total_duration",
			"load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"} {
			if _, ok := final[k]; !ok {
				t.Errorf("final chunk lacks %q: %s", k, lines[8])
			}
		}
	})

	t.Run("openai sse", func(t *testing.T) {
		resp, body := do("POST", "/v1/chat/completions",
			`{"model":"qwen2:0.5b","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			t.Errorf("content type %q", ct)
		}
		events := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
		if events[len(events)-1] != "data: [DONE]" {
			t.Errorf("last event %q", events[len(events)-1])
		}
		for _, ev := range events[:len(events)-1] {
			var chunk struct {
				Object string          `json:"object"`
				Usage  json.RawMessage `json:"usage"`
			}
			data, ok := strings.CutPrefix(ev, "data: ")
			if !ok || json.Unmarshal([]byte(data), &chunk) != nil || chunk.Object != "chat.completion.chunk" || chunk.Usage == nil {
				t.Errorf("bad event %q", ev)
			}
		}
	})
}

// metricFamilies scrapes and parses /metrics.
func metricFamilies(t *testing.T, ts *httptest.Server) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), "GET", ts.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// metricValue returns the value of name's series with model_name=model.
func metricValue(t *testing.T, mfs map[string]*dto.MetricFamily, name, modelName string) float64 {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("metric %s missing", name)
	}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == labelModelName && l.GetValue() == modelName {
				switch {
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Histogram != nil:
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	t.Fatalf("metric %s has no series for model %s", name, modelName)
	return 0
}

func TestMetrics(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	mfs := metricFamilies(t, ts)
	types := map[string]dto.MetricType{
		"vllm:num_requests_running":          dto.MetricType_GAUGE,
		"vllm:num_requests_waiting":          dto.MetricType_GAUGE,
		"vllm:kv_cache_usage_perc":           dto.MetricType_GAUGE,
		"vllm:time_to_first_token_seconds":   dto.MetricType_HISTOGRAM,
		"vllm:e2e_request_latency_seconds":   dto.MetricType_HISTOGRAM,
		"vllm:time_per_output_token_seconds": dto.MetricType_HISTOGRAM,
		"vllm:request_queue_time_seconds":    dto.MetricType_HISTOGRAM,
		"vllm:prompt_tokens_total":           dto.MetricType_COUNTER,
		"vllm:generation_tokens_total":       dto.MetricType_COUNTER,
		"vllm:request_success_total":         dto.MetricType_COUNTER,
	}
	for name, typ := range types {
		mf := mfs[name]
		if mf == nil {
			t.Errorf("metric %s missing before any request", name)
			continue
		}
		if mf.GetType() != typ {
			t.Errorf("metric %s has type %v, want %v", name, mf.GetType(), typ)
		}
		metricValue(t, mfs, name, testModel)
		metricValue(t, mfs, name, "llama3.2")
	}
	if mfs["tidegpu_sim_gpu_utilization"] == nil {
		t.Error("tidegpu_sim_gpu_utilization missing")
	}
	info := mfs["tidegpu_sim_info"]
	if info == nil || info.GetMetric()[0].GetLabel()[0].GetValue() != "sim-test" {
		t.Errorf("tidegpu_sim_info = %v", info)
	}

	oc := openAIClient(ts)
	_, err := oc.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{
		Model:    testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("12345678")},
	})
	if err != nil {
		t.Fatal(err)
	}
	mfs = metricFamilies(t, ts)
	for name, want := range map[string]float64{
		"vllm:prompt_tokens_total":           2,
		"vllm:generation_tokens_total":       8,
		"vllm:time_to_first_token_seconds":   1,
		"vllm:e2e_request_latency_seconds":   1,
		"vllm:time_per_output_token_seconds": 1,
		"vllm:request_queue_time_seconds":    1,
		"vllm:num_requests_running":          0,
		"vllm:num_requests_waiting":          0,
		"vllm:kv_cache_usage_perc":           0,
	} {
		if got := metricValue(t, mfs, name, testModel); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := metricValue(t, mfs, "vllm:generation_tokens_total", "llama3.2"); got != 0 {
		t.Errorf("other model generation tokens = %v", got)
	}
	if u := mfs["tidegpu_sim_gpu_utilization"].GetMetric()[0].GetGauge().GetValue(); u < 0 || u > 1 {
		t.Errorf("utilization = %v", u)
	}
}

// longChat starts an Ollama chat that generates until ctx is cancelled; the
// returned channel reports its error.
func longChat(c *api.Client, ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- c.Chat(ctx, &api.ChatRequest{
			Model:    testModel,
			Messages: []api.Message{{Role: "user", Content: "go on forever"}},
			Options:  map[string]any{"num_predict": MaxOutputTokens},
		}, func(api.ChatResponse) error { return nil })
	}()
	return done
}

func TestQueueing(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxBatch = 2
	cfg.TokenTime = time.Millisecond
	s, ts := startServer(t, cfg)
	c := ollamaClient(t, ts)
	ctx, cancel := context.WithCancel(testCtx(t))
	var errs []<-chan error
	for range 5 {
		errs = append(errs, longChat(c, ctx))
	}
	if !s.adm.waitFor(testCtx(t), func(l load) bool { return l.running == 2 && l.waiting == 3 }) {
		t.Fatalf("load = %+v, want 2 running and 3 waiting", s.adm.stats())
	}
	mfs := metricFamilies(t, ts)
	if got := metricValue(t, mfs, "vllm:num_requests_waiting", testModel); got != 3 {
		t.Errorf("vllm:num_requests_waiting = %v, want 3", got)
	}
	if got := metricValue(t, mfs, "vllm:num_requests_running", testModel); got != 2 {
		t.Errorf("vllm:num_requests_running = %v, want 2", got)
	}
	if got := metricValue(t, mfs, "vllm:kv_cache_usage_perc", "llama3.2"); got != 1 {
		t.Errorf("vllm:kv_cache_usage_perc = %v, want 1", got)
	}
	if u := mfs["tidegpu_sim_gpu_utilization"].GetMetric()[0].GetGauge().GetValue(); !(u > 0 && u <= 1) {
		t.Errorf("utilization = %v, want in (0, 1]", u)
	}

	cancel()
	for _, ch := range errs {
		// The Ollama client may swallow the error of a cancelled stream.
		if err := <-ch; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled chat: %v", err)
		}
	}
	if !s.adm.waitFor(testCtx(t), func(l load) bool { return l == load{} }) {
		t.Fatalf("load after cancel = %+v", s.adm.stats())
	}
}

func TestQueueOverflow(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxBatch = 1
	cfg.MaxQueue = 1
	s, ts := startServer(t, cfg)
	c := ollamaClient(t, ts)
	ctx, cancel := context.WithCancel(testCtx(t))
	first, second := longChat(c, ctx), longChat(c, ctx)
	if !s.adm.waitFor(testCtx(t), func(l load) bool { return l.running == 1 && l.waiting == 1 }) {
		t.Fatalf("load = %+v", s.adm.stats())
	}

	err := c.Chat(testCtx(t), &api.ChatRequest{Model: testModel, Messages: []api.Message{{Role: "user", Content: "x"}}},
		func(api.ChatResponse) error { return nil })
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusServiceUnavailable || !strings.Contains(se.ErrorMessage, "server busy") {
		t.Errorf("ollama overflow error = %#v", err)
	}
	oc := openAIClient(ts)
	_, err = oc.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{
		Model:    testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("openai overflow error = %v", err)
	}

	cancel()
	<-first
	<-second
}

func TestCancellationFreesSlot(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxBatch = 1
	s, ts := startServer(t, cfg)
	c := ollamaClient(t, ts)

	// The client cancels mid-stream, after the first token.
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var once sync.Once
	err := c.Chat(ctx, &api.ChatRequest{
		Model:    testModel,
		Messages: []api.Message{{Role: "user", Content: "long answer"}},
		Options:  map[string]any{"num_predict": MaxOutputTokens},
	}, func(api.ChatResponse) error {
		once.Do(cancel)
		return nil
	})
	// The Ollama client ignores read errors of a cancelled stream, so err
	// may be nil.
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled chat: %v", err)
	}
	if ctx.Err() == nil {
		t.Fatal("chat returned before the client cancelled")
	}
	if !s.adm.waitFor(testCtx(t), func(l load) bool { return l.running == 0 }) {
		t.Fatalf("slot not freed: %+v", s.adm.stats())
	}
	// The single slot serves the next request.
	stream := false
	err = c.Chat(testCtx(t), &api.ChatRequest{Model: testModel, Stream: &stream,
		Messages: []api.Message{{Role: "user", Content: "short"}}}, func(r api.ChatResponse) error {
		if !r.Done || r.EvalCount != 8 {
			t.Errorf("response = %+v", r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mfs := metricFamilies(t, ts)
	if got := metricValue(t, mfs, "vllm:e2e_request_latency_seconds", testModel); got != 1 {
		t.Errorf("e2e observations = %v, want 1 (cancelled requests are not finished)", got)
	}
}

func TestClose(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxBatch = 1
	s, ts := startServer(t, cfg)

	// A streamed generation in progress ends with an in-stream error.
	req, err := http.NewRequestWithContext(testCtx(t), "POST", ts.URL+"/api/generate",
		strings.NewReader(`{"model":"qwen2:0.5b","prompt":"p","options":{"num_predict":65536}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() { // first token arrived
		t.Fatal("no first chunk")
	}
	// A queued request is rejected on Close.
	queued := make(chan int, 1)
	go func() {
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"qwen2:0.5b","prompt":"p"}`))
		if err != nil {
			queued <- 0
			return
		}
		resp.Body.Close()
		queued <- resp.StatusCode
	}()
	if !s.adm.waitFor(testCtx(t), func(l load) bool { return l.waiting == 1 }) {
		t.Fatalf("load = %+v", s.adm.stats())
	}

	s.Close()
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	if !strings.Contains(last, `"error"`) {
		t.Errorf("last streamed line = %q, want an error", last)
	}
	if code := <-queued; code != http.StatusServiceUnavailable {
		t.Errorf("queued request status = %d, want 503", code)
	}
	hresp, err := http.Get(ts.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	hresp.Body.Close()
	if hresp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("healthz after close = %d", hresp.StatusCode)
	}
}

// TestLatencyFollowsModel checks served timings against the pure latency
// model. Timers never fire early, so the model gives lower bounds.
func TestLatencyFollowsModel(t *testing.T) {
	cfg := fastConfig()
	cfg.TTFT = 10 * time.Millisecond
	cfg.TokenTime = 2 * time.Millisecond
	cfg.SlowFactor = 1.5
	_, ts := startServer(t, cfg)
	stream := false
	var final api.GenerateResponse
	err := ollamaClient(t, ts).Generate(testCtx(t), &api.GenerateRequest{Model: testModel, Prompt: "p", Stream: &stream,
		Options: map[string]any{"num_predict": 6}}, func(r api.GenerateResponse) error {
		final = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	full := cfg.withDefaults()
	if ttft := timeToFirstToken(full); final.PromptEvalDuration < ttft {
		t.Errorf("prompt_eval_duration %v < modelled TTFT %v", final.PromptEvalDuration, ttft)
	}
	if e2e := expectedLatency(full, 1, 6); final.TotalDuration < e2e {
		t.Errorf("total_duration %v < modelled latency %v", final.TotalDuration, e2e)
	}
	// Tokens are paced on a schedule starting at admission, so prefill plus
	// decode (not decode alone, which starts at a late-firing timer) is
	// bounded by the model.
	busy := final.PromptEvalDuration + final.EvalDuration
	if want := expectedLatency(full, 1, 6); busy < want {
		t.Errorf("prompt_eval_duration+eval_duration %v < modelled %v", busy, want)
	}
}
