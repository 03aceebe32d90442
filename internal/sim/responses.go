package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// OpenAI Responses API (POST /v1/responses): a text answer as one message
// output item, streamed as the documented semantic events when stream is
// true. Requests go through the same queue and latency model as chat.

type openAIResponsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int64          `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
	responsesShapeFields
}

// responsesInput returns the text of a Responses input: a string, or an
// array of input items whose content is a string or content parts (the
// text of input_text parts counts; other items add no text).
func responsesInput(raw json.RawMessage) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", &apiError{status: http.StatusBadRequest, param: "input",
			message: "Missing required parameter: 'input'."}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var items []struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return "", &apiError{status: http.StatusBadRequest, param: "input",
			message: "Invalid 'input': expected a string or an array of input items."}
	}
	var b strings.Builder
	for i, it := range items {
		text, err := openAIContent(it.Content)
		if err != nil {
			return "", &apiError{status: http.StatusBadRequest, param: fmt.Sprintf("input[%d].content", i),
				message: fmt.Sprintf("Invalid 'input[%d].content': %v", i, err)}
		}
		b.WriteString(text)
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// parseOpenAIResponses parses the body of POST /v1/responses.
func parseOpenAIResponses(body []byte) (genRequest, *apiError) {
	var req openAIResponsesRequest
	if err := decodeJSON(body, &req); err != nil {
		return genRequest{}, err
	}
	if req.Model == "" {
		return genRequest{}, &apiError{status: http.StatusBadRequest, param: "model",
			message: "Missing required parameter: 'model'."}
	}
	limit, aerr := openAILimit("max_output_tokens", req.MaxOutputTokens)
	if aerr != nil {
		return genRequest{}, aerr
	}
	text, aerr := responsesInput(req.Input)
	if aerr != nil {
		return genRequest{}, aerr
	}
	prompt := text
	size := len(text)
	if req.Instructions != nil {
		prompt = *req.Instructions + "\n" + text
		size += len(*req.Instructions)
	}
	g := genRequest{
		api:          apiOpenAIResponses,
		model:        req.Model,
		stream:       req.Stream,
		promptTokens: promptTokenEstimate(size),
		seed:         textSeed(prompt),
		prompt:       prompt,
		limit:        limit,
		instructions: req.Instructions,
	}
	return g.withResponsesShape(&req.responsesShapeFields, responsesLastUser(req.Input))
}

// responsesEmitter writes /v1/responses answers: one response object, or
// the events response.created, response.in_progress,
// response.output_item.added, response.content_part.added,
// response.output_text.delta (one per token), response.output_text.done,
// response.content_part.done, response.output_item.done and
// response.completed (response.incomplete when max_output_tokens cut the
// answer; response.failed when the server shuts down).
type responsesEmitter struct {
	emitBase
	created int64
	seq     int
}

type responsesText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type responsesMessage struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Status  string          `json:"status"`
	Role    string          `json:"role"`
	Content []responsesText `json:"content"`
}

type responsesUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

type responsesObject struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	CreatedAt         int64             `json:"created_at"`
	CompletedAt       *int64            `json:"completed_at"`
	Status            string            `json:"status"`
	Error             any               `json:"error"`
	IncompleteDetails any               `json:"incomplete_details"`
	Instructions      *string           `json:"instructions"`
	MaxOutputTokens   *int              `json:"max_output_tokens"`
	Model             string            `json:"model"`
	Output            []any             `json:"output"`
	ParallelToolCalls bool              `json:"parallel_tool_calls"`
	Temperature       float64           `json:"temperature"`
	TopP              float64           `json:"top_p"`
	ToolChoice        any               `json:"tool_choice"`
	Tools             any               `json:"tools"`
	Truncation        string            `json:"truncation"`
	Text              any               `json:"text"`
	Metadata          map[string]string `json:"metadata"`
	Usage             *responsesUsage   `json:"usage"`
}

func (e *responsesEmitter) itemID() string { return "msg_" + e.id }

func (e *responsesEmitter) object(status string) responsesObject {
	o := responsesObject{
		ID: "resp_" + e.id, Object: "response", CreatedAt: e.created, Status: status,
		Instructions: e.req.instructions, Model: e.req.model, Output: []any{},
		ParallelToolCalls: true, Temperature: 1, TopP: 1, ToolChoice: "auto", Tools: []any{},
		Truncation: "disabled", Text: map[string]any{"format": map[string]string{"type": "text"}},
		Metadata: map[string]string{},
	}
	if echo := e.req.echo; echo != nil {
		o.ParallelToolCalls = echo.parallel
		for _, f := range []struct {
			dst *any
			raw json.RawMessage
		}{{&o.Tools, echo.tools}, {&o.ToolChoice, echo.toolChoice}, {&o.Text, echo.text}} {
			if r := bytes.TrimSpace(f.raw); len(r) > 0 && !bytes.Equal(r, []byte("null")) {
				*f.dst = f.raw
			}
		}
	}
	if e.req.limit > 0 {
		o.MaxOutputTokens = &e.req.limit
	}
	return o
}

func (e *responsesEmitter) message(status, text string) responsesMessage {
	m := responsesMessage{Type: "message", ID: e.itemID(), Status: status, Role: "assistant", Content: []responsesText{}}
	if status != "in_progress" {
		m.Content = append(m.Content, e.part(text))
	}
	return m
}

func (e *responsesEmitter) part(text string) responsesText {
	return responsesText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
}

// event writes one SSE event of type typ with fields, numbering it.
func (e *responsesEmitter) event(typ string, fields map[string]any) error {
	fields["type"] = typ
	fields["sequence_number"] = e.seq
	e.seq++
	b, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	return e.writeFlush(fmt.Appendf(nil, "event: %s\ndata: %s\n\n", typ, b))
}

// begin sends the events that open the stream.
func (e *responsesEmitter) begin() error {
	e.start("text/event-stream; charset=utf-8")
	if err := e.event("response.created", map[string]any{"response": e.object("in_progress")}); err != nil {
		return err
	}
	return e.event("response.in_progress", map[string]any{"response": e.object("in_progress")})
}

// open sends the events before the first text delta.
func (e *responsesEmitter) open() error {
	if err := e.begin(); err != nil {
		return err
	}
	if err := e.event("response.output_item.added", map[string]any{
		"output_index": 0, "item": e.message("in_progress", "")}); err != nil {
		return err
	}
	return e.event("response.content_part.added", map[string]any{
		"item_id": e.itemID(), "output_index": 0, "content_index": 0, "part": e.part("")})
}

func (e *responsesEmitter) token(c int, text string) error {
	call, first, i := e.record(c, text)
	if call >= 0 {
		return e.callToken(call, first, i, text)
	}
	e.text.WriteString(text)
	if !e.req.stream {
		return nil
	}
	if !e.started {
		if err := e.open(); err != nil {
			return err
		}
	}
	return e.event("response.output_text.delta", map[string]any{
		"item_id": e.itemID(), "output_index": 0, "content_index": 0, "delta": text, "logprobs": []any{}})
}

func (e *responsesEmitter) finish(res genResult) {
	status, itemStatus, final := "completed", "completed", "response.completed"
	o := e.object(status)
	if res.reason == finishLength {
		status, itemStatus, final = "incomplete", "incomplete", "response.incomplete"
		o.Status = status
		o.IncompleteDetails = map[string]string{"reason": "max_output_tokens"}
	}
	done := res.finished.Unix()
	o.CompletedAt = &done
	text := e.text.String()
	calls := e.req.choices[0].calls
	if len(calls) > 0 {
		for k := range calls {
			o.Output = append(o.Output, e.callItem(k))
		}
	} else {
		o.Output = []any{e.message(itemStatus, text)}
	}
	o.Usage = &responsesUsage{
		InputTokens: res.promptTokens, InputTokensDetails: map[string]int{"cached_tokens": 0},
		OutputTokens: res.outputTokens, OutputTokensDetails: map[string]int{"reasoning_tokens": 0},
		TotalTokens: res.promptTokens + res.outputTokens,
	}
	if !e.req.stream {
		writeJSON(e.w, http.StatusOK, o)
		return
	}
	if len(calls) > 0 {
		// The done events of each call went out with its last token; a
		// call cut short by max_output_tokens ends here.
		for k := range calls {
			if !e.callComplete(0, k) && e.callDone(k) != nil {
				return
			}
		}
		e.event(final, map[string]any{"response": o})
		return
	}
	if !e.started {
		if e.open() != nil {
			return
		}
	}
	loc := func(m map[string]any) map[string]any {
		m["item_id"], m["output_index"], m["content_index"] = e.itemID(), 0, 0
		return m
	}
	for _, ev := range []struct {
		typ    string
		fields map[string]any
	}{
		{"response.output_text.done", loc(map[string]any{"text": text, "logprobs": []any{}})},
		{"response.content_part.done", loc(map[string]any{"part": e.part(text)})},
		{"response.output_item.done", map[string]any{"output_index": 0, "item": e.message(itemStatus, text)}},
		{final, map[string]any{"response": o}},
	} {
		if e.event(ev.typ, ev.fields) != nil {
			return
		}
	}
}

func (e *responsesEmitter) fail(err error) {
	if !e.started || !e.req.stream {
		e.emitBase.fail(err)
		return
	}
	o := e.object("failed")
	o.Error = map[string]string{"code": "server_error", "message": err.Error()}
	e.event("response.failed", map[string]any{"response": o})
}

func (e *responsesEmitter) callItemID(k int) string { return fmt.Sprintf("fc_%s%d", e.id, k) }

// callItem is the function_call output item of call k as generated so
// far: completed once all its arguments are, in_progress before, and
// incomplete when the answer ended before.
func (e *responsesEmitter) callItem(k int) map[string]any {
	status := "completed"
	if !e.callComplete(0, k) {
		status = "in_progress"
		if e.states[0].count == e.req.choices[0].n {
			status = "incomplete"
		}
	}
	return map[string]any{"type": "function_call", "id": e.callItemID(k), "call_id": e.callID(0, k),
		"name": e.req.choices[0].calls[k].name, "arguments": e.states[0].args[k].String(), "status": status}
}

// callToken streams the i-th token, an argument fragment of call k:
// response.output_item.added before its first fragment, then
// response.function_call_arguments.delta, and after its last
// response.function_call_arguments.done and response.output_item.done.
func (e *responsesEmitter) callToken(k int, first bool, i int, text string) error {
	if !e.req.stream {
		return nil
	}
	if !e.started {
		if err := e.begin(); err != nil {
			return err
		}
	}
	if first {
		item := e.callItem(k)
		item["arguments"] = ""
		if err := e.event("response.output_item.added", map[string]any{"output_index": k, "item": item}); err != nil {
			return err
		}
	}
	if err := e.event("response.function_call_arguments.delta", map[string]any{
		"item_id": e.callItemID(k), "output_index": k, "delta": text}); err != nil {
		return err
	}
	if e.req.choices[0].callDone(k, i) {
		return e.callDone(k)
	}
	return nil
}

func (e *responsesEmitter) callDone(k int) error {
	item := e.callItem(k)
	if err := e.event("response.function_call_arguments.done", map[string]any{
		"item_id": e.callItemID(k), "output_index": k, "name": item["name"], "arguments": item["arguments"]}); err != nil {
		return err
	}
	return e.event("response.output_item.done", map[string]any{"output_index": k, "item": item})
}
