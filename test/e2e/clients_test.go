package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ollama "github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// The official clients, through the gateway of `tidegpu up` onto its
// simulators, for what the simulator stands in for beyond plain chat:
// embeddings, the Responses API streamed and not, tool calls, JSON formats
// and n. The request and answer shapes are those of Ollama's docs/api.md
// (v0.17.4: /api/embed, "Chat request (with tools)", "Structured outputs")
// and OpenAI's API reference (chat completions tools / tool_choice /
// response_format / n, the chat completion chunk with delta.tool_calls,
// embeddings, "Create a model response" and its streaming events), as the
// clients github.com/ollama/ollama/api, github.com/openai/openai-go/v3 and
// the npm packages ollama and openai (test/e2e/js) send and decode them.

const weatherParams = `{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"],"additionalProperties":false}`

func TestClientsThroughTheGateway(t *testing.T) {
	u := startUp(t, "")
	u.waitReady("default", 2, 30*time.Second)
	t.Run("go", func(t *testing.T) { goClients(t, u.gateway) })
	t.Run("js", func(t *testing.T) { jsClients(t, u.gateway) })
}

func goClients(t *testing.T, gateway string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const model = "qwen2:0.5b"
	base, _ := url.Parse(gateway)
	oc := ollama.NewClient(base, http.DefaultClient)
	client := openai.NewClient(option.WithBaseURL(gateway+"/v1/"), option.WithAPIKey("unused"))
	var params map[string]any
	if err := json.Unmarshal([]byte(weatherParams), &params); err != nil {
		t.Fatal(err)
	}

	// Embeddings, both APIs.
	emb, err := oc.Embed(ctx, &ollama.EmbedRequest{Model: model, Input: []string{"tide", "moon"}})
	if err != nil || len(emb.Embeddings) != 2 || len(emb.Embeddings[0]) == 0 {
		t.Fatalf("ollama embed: %v %+v", err, emb)
	}
	oemb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: model,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"tide", "moon"}}})
	if err != nil || len(oemb.Data) != 2 || len(oemb.Data[1].Embedding) != len(emb.Embeddings[0]) || oemb.Usage.PromptTokens == 0 {
		t.Fatalf("openai embeddings: %v %+v", err, oemb)
	}

	// Responses, not streamed and streamed.
	rp := responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What is a tide?")}}
	resp, err := client.Responses.New(ctx, rp)
	if err != nil || resp.Status != "completed" || resp.OutputText() == "" || resp.Usage.OutputTokens == 0 {
		t.Fatalf("responses: %v %+v", err, resp)
	}
	st := client.Responses.NewStreaming(ctx, rp)
	var deltas strings.Builder
	var completed responses.Response
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed":
			completed = ev.Response
		}
	}
	if err := st.Err(); err != nil || deltas.String() != resp.OutputText() || completed.Usage.OutputTokens != resp.Usage.OutputTokens {
		t.Fatalf("responses stream: %v, deltas %q, completed %+v", err, deltas.String(), completed.Usage)
	}

	// Responses function calling.
	rp.Input = responses.ResponseNewParamsInputUnion{OfString: openai.String("get_weather in Oslo")}
	rp.Tools = []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", params, true)}
	if resp, err = client.Responses.New(ctx, rp); err != nil || len(resp.Output) != 1 || resp.Output[0].Type != "function_call" {
		t.Fatalf("responses tools: %v %+v", err, resp)
	}
	checkWeatherArgs(t, resp.Output[0].AsFunctionCall().Arguments)

	// Tools: OpenAI, not streamed and streamed (deltas), and Ollama.
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Parameters: params})}
	cp := openai.ChatCompletionNewParams{Model: model, Tools: tools,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("get_weather for Paris, please")}}
	chat, err := client.Chat.Completions.New(ctx, cp)
	if err != nil || chat.Choices[0].FinishReason != "tool_calls" || len(chat.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("openai tools: %v %+v", err, chat)
	}
	checkWeatherArgs(t, chat.Choices[0].Message.ToolCalls[0].Function.Arguments)
	cs := client.Chat.Completions.NewStreaming(ctx, cp)
	var acc openai.ChatCompletionAccumulator
	var finished []openai.FinishedChatCompletionToolCall
	for cs.Next() {
		acc.AddChunk(cs.Current())
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = append(finished, tc)
		}
	}
	if err := cs.Err(); err != nil || len(finished) != 1 || finished[0].Name != "get_weather" ||
		finished[0].Arguments != chat.Choices[0].Message.ToolCalls[0].Function.Arguments {
		t.Fatalf("openai tools stream: %v %+v", err, finished)
	}
	var tool ollama.Tool
	if err := json.Unmarshal([]byte(`{"type":"function","function":{"name":"get_weather","parameters":`+weatherParams+`}}`), &tool); err != nil {
		t.Fatal(err)
	}
	var calls []ollama.ToolCall
	err = oc.Chat(ctx, &ollama.ChatRequest{Model: model, Tools: ollama.Tools{tool},
		Messages: []ollama.Message{{Role: "user", Content: "get_weather for Tokyo"}}}, func(r ollama.ChatResponse) error {
		calls = append(calls, r.Message.ToolCalls...)
		return nil
	})
	if err != nil || len(calls) != 1 || calls[0].Function.Name != "get_weather" {
		t.Fatalf("ollama tools: %v %+v", err, calls)
	}
	checkWeatherArgs(t, calls[0].Function.Arguments.String())

	// JSON formats: OpenAI json_schema and json_object, Ollama schema.
	cp = openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "weather", Strict: openai.Bool(true), Schema: params}}}}
	chat, err = client.Chat.Completions.New(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	checkWeatherArgs(t, chat.Choices[0].Message.Content)
	cp.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	if chat, err = client.Chat.Completions.New(ctx, cp); err != nil || !json.Valid([]byte(chat.Choices[0].Message.Content)) {
		t.Fatalf("json_object: %v %+v", err, chat)
	}
	no := false
	var formatted ollama.ChatResponse
	err = oc.Chat(ctx, &ollama.ChatRequest{Model: model, Stream: &no, Format: json.RawMessage(weatherParams),
		Messages: []ollama.Message{{Role: "user", Content: "weather?"}}}, func(r ollama.ChatResponse) error { formatted = r; return nil })
	if err != nil {
		t.Fatal(err)
	}
	checkWeatherArgs(t, formatted.Message.Content)

	// n: choices with their index, usage counting all of them, streamed too.
	cp = openai.ChatCompletionNewParams{Model: model, N: openai.Int(3),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("写一首诗")}}
	chat, err = client.Chat.Completions.New(ctx, cp)
	if err != nil || len(chat.Choices) != 3 || chat.Choices[2].Index != 2 || chat.Usage.CompletionTokens < 3 {
		t.Fatalf("n=3: %v %+v", err, chat)
	}
	cp.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	cs = client.Chat.Completions.NewStreaming(ctx, cp)
	acc = openai.ChatCompletionAccumulator{}
	for cs.Next() {
		acc.AddChunk(cs.Current())
	}
	if err := cs.Err(); err != nil || len(acc.Choices) != 3 || acc.Usage.CompletionTokens != chat.Usage.CompletionTokens {
		t.Fatalf("n=3 stream: %v, %d choices, usage %+v", err, len(acc.Choices), acc.Usage)
	}
	for i := range 3 {
		if acc.Choices[i].Message.Content != chat.Choices[i].Message.Content {
			t.Errorf("streamed choice %d = %q, want %q", i, acc.Choices[i].Message.Content, chat.Choices[i].Message.Content)
		}
	}
}

// checkWeatherArgs fails unless s is an object satisfying weatherParams.
func checkWeatherArgs(t *testing.T, s string) {
	t.Helper()
	var args map[string]any
	if err := json.Unmarshal([]byte(s), &args); err != nil {
		t.Fatalf("not a JSON object: %q", s)
	}
	city, _ := args["city"].(string)
	unit, _ := args["unit"].(string)
	if len(args) != 2 || city == "" || (unit != "celsius" && unit != "fahrenheit") {
		t.Errorf("%q does not satisfy %s", s, weatherParams)
	}
}

// jsClients runs test/e2e/js/clients.mjs, the same calls with the npm
// packages ollama and openai (pinned in package-lock.json), when node
// (18 or later) and npm are installed; it skips otherwise.
func jsClients(t *testing.T, gateway string) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed")
	}
	out, err := exec.Command(node, "-p", "process.versions.node").Output()
	if err != nil {
		t.Skipf("node -p: %v", err)
	}
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0])
	if major < 18 {
		t.Skipf("node %s is older than 18", strings.TrimSpace(string(out)))
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "clients.mjs"} {
		b, err := os.ReadFile(filepath.Join("js", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci (the npm registry must be reachable): %v\n%s", err, out)
	}
	run := exec.CommandContext(ctx, node, "clients.mjs", gateway)
	run.Dir = dir
	out, err = run.CombinedOutput()
	t.Logf("node clients.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node clients.mjs: %v", err)
	}
	for _, want := range []string{"ok ollama embed", "ok ollama tools", "ok ollama format", "ok openai embeddings",
		"ok openai responses", "ok openai responses stream", "ok openai responses tools", "ok openai tools", "ok openai tools stream",
		"ok openai json_schema", "ok openai n", "ok openai n stream", "all ok"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("clients.mjs did not report %q", want)
		}
	}
}
