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
	// token adds a generated token; streaming emitters write and flush it.
	token(text string) error
	// finish completes the answer.
	finish(res genResult)
	// fail ends the answer with err: an error status if nothing was sent
	// yet, an in-stream error otherwise.
	fail(err error)
}

func newEmitter(w http.ResponseWriter, req genRequest, id string) emitter {
	base := emitBase{w: w, rc: http.NewResponseController(w), req: req}
	if req.api == apiOpenAIResponses {
		return &responsesEmitter{emitBase: base, id: id, created: time.Now().Unix()}
	}
	if req.api.isOpenAI() {
		return &openAIEmitter{emitBase: base, id: id, created: time.Now().Unix()}
	}
	return &ollamaEmitter{emitBase: base}
}

// emitBase holds what all emitters share.
type emitBase struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	req     genRequest
	started bool            // headers sent
	text    strings.Builder // the whole answer when not streaming
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
// chunks when streaming, one JSON object otherwise.
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

type ollamaChunk struct {
	Model     string         `json:"model"`
	CreatedAt time.Time      `json:"created_at"`
	Message   *ollamaMessage `json:"message,omitempty"`  // chat
	Response  *string        `json:"response,omitempty"` // generate
	Done      bool           `json:"done"`
	*ollamaFinal
}

func (e *ollamaEmitter) chunk(text string) ollamaChunk {
	c := ollamaChunk{Model: e.req.model, CreatedAt: time.Now().UTC()}
	if e.req.api == apiOllamaChat {
		c.Message = &ollamaMessage{Role: "assistant", Content: text}
	} else {
		c.Response = &text
	}
	return c
}

func (e *ollamaEmitter) contentType() string {
	if e.req.stream {
		return "application/x-ndjson"
	}
	return "application/json; charset=utf-8"
}

func (e *ollamaEmitter) token(text string) error {
	if !e.req.stream {
		e.text.WriteString(text)
		return nil
	}
	e.start(e.contentType())
	b, err := json.Marshal(e.chunk(text))
	if err != nil {
		return err
	}
	return e.writeFlush(append(b, '\n'))
}

func (e *ollamaEmitter) finish(res genResult) {
	e.start(e.contentType())
	c := e.chunk(e.text.String())
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
// object otherwise.
type openAIEmitter struct {
	emitBase
	id      string
	created int64
	sentAny bool // a content chunk was sent
}

type openAIUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type openAIDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
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
	Role    string `json:"role"`
	Content string `json:"content"`
	Refusal any    `json:"refusal"`
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

// streamChoice is a streamed choice carrying text and finish reason.
func (e *openAIEmitter) streamChoice(text string, role string, finish *string) openAIChoice {
	if e.req.api == apiOpenAIChat {
		d := &openAIDelta{Role: role}
		if finish == nil {
			d.Content = &text
		}
		return openAIChoice{Delta: d, FinishReason: finish}
	}
	return openAIChoice{Text: &text, FinishReason: finish}
}

func (e *openAIEmitter) token(text string) error {
	if !e.req.stream {
		e.text.WriteString(text)
		return nil
	}
	e.start("text/event-stream; charset=utf-8")
	if !e.sentAny && e.req.api == apiOpenAIChat {
		// Like OpenAI, the first chunk only carries the role.
		if err := e.sse(e.response(e.streamChoice("", "assistant", nil))); err != nil {
			return err
		}
	}
	e.sentAny = true
	return e.sse(e.response(e.streamChoice(text, "", nil)))
}

func (e *openAIEmitter) finish(res genResult) {
	reason := res.reason
	usage := openAIUsage{PromptTokens: res.promptTokens, CompletionTokens: res.outputTokens,
		TotalTokens: res.promptTokens + res.outputTokens}
	if !e.req.stream {
		var choice openAIChoice
		text := e.text.String()
		if e.req.api == apiOpenAIChat {
			choice = openAIChoice{Message: &openAIRespMsg{Role: "assistant", Content: text}, FinishReason: &reason}
		} else {
			choice = openAIChoice{Text: &text, FinishReason: &reason}
		}
		r := e.response(choice)
		r.Usage = usage
		writeJSON(e.w, http.StatusOK, r)
		return
	}
	e.start("text/event-stream; charset=utf-8")
	if err := e.sse(e.response(e.streamChoice("", "", &reason))); err != nil {
		return
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
