package sim

import (
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// Function calling and structured output in the Responses API, as its
// reference ("Create a model response": tools, tool_choice, text.format;
// the function_call output item {id, call_id, name, arguments, status})
// and the function-calling guide's streaming section
// (response.output_item.added, response.function_call_arguments.delta,
// response.function_call_arguments.done, response.output_item.done)
// describe them, decoded by openai-go v3 responses.

func TestResponsesFunctionCalls(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	params := responses.ResponseNewParams{Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("get_weather in Oslo")},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", schemaMap(t, weatherSchema), true)}}
	resp, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Output) != 1 || resp.Output[0].Type != "function_call" || resp.Status != "completed" {
		t.Fatalf("output %+v", resp.Output)
	}
	fc := resp.Output[0].AsFunctionCall()
	if fc.Name != "get_weather" || !strings.HasPrefix(fc.CallID, "call_") || !strings.HasPrefix(fc.ID, "fc_") || fc.Status != "completed" {
		t.Errorf("function call %+v", fc)
	}
	validate(t, weatherSchema, []byte(fc.Arguments))
	if resp.Usage.OutputTokens != int64(argTokens(fc.Arguments)) || len(resp.Tools) != 1 || resp.Tools[0].Name != "get_weather" {
		t.Errorf("usage %+v, tools %+v", resp.Usage, resp.Tools)
	}

	// Streamed: the item, its argument deltas, their done events.
	st := c.Responses.NewStreaming(ctx, params)
	var types []string
	var deltas strings.Builder
	var done responses.ResponseFunctionCallArgumentsDoneEvent
	var completed responses.Response
	for st.Next() {
		ev := st.Current()
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
		switch ev.Type {
		case "response.function_call_arguments.delta":
			deltas.WriteString(ev.Delta)
		case "response.function_call_arguments.done":
			done = ev.AsResponseFunctionCallArgumentsDone()
		case "response.completed":
			completed = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	want := "response.created response.in_progress response.output_item.added response.function_call_arguments.delta " +
		"response.function_call_arguments.done response.output_item.done response.completed"
	if strings.Join(types, " ") != want {
		t.Errorf("events %v", types)
	}
	if deltas.String() != fc.Arguments || done.Arguments != fc.Arguments ||
		completed.Output[0].AsFunctionCall().Arguments != fc.Arguments {
		t.Errorf("deltas %q, done %+v, want %q", deltas.String(), done, fc.Arguments)
	}

	// After the function's output, text.
	out := responses.ResponseInputItemParamOfFunctionCallOutput(`{"temp":3}`)
	out.OfFunctionCallOutput.CallID = openai.String(fc.CallID)
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("get_weather in Oslo", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfFunctionCall(fc.Arguments, fc.CallID, "get_weather"), out}}
	if resp, err = c.Responses.New(ctx, params); err != nil || resp.Output[0].Type != "message" || resp.OutputText() == "" {
		t.Fatalf("after the output: %v %+v", err, resp)
	}
}

func TestResponsesTextFormat(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	resp, err := c.Responses.New(testCtx(t), responses.ResponseNewParams{Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather")},
		Text:  responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigParamOfJSONSchema("weather", schemaMap(t, weatherSchema))}})
	if err != nil {
		t.Fatal(err)
	}
	validate(t, weatherSchema, []byte(resp.OutputText()))
	if resp.Text.Format.Type != "json_schema" || resp.Text.Format.Name != "weather" {
		t.Errorf("text echoed as %+v", resp.Text)
	}
	if resp.Usage.OutputTokens != int64(len(splitTokens(resp.OutputText()))) {
		t.Errorf("usage %+v", resp.Usage)
	}
}
