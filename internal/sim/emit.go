package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// emitter writes one answer in the shape of one API, streamed or not.
type emitter interface {
	// token adds the next generated token of choice c; streaming emitters
	// write and flush it.
	token(c int, text string) error
	// finish completes the answer.
	finish(res genResult)
	// fail ends the answer with err: an error status if nothing was sent
	// yet, an in-stream error otherwise.
	fail(err error)
}

// newEmitter returns the emitter of req, which must be planned.
func newEmitter(w http.ResponseWriter, req genRequest, id string) emitter {
	base := emitBase{w: w, rc: http.NewResponseController(w), req: req, id: id,
		states: make([]choiceState, len(req.choices))}
	for c := range base.states {
		base.states[c].args = make([]strings.Builder, len(req.choices[c].calls))
	}
	if req.api == apiOpenAIResponses {
		return &responsesEmitter{emitBase: base, created: time.Now().Unix()}
	}
	if req.api.isOpenAI() {
		return &openAIEmitter{emitBase: base, created: time.Now().Unix()}
	}
	return &ollamaEmitter{emitBase: base}
}

// emitBase holds what all emitters share.
type emitBase struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	req     genRequest
	id      string
	started bool // headers sent
	states  []choiceState
	text    strings.Builder // the whole text answer (Responses)
}

// choiceState is what one choice has generated so far.
type choiceState struct {
	text     strings.Builder   // content
	args     []strings.Builder // arguments of each tool call
	count    int               // tokens
	started  bool              // its first chunk was sent (OpenAI chat stream)
	logprobs []tokenLogprob    // of the content tokens, when asked for
}

// record adds the next token of choice c and tells which tool call it
// belongs to (-1: content), whether it is the call's first token, and its
// position in the choice.
func (e *emitBase) record(c int, text string) (call int, first bool, i int) {
	st := &e.states[c]
	i = st.count
	st.count++
	plan := &e.req.choices[c]
	call, first = plan.callAt(i)
	if call >= 0 {
		st.args[call].WriteString(text)
		return call, first, i
	}
	st.text.WriteString(text)
	if e.req.logprobs {
		st.logprobs = append(st.logprobs, logprobOf(plan.seed, i, text, e.req.topLogprobs))
	}
	return call, first, i
}

// callID is the id of tool call k of choice c.
func (e *emitBase) callID(c, k int) string { return fmt.Sprintf("call_%s%d%d", e.id, c, k) }

// callComplete reports whether all the arguments of call k of choice c
// were generated.
func (e *emitBase) callComplete(c, k int) bool {
	return e.states[c].count >= e.req.choices[c].calls[k].end
}

// start sends the success headers once.
func (e *emitBase) start(contentType string) {
	if e.started {
		return
	}
	e.started = true
	h := e.w.Header()
	h.Set("Content-Type", contentType)
	if e.req.stream {
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
	}
	e.w.WriteHeader(http.StatusOK)
}

// writeFlush writes b and flushes it to the client.
func (e *emitBase) writeFlush(b []byte) error {
	if _, err := e.w.Write(b); err != nil {
		return err
	}
	return e.rc.Flush()
}

func (e *emitBase) fail(err error) {
	if !e.started {
		writeError(e.w, e.req.api, &apiError{status: http.StatusServiceUnavailable, message: err.Error()})
		return
	}
	if e.req.stream {
		e.streamError(err)
	}
}

func (e *emitBase) streamError(err error) {
	if e.req.api.isOpenAI() {
		b, _ := json.Marshal(map[string]any{"error": openAIErrorBody(&apiError{status: http.StatusServiceUnavailable, message: err.Error()})})
		e.writeFlush(fmt.Appendf(nil, "data: %s\n\n", b))
		return
	}
	b, _ := json.Marshal(map[string]string{"error": err.Error()})
	e.writeFlush(append(b, '\n'))
}

// ollamaEmitter writes Ollama /api/chat and /api/generate answers: NDJSON
// chunks when streaming, one JSON object otherwise. A tool call is sent
// whole, with its arguments as an object, in the chunk of its last token
// (Ollama parses calls out of the model's output before sending them);
// arguments cut short by num_predict are content.
type ollamaEmitter struct {
	emitBase
}

type ollamaFinal struct {
	DoneReason         string `json:"done_reason"`
	TotalDuration      int64  `json:"total_duration"`
	LoadDuration       int64  `json:"load_duration"`
	PromptEvalCount    int    `json:"prompt_eval_count"`
	PromptEvalDuration int64  `json:"prompt_eval_duration"`
	EvalCount          int    `json:"eval_count"`
	EvalDuration       int64  `json:"eval_duration"`
}

type ollamaOutMessage struct {
	Role      string           `json:"role"`
	Content   string           `json:"content"`
	ToolCalls []ollamaToolCall `json:"tool_calls,omitempty"`
}

type ollamaToolCall struct {
	ID       string             `json:"id,omitempty"`
	Function ollamaCallFunction `json:"function"`
}

type ollamaCallFunction struct {
	Index     int             `json:"index"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type ollamaTokenLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes,omitempty"`
}

type ollamaLogprob struct {
	ollamaTokenLogprob
	TopLogprobs []ollamaTokenLogprob `json:"top_logprobs,omitempty"`
}

type ollamaChunk struct {
	Model     string            `json:"model"`
	CreatedAt time.Time         `json:"created_at"`
	Message   *ollamaOutMessage `json:"message,omitempty"`  // chat
	Response  *string           `json:"response,omitempty"` // generate
	Done      bool              `json:"done"`
	Logprobs  []ollamaLogprob   `json:"logprobs,omitempty"`
	*ollamaFinal
}

func (e *ollamaEmitter) chunk(text string, calls []ollamaToolCall, lps []tokenLogprob) ollamaChunk {
	c := ollamaChunk{Model: e.req.model, CreatedAt: time.Now().UTC()}
	if e.req.api == apiOllamaChat {
		c.Message = &ollamaOutMessage{Role: "assistant", Content: text, ToolCalls: calls}
	} else {
		c.Response = &text
	}
	for _, lp := range lps {
		l := ollamaLogprob{ollamaTokenLogprob: ollamaTokenLogprob{Token: lp.token, Logprob: lp.logprob, Bytes: tokenBytes(lp.token)}}
		for _, t := range lp.top {
			l.TopLogprobs = append(l.TopLogprobs, ollamaTokenLogprob{Token: t.token, Logprob: t.logprob, Bytes: tokenBytes(t.token)})
		}
		c.Logprobs = append(c.Logprobs, l)
	}
	return c
}

func (e *ollamaEmitter) toolCall(k int) ollamaToolCall {
	return ollamaToolCall{ID: e.callID(0, k), Function: ollamaCallFunction{Index: k,
		Name: e.req.choices[0].calls[k].name, Arguments: json.RawMessage(e.states[0].args[k].String())}}
}

func (e *ollamaEmitter) contentType() string {
	if e.req.stream {
		return "application/x-ndjson"
	}
	return "application/json; charset=utf-8"
}

func (e *ollamaEmitter) token(c int, text string) error {
	call, _, i := e.record(c, text)
	if !e.req.stream {
		return nil
	}
	var ch ollamaChunk
	switch {
	case call < 0:
		var lps []tokenLogprob
		if st := &e.states[c]; e.req.logprobs {
			lps = st.logprobs[len(st.logprobs)-1:]
		}
		ch = e.chunk(text, nil, lps)
	case e.req.choices[c].callDone(call, i):
		ch = e.chunk("", []ollamaToolCall{e.toolCall(call)}, nil)
	default:
		return nil // the call is sent when whole
	}
	e.start(e.contentType())
	b, err := json.Marshal(ch)
	if err != nil {
		return err
	}
	return e.writeFlush(append(b, '\n'))
}

func (e *ollamaEmitter) finish(res genResult) {
	e.start(e.contentType())
	var c ollamaChunk
	if e.req.stream {
		c = e.chunk("", nil, nil)
		for k := range e.req.choices[0].calls {
			if !e.callComplete(0, k) && e.states[0].args[k].Len() > 0 {
				c = e.chunk(e.states[0].args[k].String(), nil, nil) // cut short: plain text
			}
		}
	} else {
		st := &e.states[0]
		text := st.text.String()
		var calls []ollamaToolCall
		for k := range e.req.choices[0].calls {
			if e.callComplete(0, k) {
				calls = append(calls, e.toolCall(k))
			} else {
				text += st.args[k].String()
			}
		}
		c = e.chunk(text, calls, st.logprobs)
	}
	c.Done = true
	c.ollamaFinal = &ollamaFinal{
		DoneReason:         res.reason,
		TotalDuration:      int64(res.finished.Sub(res.arrived)),
		LoadDuration:       int64(res.admitted.Sub(res.arrived)),
		PromptEvalCount:    res.promptTokens,
		PromptEvalDuration: int64(res.firstToken.Sub(res.admitted)),
		EvalCount:          res.outputTokens,
		EvalDuration:       int64(res.finished.Sub(res.firstToken)),
	}
	b, err := json.Marshal(c)
	if err != nil {
		return
	}
	e.writeFlush(append(b, '\n'))
}

// openAIEmitter writes OpenAI /v1/chat/completions and /v1/completions
// answers: SSE chunks ending with "data: [DONE]" when streaming, one JSON
// object otherwise. Choices (n) carry their index; a streamed tool call
// starts with a delta carrying its index, id, type and name (arguments
// ""), then one delta per argument token.
type openAIEmitter struct {
	emitBase
	created int64
}

type openAIUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type openAIDelta struct {
	Role      string                `json:"role,omitempty"`
	Content   *string               `json:"content,omitempty"`
	ToolCalls []openAIToolCallDelta `json:"tool_calls,omitempty"`
}

type openAIToolCallDelta struct {
	Index    int                `json:"index"`
	ID       string             `json:"id,omitempty"`
	Type     string             `json:"type,omitempty"`
	Function openAIFunctionCall `json:"function"`
}

type openAIFunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type openAIToolCall struct {
	ID       string             `json:"id"`
	Type     string             `json:"type"`
	Function openAIFunctionCall `json:"function"`
}

type openAIChoice struct {
	Index        int            `json:"index"`
	Message      *openAIRespMsg `json:"message,omitempty"` // chat, not streamed
	Delta        *openAIDelta   `json:"delta,omitempty"`   // chat, streamed
	Text         *string        `json:"text,omitempty"`    // completions
	Logprobs     any            `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
}

type openAIRespMsg struct {
	Role      string           `json:"role"`
	Content   *string          `json:"content"`
	ToolCalls []openAIToolCall `json:"tool_calls,omitempty"`
	Refusal   any              `json:"refusal"`
}

type openAIResponse struct {
	ID                string         `json:"id"`
	Object            string         `json:"object"`
	Created           int64          `json:"created"`
	Model             string         `json:"model"`
	SystemFingerprint string         `json:"system_fingerprint"`
	Choices           []openAIChoice `json:"choices"`
	Usage             any            `json:"usage,omitempty"`
}

// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs}],
// "refusal": null}.
type openAIChatLogprobs struct {
	Content []openAITokenLogprob `json:"content"`
	Refusal any                  `json:"refusal"`
}

type openAITokenLogprob struct {
	Token       string               `json:"token"`
	Logprob     float64              `json:"logprob"`
	Bytes       []int                `json:"bytes"`
	TopLogprobs []openAITokenLogprob `json:"top_logprobs,omitempty"`
}

// Legacy completions logprobs: parallel arrays.
type openAICompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// logprobs renders lps (starting at byte offset off of the choice's text)
// in the shape of the endpoint; nil when not asked for.
func (e *openAIEmitter) logprobs(lps []tokenLogprob, off int) any {
	if !e.req.logprobs {
		return nil
	}
	if e.req.api == apiOpenAIChat {
		out := openAIChatLogprobs{Content: []openAITokenLogprob{}}
		for _, lp := range lps {
			t := openAITokenLogprob{Token: lp.token, Logprob: lp.logprob, Bytes: tokenBytes(lp.token),
				TopLogprobs: []openAITokenLogprob{}}
			for _, a := range lp.top {
				t.TopLogprobs = append(t.TopLogprobs, openAITokenLogprob{Token: a.token, Logprob: a.logprob, Bytes: tokenBytes(a.token)})
			}
			out.Content = append(out.Content, t)
		}
		return out
	}
	out := openAICompletionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{},
		TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, lp := range lps {
		out.Tokens = append(out.Tokens, lp.token)
		out.TokenLogprobs = append(out.TokenLogprobs, lp.logprob)
		top := map[string]float64{}
		for _, a := range lp.top {
			if _, ok := top[a.token]; !ok {
				top[a.token] = a.logprob
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, off)
		off += len(lp.token)
	}
	return out
}

func (e *openAIEmitter) response(choices ...openAIChoice) openAIResponse {
	r := openAIResponse{Created: e.created, Model: e.req.model, SystemFingerprint: "fp_tidegpu_sim",
		Choices: choices}
	if choices == nil {
		r.Choices = []openAIChoice{}
	}
	chat := e.req.api == apiOpenAIChat
	switch {
	case chat && e.req.stream:
		r.ID, r.Object = "chatcmpl-"+e.id, "chat.completion.chunk"
	case chat:
		r.ID, r.Object = "chatcmpl-"+e.id, "chat.completion"
	default:
		r.ID, r.Object = "cmpl-"+e.id, "text_completion"
	}
	if e.req.includeUsage {
		r.Usage = json.RawMessage("null")
	}
	return r
}

func (e *openAIEmitter) sse(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.writeFlush(fmt.Appendf(nil, "data: %s\n\n", b))
}

// reason is the finish reason of choice c: "tool_calls" for an answer
// that ends with its tool calls.
func (e *openAIEmitter) reason(c int) *string {
	r := e.req.choices[c].reason
	if r == finishStop && len(e.req.choices[c].calls) > 0 && e.req.api == apiOpenAIChat {
		r = "tool_calls"
	}
	return &r
}

func (e *openAIEmitter) delta(c int, d openAIDelta) error {
	return e.sse(e.response(openAIChoice{Index: c, Delta: &d}))
}

func (e *openAIEmitter) token(c int, text string) error {
	st := &e.states[c]
	off := st.text.Len()
	call, first, _ := e.record(c, text)
	if !e.req.stream {
		return nil
	}
	e.start("text/event-stream; charset=utf-8")
	if e.req.api != apiOpenAIChat {
		var lp any
		if e.req.logprobs {
			lp = e.logprobs(st.logprobs[len(st.logprobs)-1:], off)
		}
		return e.sse(e.response(openAIChoice{Index: c, Text: &text, Logprobs: lp}))
	}
	if !st.started {
		// Like OpenAI, a choice's first chunk only carries the role.
		st.started = true
		d := openAIDelta{Role: "assistant"}
		if len(e.req.choices[c].calls) == 0 {
			empty := ""
			d.Content = &empty
		}
		if err := e.delta(c, d); err != nil {
			return err
		}
	}
	if call >= 0 {
		if first {
			name := e.req.choices[c].calls[call].name
			if err := e.delta(c, openAIDelta{ToolCalls: []openAIToolCallDelta{{Index: call, ID: e.callID(c, call),
				Type: "function", Function: openAIFunctionCall{Name: name}}}}); err != nil {
				return err
			}
		}
		return e.delta(c, openAIDelta{ToolCalls: []openAIToolCallDelta{{Index: call,
			Function: openAIFunctionCall{Arguments: text}}}})
	}
	ch := openAIChoice{Index: c, Delta: &openAIDelta{Content: &text}}
	if e.req.logprobs {
		ch.Logprobs = e.logprobs(st.logprobs[len(st.logprobs)-1:], off)
	}
	return e.sse(e.response(ch))
}

func (e *openAIEmitter) finish(res genResult) {
	usage := openAIUsage{PromptTokens: res.promptTokens, CompletionTokens: res.outputTokens,
		TotalTokens: res.promptTokens + res.outputTokens}
	if !e.req.stream {
		choices := make([]openAIChoice, len(e.states))
		for c := range e.states {
			st := &e.states[c]
			text := st.text.String()
			choice := openAIChoice{Index: c, FinishReason: e.reason(c), Logprobs: e.logprobs(st.logprobs, 0)}
			if e.req.api == apiOpenAIChat {
				msg := &openAIRespMsg{Role: "assistant", Content: &text}
				for k, call := range e.req.choices[c].calls {
					msg.ToolCalls = append(msg.ToolCalls, openAIToolCall{ID: e.callID(c, k), Type: "function",
						Function: openAIFunctionCall{Name: call.name, Arguments: st.args[k].String()}})
				}
				if len(msg.ToolCalls) > 0 && text == "" {
					msg.Content = nil
				}
				choice.Message = msg
			} else {
				choice.Text = &text
			}
			choices[c] = choice
		}
		r := e.response(choices...)
		r.Usage = usage
		writeJSON(e.w, http.StatusOK, r)
		return
	}
	e.start("text/event-stream; charset=utf-8")
	for c := range e.states {
		ch := openAIChoice{Index: c, FinishReason: e.reason(c)}
		if e.req.api == apiOpenAIChat {
			ch.Delta = &openAIDelta{}
		} else {
			empty := ""
			ch.Text = &empty
		}
		if err := e.sse(e.response(ch)); err != nil {
			return
		}
	}
	if e.req.includeUsage {
		r := e.response()
		r.Usage = usage
		if err := e.sse(r); err != nil {
			return
		}
	}
	e.writeFlush([]byte("data: [DONE]\n\n"))
}
