package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// apiKind is the API a request came in through.
type apiKind int

const (
	apiOllamaChat apiKind = iota
	apiOllamaGenerate
	apiOpenAIChat
	apiOpenAICompletion
	apiOllama // the other Ollama endpoints (/api/...)
	apiOpenAI // the other OpenAI endpoints (/v1/...)
	apiOpenAIResponses
)

// isOpenAI reports whether errors for k use the OpenAI error shape.
func (k apiKind) isOpenAI() bool {
	switch k {
	case apiOpenAIChat, apiOpenAICompletion, apiOpenAI, apiOpenAIResponses:
		return true
	}
	return false
}

// Finish reasons (Ollama done_reason, OpenAI finish_reason, vLLM
// finished_reason label).
const (
	finishStop   = "stop"
	finishLength = "length"
	finishLoad   = "load"
)

// genRequest is a parsed generation request, independent of the API.
type genRequest struct {
	api          apiKind
	model        string // as the client spelled it; echoed back
	stream       bool
	includeUsage bool    // OpenAI stream_options.include_usage
	promptTokens int     // estimated, >= 1
	seed         int     // start position in the generated text
	prompt       string  // the prompt text the prefix cache sees
	limit        int     // requested number of output tokens; 0 = not set
	loadOnly     bool    // Ollama request without messages/prompt: only "load" the model
	instructions *string // OpenAI Responses: echoed back
	// choices are the answer's choices when it has several (OpenAI n) or
	// is structured (JSON format, tool calls); nil: one text choice.
	choices     []choicePlan
	logprobs    bool           // OpenAI logprobs (chat), Ollama logprobs
	topLogprobs int            // alternatives per token; OpenAI completions' logprobs
	echo        *responsesEcho // OpenAI Responses: request fields the response repeats
}

// apiError is a client-visible error; it is rendered in the shape of the API
// the request came through.
type apiError struct {
	status  int
	message string
	param   string // OpenAI only
	code    string // OpenAI only
}

func (e *apiError) Error() string { return e.message }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, message: fmt.Sprintf(format, args...)}
}

// ollamaOptions are the generation options the simulator looks at; every
// other option is accepted and ignored.
type ollamaOptions struct {
	NumPredict json.RawMessage `json:"num_predict"`
}

type ollamaMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type ollamaChatRequest struct {
	Model    string          `json:"model"`
	Messages []ollamaMessage `json:"messages"`
	Stream   *bool           `json:"stream"`
	Options  *ollamaOptions  `json:"options"`
	Format   json.RawMessage `json:"format"`
	Tools    json.RawMessage `json:"tools"`
	ollamaLogprobs
}

type ollamaLogprobs struct {
	Logprobs    bool `json:"logprobs"`
	TopLogprobs int  `json:"top_logprobs"`
}

type ollamaGenerateRequest struct {
	Model   string          `json:"model"`
	Prompt  string          `json:"prompt"`
	Suffix  string          `json:"suffix"`
	System  string          `json:"system"`
	Stream  *bool           `json:"stream"`
	Options *ollamaOptions  `json:"options"`
	Format  json.RawMessage `json:"format"`
	ollamaLogprobs
}

// decodeJSON decodes body into v like the real servers: an empty body and
// trailing data are errors, unknown fields are not.
func decodeJSON(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("missing request body")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		if aerr := typeError(err); aerr != nil {
			return aerr
		}
		return badRequest("invalid JSON body: %v", err)
	}
	if dec.More() {
		return badRequest("invalid JSON body: unexpected data after the JSON value")
	}
	return nil
}

// ollamaLimit returns the token limit set by options.num_predict; a missing,
// zero or negative value (-1 infinite, -2 fill context) means no limit.
func ollamaLimit(opts *ollamaOptions) (int, *apiError) {
	if opts == nil || len(opts.NumPredict) == 0 {
		return 0, nil
	}
	var f float64
	if err := json.Unmarshal(opts.NumPredict, &f); err != nil {
		return 0, badRequest("option %q must be a number", "num_predict")
	}
	return clampLimit(f), nil
}

// clampLimit turns a requested token count into a limit: non-positive means
// none, larger than MaxOutputTokens is capped.
func clampLimit(f float64) int {
	switch {
	case math.IsNaN(f) || f < 1:
		return 0
	case f > MaxOutputTokens:
		return MaxOutputTokens
	}
	return int(f)
}

// parseOllamaChat parses the body of POST /api/chat.
func parseOllamaChat(body []byte) (genRequest, *apiError) {
	var req ollamaChatRequest
	if err := decodeJSON(body, &req); err != nil {
		return genRequest{}, err
	}
	if req.Model == "" {
		return genRequest{}, badRequest("model is required")
	}
	limit, aerr := ollamaLimit(req.Options)
	if aerr != nil {
		return genRequest{}, aerr
	}
	var prompt strings.Builder
	for _, m := range req.Messages {
		prompt.WriteString(m.Content)
		prompt.WriteByte('\n')
	}
	g := genRequest{
		api:          apiOllamaChat,
		model:        req.Model,
		stream:       req.Stream == nil || *req.Stream,
		promptTokens: promptTokenEstimate(contentBytes(req.Messages)),
		seed:         textSeed(prompt.String()),
		prompt:       prompt.String(),
		limit:        limit,
		loadOnly:     len(req.Messages) == 0,
	}
	lastUser := ""
	if n := len(req.Messages); n > 0 && strings.EqualFold(req.Messages[n-1].Role, "user") {
		lastUser = req.Messages[n-1].Content
	}
	return g.withOllamaShape(req.Format, req.Tools, lastUser, req.ollamaLogprobs)
}

func contentBytes(msgs []ollamaMessage) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
	}
	return n
}

// parseOllamaGenerate parses the body of POST /api/generate.
func parseOllamaGenerate(body []byte) (genRequest, *apiError) {
	var req ollamaGenerateRequest
	if err := decodeJSON(body, &req); err != nil {
		return genRequest{}, err
	}
	if req.Model == "" {
		return genRequest{}, badRequest("model is required")
	}
	limit, aerr := ollamaLimit(req.Options)
	if aerr != nil {
		return genRequest{}, aerr
	}
	g := genRequest{
		api:          apiOllamaGenerate,
		model:        req.Model,
		stream:       req.Stream == nil || *req.Stream,
		promptTokens: promptTokenEstimate(len(req.System) + len(req.Prompt) + len(req.Suffix)),
		seed:         textSeed(req.System + "\n" + req.Prompt),
		prompt:       req.System + "\n" + req.Prompt,
		limit:        limit,
		loadOnly:     req.Prompt == "" && req.Suffix == "",
	}
	return g.withOllamaShape(req.Format, nil, "", req.ollamaLogprobs)
}

type openAIStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type openAIMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type openAIChatRequest struct {
	Model               string               `json:"model"`
	Messages            []openAIMessage      `json:"messages"`
	Stream              bool                 `json:"stream"`
	StreamOptions       *openAIStreamOptions `json:"stream_options"`
	MaxTokens           *int64               `json:"max_tokens"`
	MaxCompletionTokens *int64               `json:"max_completion_tokens"`
	N                   *int64               `json:"n"`
	Tools               json.RawMessage      `json:"tools"`
	ToolChoice          json.RawMessage      `json:"tool_choice"`
	ParallelToolCalls   *bool                `json:"parallel_tool_calls"`
	ResponseFormat      json.RawMessage      `json:"response_format"`
	Logprobs            *bool                `json:"logprobs"`
	TopLogprobs         *int64               `json:"top_logprobs"`
}

type openAICompletionRequest struct {
	Model         string               `json:"model"`
	Prompt        json.RawMessage      `json:"prompt"`
	Suffix        string               `json:"suffix"`
	Stream        bool                 `json:"stream"`
	StreamOptions *openAIStreamOptions `json:"stream_options"`
	MaxTokens     *int64               `json:"max_tokens"`
	N             *int64               `json:"n"`
	Logprobs      *int64               `json:"logprobs"`
}

// openAIContent returns the text of an OpenAI message content: a string, an
// array of content parts (the text parts count), or null.
func openAIContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", err
		}
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("content must be a string or an array of content parts")
}

// openAILimit validates an OpenAI max_tokens-style field.
func openAILimit(name string, v *int64) (int, *apiError) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, &apiError{status: http.StatusBadRequest, param: name,
			message: fmt.Sprintf("Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", name, *v)}
	}
	return clampLimit(float64(*v)), nil
}

// parseOpenAIChat parses the body of POST /v1/chat/completions.
func parseOpenAIChat(body []byte) (genRequest, *apiError) {
	var req openAIChatRequest
	if err := decodeJSON(body, &req); err != nil {
		return genRequest{}, err
	}
	if req.Model == "" {
		return genRequest{}, &apiError{status: http.StatusBadRequest, param: "model",
			message: "you must provide a model parameter"}
	}
	if len(req.Messages) == 0 {
		return genRequest{}, &apiError{status: http.StatusBadRequest, param: "messages",
			message: "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead."}
	}
	limit, aerr := openAILimit("max_tokens", req.MaxTokens)
	if aerr != nil {
		return genRequest{}, aerr
	}
	if req.MaxCompletionTokens != nil {
		if limit, aerr = openAILimit("max_completion_tokens", req.MaxCompletionTokens); aerr != nil {
			return genRequest{}, aerr
		}
	}
	var prompt strings.Builder
	size := 0
	lastUser := ""
	for i, m := range req.Messages {
		text, err := openAIContent(m.Content)
		if err != nil {
			return genRequest{}, &apiError{status: http.StatusBadRequest,
				param:   fmt.Sprintf("messages[%d].content", i),
				message: fmt.Sprintf("Invalid 'messages[%d].content': %v", i, err)}
		}
		size += len(text)
		prompt.WriteString(text)
		prompt.WriteByte('\n')
		lastUser = ""
		if m.Role == "user" {
			lastUser = text
		}
	}
	g := genRequest{
		api:          apiOpenAIChat,
		model:        req.Model,
		stream:       req.Stream,
		includeUsage: req.Stream && req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		promptTokens: promptTokenEstimate(size),
		seed:         textSeed(prompt.String()),
		prompt:       prompt.String(),
		limit:        limit,
	}
	return g.withOpenAIChatShape(&req, lastUser)
}

// openAIPrompt returns the text and size in tokens of a legacy completion
// prompt: a string, an array of strings, an array of token ids, or an array
// of arrays of token ids.
func openAIPrompt(raw json.RawMessage) (string, int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", 1, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, promptTokenEstimate(len(s)), nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		text := strings.Join(ss, "\n")
		return text, promptTokenEstimate(len(text)), nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		return string(raw), max(len(ids), 1), nil
	}
	var idss [][]int64
	if json.Unmarshal(raw, &idss) == nil {
		n := 0
		for _, ids := range idss {
			n += len(ids)
		}
		return string(raw), max(n, 1), nil
	}
	return "", 0, fmt.Errorf("prompt must be a string, an array of strings, or an array of token ids")
}

// parseOpenAICompletion parses the body of POST /v1/completions.
func parseOpenAICompletion(body []byte) (genRequest, *apiError) {
	var req openAICompletionRequest
	if err := decodeJSON(body, &req); err != nil {
		return genRequest{}, err
	}
	if req.Model == "" {
		return genRequest{}, &apiError{status: http.StatusBadRequest, param: "model",
			message: "you must provide a model parameter"}
	}
	limit, aerr := openAILimit("max_tokens", req.MaxTokens)
	if aerr != nil {
		return genRequest{}, aerr
	}
	text, tokens, err := openAIPrompt(req.Prompt)
	if err != nil {
		return genRequest{}, &apiError{status: http.StatusBadRequest, param: "prompt",
			message: "Invalid 'prompt': " + err.Error()}
	}
	g := genRequest{
		api:          apiOpenAICompletion,
		model:        req.Model,
		stream:       req.Stream,
		includeUsage: req.Stream && req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		promptTokens: tokens,
		seed:         textSeed(text),
		prompt:       text,
		limit:        limit,
	}
	return g.withOpenAICompletionShape(&req)
}
