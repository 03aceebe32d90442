package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

// Shapes of structured answers, as the references describe them and the
// official clients decode them:
//   - OpenAI chat completions (platform.openai.com/docs/api-reference/chat):
//     tools [{type "function", function {name, parameters}}], tool_choice
//     ("none", "auto", "required", {type "function", function {name}}),
//     parallel_tool_calls, response_format ({type "json_object"},
//     {type "json_schema", json_schema {name, schema, strict}}), n,
//     logprobs/top_logprobs; message.tool_calls [{id, type "function",
//     function {name, arguments (a JSON string)}}] with finish_reason
//     "tool_calls"; streamed as delta.tool_calls [{index, id, type,
//     function {name, arguments ""}}] then [{index, function {arguments
//     fragment}}] (the function-calling guide, "Streaming"); choices carry
//     their index.
//   - Ollama docs/api.md (v0.17.4) "Chat request (with tools)" and
//     "Structured outputs": message.tool_calls [{function {name, arguments
//     (an object)}}], done_reason "stop"; format "json" or a JSON schema.

const weatherSchema = `{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","unit","days"],"additionalProperties":false}`

const timeSchema = `{"type":"object","properties":{"zone":{"type":"string","format":"uuid"}},"required":["zone"]}`

func schemaMap(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func openAITools(t *testing.T) []openai.ChatCompletionToolUnionParam {
	return []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather",
			Parameters: schemaMap(t, weatherSchema)}),
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_time",
			Parameters: schemaMap(t, timeSchema)}),
	}
}

// argTokens is the number of tokens of the arguments of the calls.
func argTokens(calls ...string) int {
	n := 0
	for _, c := range calls {
		n += len(splitTokens(c))
	}
	return n
}

func TestOpenAIToolCalls(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	schemas := map[string]string{"get_weather": weatherSchema, "get_time": timeSchema}
	params := func(prompt string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: testModel, Tools: openAITools(t),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
	}

	// auto: the prompt names get_weather.
	resp, err := c.Chat.Completions.New(ctx, params("Please get_weather for Paris"))
	if err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != "" {
		t.Fatalf("choice = %+v", ch)
	}
	call := ch.Message.ToolCalls[0]
	if call.Type != "function" || call.Function.Name != "get_weather" || !strings.HasPrefix(call.ID, "call_") {
		t.Errorf("call = %+v", call)
	}
	validate(t, weatherSchema, []byte(call.Function.Arguments))
	if resp.Usage.CompletionTokens != int64(argTokens(call.Function.Arguments)) {
		t.Errorf("usage %d, arguments %d tokens", resp.Usage.CompletionTokens, argTokens(call.Function.Arguments))
	}

	// auto naming both: two parallel calls; parallel_tool_calls false: one.
	p := params("get_time and get_weather, please")
	resp, err = c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Choices[0].Message.ToolCalls
	if len(calls) != 2 || calls[0].Function.Name != "get_weather" || calls[1].Function.Name != "get_time" || calls[0].ID == calls[1].ID {
		t.Fatalf("calls = %+v", calls)
	}
	for _, c := range calls {
		validate(t, schemas[c.Function.Name], []byte(c.Function.Arguments))
	}
	if resp.Usage.CompletionTokens != int64(argTokens(calls[0].Function.Arguments, calls[1].Function.Arguments)) {
		t.Errorf("usage %+v", resp.Usage)
	}
	p.ParallelToolCalls = openai.Bool(false)
	if resp, err = c.Chat.Completions.New(ctx, p); err != nil || len(resp.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("parallel_tool_calls false: %v %+v", err, resp)
	}

	// auto without a mention, and none: text.
	for _, tc := range []openai.ChatCompletionToolChoiceOptionUnionParam{{}, {OfAuto: openai.String("none")}} {
		p := params("what is a tide?")
		p.ToolChoice = tc
		resp, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if ch := resp.Choices[0]; ch.FinishReason != "stop" || len(ch.Message.ToolCalls) != 0 || ch.Message.Content == "" {
			t.Errorf("tool_choice %+v: %+v", tc, ch)
		}
	}
	// required: the first tool; a named function: that one.
	p = params("what is a tide?")
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	if resp, err = c.Chat.Completions.New(ctx, p); err != nil || resp.Choices[0].Message.ToolCalls[0].Function.Name != "get_weather" {
		t.Fatalf("required: %v %+v", err, resp)
	}
	p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_time"})
	if resp, err = c.Chat.Completions.New(ctx, p); err != nil || resp.Choices[0].Message.ToolCalls[0].Function.Name != "get_time" {
		t.Fatalf("named: %v %+v", err, resp)
	}

	// The tool loop: after the tool's result the model answers in text.
	p = params("get_weather for Paris")
	p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
		ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
			ID: call.ID, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: call.Function.Arguments}}}}}},
		openai.ToolMessage(`{"temp": 21}`, call.ID))
	if resp, err = c.Chat.Completions.New(ctx, p); err != nil || resp.Choices[0].FinishReason != "stop" || resp.Choices[0].Message.Content == "" {
		t.Fatalf("after the tool result: %v %+v", err, resp)
	}
}

func TestOpenAIToolCallsStreaming(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: testModel, Tools: openAITools(t),
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("get_weather and get_time")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	var acc openai.ChatCompletionAccumulator
	var finished []openai.FinishedChatCompletionToolCall
	headers, fragments := 0, 0
	for st.Next() {
		chunk := st.Current()
		if !acc.AddChunk(chunk) {
			t.Fatalf("accumulator refused chunk %s", chunk.RawJSON())
		}
		for _, ch := range chunk.Choices {
			for _, d := range ch.Delta.ToolCalls {
				if d.ID != "" {
					headers++
					if d.Function.Name == "" || d.Type != "function" || d.Function.Arguments != "" {
						t.Errorf("call header %s", chunk.RawJSON())
					}
				} else if d.Function.Name == "" && d.Function.Arguments != "" {
					fragments++
				}
			}
		}
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = append(finished, tc)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if headers != 2 || len(finished) != 2 || finished[0].Name != "get_weather" || finished[1].Name != "get_time" {
		t.Fatalf("headers %d, finished %+v", headers, finished)
	}
	validate(t, weatherSchema, []byte(finished[0].Arguments))
	validate(t, timeSchema, []byte(finished[1].Arguments))
	if acc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("finish reason %q", acc.Choices[0].FinishReason)
	}
	if n := argTokens(finished[0].Arguments, finished[1].Arguments); fragments != n || acc.Usage.CompletionTokens != int64(n) {
		t.Errorf("%d fragments, usage %d, want %d", fragments, acc.Usage.CompletionTokens, n)
	}
}

func TestOpenAIResponseFormat(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")}

	resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel, Messages: msgs,
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}})
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(resp.Choices[0].Message.Content), &obj); err != nil {
		t.Fatalf("json_object content %q: %v", resp.Choices[0].Message.Content, err)
	}

	rf := openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "weather", Strict: openai.Bool(true), Schema: schemaMap(t, weatherSchema)}}}
	resp, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel, Messages: msgs, ResponseFormat: rf})
	if err != nil {
		t.Fatal(err)
	}
	content := resp.Choices[0].Message.Content
	validate(t, weatherSchema, []byte(content))
	if resp.Usage.CompletionTokens != int64(len(splitTokens(content))) || resp.Choices[0].FinishReason != "stop" {
		t.Errorf("usage %+v for %q", resp.Usage, content)
	}

	// Streamed, the content fragments add up to the same value.
	st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: testModel, Messages: msgs, ResponseFormat: rf})
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil || acc.Choices[0].Message.Content != content {
		t.Errorf("streamed %q (%v), want %q", acc.Choices[0].Message.Content, err, content)
	}

	// A token limit cuts the JSON, with finish_reason length.
	resp, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel, Messages: msgs, ResponseFormat: rf,
		MaxCompletionTokens: openai.Int(3)})
	if err != nil || resp.Choices[0].FinishReason != "length" || resp.Usage.CompletionTokens != 3 ||
		resp.Choices[0].Message.Content != strings.Join(splitTokens(content)[:3], "") {
		t.Errorf("limited: %v %+v", err, resp)
	}
}

func TestOpenAIChoicesN(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	p := openai.ChatCompletionNewParams{Model: testModel, N: openai.Int(3),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("写一首诗")}}
	resp, err := c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 3 || resp.Usage.CompletionTokens != 3*8 {
		t.Fatalf("choices %d, usage %+v", len(resp.Choices), resp.Usage)
	}
	seed := textSeed("写一首诗\n")
	for i, ch := range resp.Choices {
		if ch.Index != int64(i) || ch.Message.Content != expectedText(choiceSeed(seed, i), 8) {
			t.Errorf("choice %d = %+v", i, ch)
		}
	}
	if resp.Choices[0].Message.Content == resp.Choices[1].Message.Content {
		t.Errorf("choices alike")
	}

	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	p.Logprobs = openai.Bool(true)
	p.TopLogprobs = openai.Int(2)
	st := c.Chat.Completions.NewStreaming(ctx, p)
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		if !acc.AddChunk(st.Current()) {
			t.Fatalf("accumulator refused %s", st.Current().RawJSON())
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 3 || acc.Usage.CompletionTokens != 24 {
		t.Fatalf("streamed choices %d usage %+v", len(acc.Choices), acc.Usage)
	}
	for i, ch := range acc.Choices {
		if ch.Message.Content != resp.Choices[i].Message.Content || ch.FinishReason != "stop" {
			t.Errorf("streamed choice %d = %q %q", i, ch.Message.Content, ch.FinishReason)
		}
		lps := ch.Logprobs.Content
		if len(lps) != 8 || len(lps[0].TopLogprobs) != 2 || lps[0].TopLogprobs[0].Token != lps[0].Token || lps[0].Logprob > 0 {
			t.Errorf("logprobs of choice %d: %+v", i, ch.Logprobs)
		}
	}

	// Legacy completions: n and logprobs (an integer) too.
	cr, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: testModel, N: openai.Int(2), Logprobs: openai.Int(1),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("once")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cr.Choices) != 2 || cr.Usage.CompletionTokens != 16 || len(cr.Choices[1].Logprobs.Tokens) != 8 ||
		strings.Join(cr.Choices[1].Logprobs.Tokens, "") != cr.Choices[1].Text || cr.Choices[1].Index != 1 {
		t.Errorf("completions n=2: %+v", cr)
	}
}

func TestOllamaFormatAndTools(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := ollamaClient(t, ts)
	ctx := testCtx(t)
	no := false

	// format "json" and a schema, chat and generate.
	var chat api.ChatResponse
	err := c.Chat(ctx, &api.ChatRequest{Model: testModel, Stream: &no, Format: json.RawMessage(`"json"`),
		Messages: []api.Message{{Role: "user", Content: "hi"}}}, func(r api.ChatResponse) error { chat = r; return nil })
	if err != nil || !json.Valid([]byte(chat.Message.Content)) || !strings.HasPrefix(chat.Message.Content, "{") {
		t.Fatalf("format json: %v %q", err, chat.Message.Content)
	}
	var gen strings.Builder
	var last api.GenerateResponse
	err = c.Generate(ctx, &api.GenerateRequest{Model: testModel, Prompt: "hi", Format: json.RawMessage(weatherSchema)},
		func(r api.GenerateResponse) error { gen.WriteString(r.Response); last = r; return nil })
	if err != nil {
		t.Fatal(err)
	}
	validate(t, weatherSchema, []byte(gen.String()))
	if last.EvalCount != len(splitTokens(gen.String())) {
		t.Errorf("eval_count %d for %q", last.EvalCount, gen.String())
	}

	// tools: a call with arguments as an object, streamed and not. The
	// client's api.ToolProperty carries type, description, enum, items,
	// properties and anyOf only, so the schema sent has no ranges.
	const ollamaWeather = `{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},"required":["city","unit","days"]}`
	var tool api.Tool
	if err := json.Unmarshal([]byte(`{"type":"function","function":{"name":"get_weather","parameters":`+ollamaWeather+`}}`), &tool); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []bool{false, true} {
		var calls []api.ToolCall
		var final api.ChatResponse
		err := c.Chat(ctx, &api.ChatRequest{Model: testModel, Stream: &stream, Tools: api.Tools{tool},
			Messages: []api.Message{{Role: "user", Content: "what does get_weather say for Tokyo?"}}}, func(r api.ChatResponse) error {
			calls = append(calls, r.Message.ToolCalls...)
			final = r
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != 1 || calls[0].Function.Name != "get_weather" || final.DoneReason != "stop" {
			t.Fatalf("stream=%t: calls %+v, final %+v", stream, calls, final)
		}
		args := calls[0].Function.Arguments.String()
		validate(t, ollamaWeather, []byte(args))
		if final.EvalCount != argTokens(args) {
			t.Errorf("stream=%t: eval_count %d, arguments %d tokens", stream, final.EvalCount, argTokens(args))
		}
	}
	// Without a mention, text.
	err = c.Chat(ctx, &api.ChatRequest{Model: testModel, Stream: &no, Tools: api.Tools{tool},
		Messages: []api.Message{{Role: "user", Content: "hello"}}}, func(r api.ChatResponse) error { chat = r; return nil })
	if err != nil || len(chat.Message.ToolCalls) != 0 || chat.Message.Content == "" {
		t.Errorf("no mention: %v %+v", err, chat)
	}
}

func TestOllamaLogprobs(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := ollamaClient(t, ts)
	var lps []api.Logprob
	var text strings.Builder
	err := c.Chat(testCtx(t), &api.ChatRequest{Model: testModel, Logprobs: true, TopLogprobs: 3,
		Messages: []api.Message{{Role: "user", Content: "hi"}}}, func(r api.ChatResponse) error {
		lps = append(lps, r.Logprobs...)
		text.WriteString(r.Message.Content)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(lps) != 8 || len(lps[0].TopLogprobs) != 3 {
		t.Fatalf("logprobs %+v", lps)
	}
	var joined strings.Builder
	for _, lp := range lps {
		joined.WriteString(lp.Token)
	}
	if joined.String() != text.String() {
		t.Errorf("logprob tokens %q, text %q", joined.String(), text.String())
	}
}

// The raw stream of a tool call, as the function-calling guide shows it.
func TestOpenAIToolCallStreamRaw(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	body := `{"model":"` + testModel + `","stream":true,"messages":[{"role":"user","content":"x"}],` +
		`"tools":[{"type":"function","function":{"name":"noargs"}}],"tool_choice":"required"}`
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var deltas []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && d != "[DONE]" {
			var chunk struct {
				Choices []struct {
					Delta        json.RawMessage `json:"delta"`
					FinishReason *string         `json:"finish_reason"`
				} `json:"choices"`
			}
			json.Unmarshal([]byte(d), &chunk)
			deltas = append(deltas, string(chunk.Choices[0].Delta))
		}
	}
	want := []string{
		`{"role":"assistant"}`,
		`{"tool_calls":[{"index":0,"id":"call_`,
		`{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}`,
		`{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}`,
		`{}`,
	}
	if len(deltas) != len(want) {
		t.Fatalf("deltas %q", deltas)
	}
	for i := range want {
		if !strings.HasPrefix(deltas[i], want[i]) {
			t.Errorf("delta %d = %s, want %s…", i, deltas[i], want[i])
		}
	}
	if !strings.Contains(deltas[1], `"type":"function","function":{"name":"noargs","arguments":""}`) {
		t.Errorf("header %s", deltas[1])
	}
}

func TestStructuredErrors(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}
	_, err := c.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{Model: testModel, Messages: msgs, N: openai.Int(0)})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "n" {
		t.Errorf("n=0: %v", err)
	}
	chat := func(extra string) string {
		return `{"model":"` + testModel + `","messages":[{"role":"user","content":"x"}]` + extra + `}`
	}
	tool := `"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`
	tests := []struct {
		path, body, contains string
	}{
		{"/v1/chat/completions", chat(`,"n":129`), `"param":"n"`},
		{"/v1/chat/completions", chat(`,"tools":5`), `"param":"tools"`},
		{"/v1/chat/completions", chat(`,"tools":[{"type":"custom","custom":{"name":"x"}}]`), `"param":"tools[0].type"`},
		{"/v1/chat/completions", chat(`,"tools":[{"type":"function"}]`), `"param":"tools[0].function"`},
		{"/v1/chat/completions", chat(`,"tools":[{"type":"function","function":{"name":"a b"}}]`), `"param":"tools[0].function.name"`},
		{"/v1/chat/completions", chat(`,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"string"}}}]`), `type: \"object\"`},
		{"/v1/chat/completions", chat(`,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"bogus"}}}]`), `"param":"tools[0].function.parameters"`},
		{"/v1/chat/completions", chat(`,"tool_choice":"required"`), `only allowed when 'tools' are specified`},
		{"/v1/chat/completions", chat(`,"tool_choice":"sometimes",` + tool), `"param":"tool_choice"`},
		{"/v1/chat/completions", chat(`,"tool_choice":{"type":"function","function":{"name":"g"}},` + tool), `function 'g' is not among`},
		{"/v1/chat/completions", chat(`,"response_format":{"type":"yaml"}`), `"param":"response_format.type"`},
		{"/v1/chat/completions", chat(`,"response_format":{"type":"json_schema"}`), `"param":"response_format.json_schema"`},
		{"/v1/chat/completions", chat(`,"response_format":{"type":"json_schema","json_schema":{"name":"","schema":{}}}`), `"param":"response_format.json_schema.name"`},
		{"/v1/chat/completions", chat(`,"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"$ref":"http://x"}}}`), `"param":"response_format.json_schema.schema"`},
		{"/v1/chat/completions", chat(`,"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":false}}`), `Cannot generate`},
		{"/v1/chat/completions", chat(`,"top_logprobs":2`), `'logprobs' must be set to true`},
		{"/v1/chat/completions", chat(`,"logprobs":true,"top_logprobs":21`), `"param":"top_logprobs"`},
		{"/v1/completions", `{"model":"` + testModel + `","prompt":"x","logprobs":6}`, `"param":"logprobs"`},
		{"/v1/completions", `{"model":"` + testModel + `","prompt":"x","n":0}`, `"param":"n"`},
		{"/api/chat", `{"model":"` + testModel + `","messages":[],"format":"yaml"}`, `invalid format: \"\\\"yaml\\\"\"; expected \"json\" or a valid JSON Schema object`},
		{"/api/generate", `{"model":"` + testModel + `","prompt":"x","format":{"type":"nope"}}`, `invalid JSON schema in format`},
		{"/api/chat", `{"model":"` + testModel + `","messages":[],"tools":[{"type":"function","function":{}}]}`, `tools[0].function.name`},
		{"/api/chat", `{"model":"` + testModel + `","messages":[],"top_logprobs":50}`, `top_logprobs`},
		{"/v1/responses", `{"model":"m","input":"x","tools":[{"type":"function","name":""}]}`, `"param":"tools[0].name"`},
		{"/v1/responses", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, `"param":"tools[0].type"`},
		{"/v1/responses", `{"model":"m","input":"x","tool_choice":{"type":"function","name":"f"}}`, `only allowed when 'tools' are specified`},
		{"/v1/responses", `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"a b","schema":{}}}}`, `"param":"text.format.name"`},
		{"/v1/responses", `{"model":"m","input":"x","text":{"format":{"type":"xml"}}}`, `"param":"text.format.type"`},
		{"/v1/responses", `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"s","schema":false}}}`, `"param":"text.format"`},
		// A value of the wrong type names its field.
		{"/v1/chat/completions", chat(`,"stream":"yes"`), `"message":"Invalid type for 'stream': expected a boolean, but got a string instead.","param":"stream"`},
		{"/v1/chat/completions", chat(`,"n":[1]`), `Invalid type for 'n': expected an integer, but got an array instead.`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":5}]}`, `Invalid type for 'messages.role': expected a string, but got a number instead.`},
		{"/api/chat", `{"model":"m","messages":"hi"}`, `{"error":"Invalid type for 'messages': expected an array, but got a string instead."}`},
		{"/v1/embeddings", `{"model":"m","input":"x","dimensions":"8"}`, `Invalid type for 'dimensions'`},
	}
	for _, tt := range tests {
		resp, err := http.Post(ts.URL+tt.path, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), tt.contains) {
			t.Errorf("%s %s = %d %s, want 400 containing %s", tt.path, tt.body, resp.StatusCode, b, tt.contains)
		}
		checkErrorShape(t, tt.path, string(b))
	}
}

// The tokens the metrics count are the tokens the usage reports, for
// several choices with tool calls and JSON.
func TestStructuredUsageMatchesMetrics(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	var total int64
	for _, p := range []openai.ChatCompletionNewParams{
		{Model: testModel, N: openai.Int(3), Tools: openAITools(t),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("get_weather and get_time")}},
		{Model: testModel, N: openai.Int(2), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "w", Schema: schemaMap(t, weatherSchema)}}}},
	} {
		resp, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var sum int
		for _, ch := range resp.Choices {
			sum += len(splitTokens(ch.Message.Content))
			for _, tc := range ch.Message.ToolCalls {
				sum += argTokens(tc.Function.Arguments)
			}
		}
		if resp.Usage.CompletionTokens != int64(sum) {
			t.Errorf("usage %d, tokens sent %d", resp.Usage.CompletionTokens, sum)
		}
		total += resp.Usage.CompletionTokens
	}
	if got := metricValue(t, metricFamilies(t, ts), "vllm:generation_tokens_total", testModel); got != float64(total) {
		t.Errorf("vllm:generation_tokens_total = %v, usage %d", got, total)
	}
}
