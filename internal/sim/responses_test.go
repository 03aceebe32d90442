package sim

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
)

// The shapes follow OpenAI's Responses API reference ("Create a model
// response", "The response object") and its streaming guide and events
// reference (developers.openai.com/api/docs/guides/streaming-responses:
// response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta {item_id,
// output_index, content_index, delta, sequence_number, logprobs},
// response.output_text.done, response.content_part.done,
// response.output_item.done, response.completed, with no [DONE] sentinel),
// as openai-go v3 responses/response.go decodes them.

func TestOpenAIResponses(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	params := responses.ResponseNewParams{
		Model:        testModel,
		Instructions: openai.String("Be terse."),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("What is a tide?")},
	}
	resp, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := expectedText(textSeed("Be terse.\nWhat is a tide?"), 8)
	if resp.OutputText() != want || resp.Status != "completed" || resp.Object != "response" ||
		!strings.HasPrefix(resp.ID, "resp_") || resp.Model != testModel || resp.CreatedAt == 0 || resp.CompletedAt == 0 {
		t.Fatalf("response = %+v, want text %q", resp, want)
	}
	if len(resp.Output) != 1 || resp.Output[0].Type != "message" || resp.Output[0].Role != "assistant" ||
		resp.Output[0].Content[0].Type != "output_text" {
		t.Errorf("output = %+v", resp.Output)
	}
	prompt := int64(promptTokenEstimate(len("Be terse.") + len("What is a tide?")))
	if u := resp.Usage; u.InputTokens != prompt || u.OutputTokens != 8 || u.TotalTokens != prompt+8 {
		t.Errorf("usage = %+v", u)
	}
	if resp.Instructions.OfString != "Be terse." {
		t.Errorf("instructions = %+v", resp.Instructions)
	}

	// Input items with content parts; a token limit makes it incomplete.
	params.Instructions = param.Opt[string]{}
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("What is a tide?", responses.EasyInputMessageRoleUser),
	}}
	params.MaxOutputTokens = openai.Int(3)
	resp, err = c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != "incomplete" || resp.IncompleteDetails.Reason != "max_output_tokens" || resp.Usage.OutputTokens != 3 ||
		resp.OutputText() != expectedText(textSeed("What is a tide?\n"), 3) {
		t.Errorf("limited = status %q, details %+v, usage %+v, text %q", resp.Status, resp.IncompleteDetails, resp.Usage, resp.OutputText())
	}

	_, err = c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-nope", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
		t.Errorf("unknown model error = %v", err)
	}
}

func TestOpenAIResponsesStreaming(t *testing.T) {
	_, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	ctx := testCtx(t)
	for _, limit := range []int64{0, 4} {
		params := responses.ResponseNewParams{
			Model: testModel,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Stream please")},
		}
		n, final := 8, "response.completed"
		if limit > 0 {
			params.MaxOutputTokens = openai.Int(limit)
			n, final = int(limit), "response.incomplete"
		}
		stream := c.Responses.NewStreaming(ctx, params)
		var types []string
		var text strings.Builder
		var last responses.ResponseStreamEventUnion
		var done string
		seq := int64(0)
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			if ev.SequenceNumber != seq {
				t.Errorf("event %d has sequence_number %d", seq, ev.SequenceNumber)
			}
			seq++
			switch ev.Type {
			case "response.output_text.delta":
				text.WriteString(ev.Delta)
				if ev.ItemID == "" || ev.OutputIndex != 0 || ev.ContentIndex != 0 {
					t.Errorf("delta = %+v", ev)
				}
			case "response.output_text.done":
				done = ev.Text
			}
			last = ev
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		wantTypes := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
		for range n {
			wantTypes = append(wantTypes, "response.output_text.delta")
		}
		wantTypes = append(wantTypes, "response.output_text.done", "response.content_part.done", "response.output_item.done", final)
		if !slices.Equal(types, wantTypes) {
			t.Errorf("limit %d: events = %v, want %v", limit, types, wantTypes)
		}
		want := expectedText(textSeed("Stream please"), n)
		if text.String() != want || done != want || last.Response.OutputText() != want {
			t.Errorf("limit %d: deltas %q, done %q, final %q, want %q", limit, text.String(), done, last.Response.OutputText(), want)
		}
		u := last.Response.Usage
		if u.OutputTokens != int64(n) || u.InputTokens < 1 || u.TotalTokens != u.InputTokens+u.OutputTokens {
			t.Errorf("limit %d: final usage = %+v", limit, u)
		}
	}
}

func TestOpenAIResponsesStreamFailsOnClose(t *testing.T) {
	s, ts := startServer(t, fastConfig())
	c := openAIClient(ts)
	stream := c.Responses.NewStreaming(testCtx(t), responses.ResponseNewParams{
		Model:           testModel,
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("long")},
		MaxOutputTokens: openai.Int(MaxOutputTokens),
	})
	var last string
	closed := false
	for stream.Next() {
		ev := stream.Current()
		last = ev.Type
		if ev.Type == "response.output_text.delta" && !closed {
			s.Close()
			closed = true
		}
		if ev.Type == "response.failed" && (ev.Response.Status != "failed" || ev.Response.Error.Code != "server_error") {
			t.Errorf("failed event = %+v", ev.Response)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if last != "response.failed" {
		t.Errorf("last event = %q, want response.failed", last)
	}
}
