package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"reflect"
	"unicode"
)

// What an answer generates: one or more choices (OpenAI n), each either
// poem text, a JSON value (Ollama format, OpenAI response_format) or tool
// calls whose arguments are JSON values (tools). A structured answer is
// written out when the request is parsed and then emitted token by token
// at the same pace as text, so its usage counts exactly the tokens sent.

// choicePlan is what one choice of an answer generates.
type choicePlan struct {
	seed   int
	pieces []string   // the tokens of a structured answer; nil: poem text
	calls  []callPlan // tool calls; their arguments are pieces[start:end]
	n      int        // tokens generated (set by genRequest.planned)
	reason string     // finishStop or finishLength (set by genRequest.planned)
}

// callPlan is one tool call of a choice.
type callPlan struct {
	name       string
	start, end int
}

// text is the i-th token of the choice.
func (c *choicePlan) text(i int) string {
	if c.pieces == nil {
		return tokenText(c.seed, i)
	}
	return c.pieces[i]
}

// callAt returns the tool call whose arguments the i-th token belongs to
// and whether it is the call's first token; -1 for content tokens.
func (c *choicePlan) callAt(i int) (int, bool) {
	for k, call := range c.calls {
		if i >= call.start && i < call.end {
			return k, i == call.start
		}
	}
	return -1, false
}

// callDone reports whether the i-th token is the last one of call k.
func (c *choicePlan) callDone(k, i int) bool { return c.calls[k].end == i+1 }

// planned returns req with its choices' lengths and finish reasons set:
// poem choices generate outputTokens tokens (or the request's limit),
// structured ones their pieces, cut at the limit.
func (req genRequest) planned(outputTokens int) genRequest {
	if len(req.choices) == 0 {
		req.choices = []choicePlan{{seed: req.seed}}
	} else {
		req.choices = append([]choicePlan(nil), req.choices...)
	}
	for i := range req.choices {
		c := &req.choices[i]
		c.n, c.reason = outputTokens, finishStop
		if c.pieces != nil {
			c.n = len(c.pieces)
		}
		if req.limit > 0 && (c.pieces == nil || req.limit < c.n) {
			c.n, c.reason = req.limit, finishLength
		}
	}
	return req
}

// steps is the number of decoding steps: the longest choice.
func (req *genRequest) steps() (steps, tokens int) {
	for _, c := range req.choices {
		steps = max(steps, c.n)
		tokens += c.n
	}
	return steps, tokens
}

// choiceSeed is the seed of the c-th choice: choice 0 starts where a
// single answer would, the others elsewhere in the poem.
func choiceSeed(seed, c int) int {
	return (seed + c*17) % len(poemTokens)
}

// shape is what a request asks its answer to be, as parsed.
type shape struct {
	n      int        // choices, >= 1
	format *schemaDoc // JSON output of this schema; nil: text
	calls  []toolSpec // tools the answer calls; nil: none
}

// defaultJSON is the schema of "JSON mode" (Ollama format "json", OpenAI
// json_object): an object with one string member.
var defaultJSON = func() *schemaDoc {
	d, err := parseSchema(json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`))
	if err != nil {
		panic(err)
	}
	return d
}()

// choices writes out the answer of sh for a request with seed; nil when
// the answer is plain text.
func (sh shape) choices(seed int) ([]choicePlan, error) {
	n := max(sh.n, 1)
	if sh.format == nil && len(sh.calls) == 0 && n == 1 {
		return nil, nil
	}
	out := make([]choicePlan, n)
	for c := range out {
		cs := choiceSeed(seed, c)
		p := choicePlan{seed: cs}
		switch {
		case len(sh.calls) > 0:
			p.pieces = []string{}
			for k, t := range sh.calls {
				args := []byte("{}")
				if t.params != nil {
					var err error
					if args, err = t.params.generate(cs*31 + k); err != nil {
						return nil, fmt.Errorf("function %q: %v", t.name, err)
					}
				}
				start := len(p.pieces)
				p.pieces = append(p.pieces, splitTokens(string(args))...)
				p.calls = append(p.calls, callPlan{name: t.name, start: start, end: len(p.pieces)})
			}
		case sh.format != nil:
			v, err := sh.format.generate(cs)
			if err != nil {
				return nil, err
			}
			p.pieces = splitTokens(string(v))
		}
		out[c] = p
	}
	return out, nil
}

// splitTokens cuts generated JSON text into tokens: runs of letters and
// digits with the spaces before them, and single other characters. The
// tokens concatenate back to s.
func splitTokens(s string) []string {
	var out []string
	start := 0
	word := false // s[start:i] holds word characters
	for i, r := range s {
		isWord := r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
		isSpace := r == ' '
		switch {
		case i == start:
		case isWord && !word && onlySpaces(s[start:i]):
			// spaces then a word: one token
		case isWord && word:
		case isSpace && !word && onlySpaces(s[start:i]):
		default:
			out = append(out, s[start:i])
			start = i
		}
		word = isWord
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func onlySpaces(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' {
			return false
		}
	}
	return true
}

// tokenLogprob is the simulated log probability of a generated token and
// of the alternatives shown for it: deterministic, the token the most
// likely.
type tokenLogprob struct {
	token   string
	logprob float64
	top     []tokenLogprob
}

// logprobOf returns the log probability of the i-th token text of a
// choice with seed, with top alternatives (the token first).
func logprobOf(seed, i int, text string, top int) tokenLogprob {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", seed, i)
	lp := -float64(h.Sum64()%3000) / 1000 // in (-3, 0]
	t := tokenLogprob{token: text, logprob: lp}
	for k := range top {
		alt := tokenLogprob{token: text, logprob: lp}
		if k > 0 {
			alt = tokenLogprob{token: poemTokens[(seed+i+k*7)%len(poemTokens)],
				logprob: lp - float64(k) - 0.25}
		}
		t.top = append(t.top, alt)
	}
	return t
}

// tokenBytes is the UTF-8 bytes of a token as the APIs list them.
func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = int(s[i])
	}
	return b
}

// ollamaFormat reads Ollama's format field: "json" or a JSON schema
// object; null and "" mean none. The messages are Ollama's own.
func ollamaFormat(raw json.RawMessage) (*schemaDoc, *apiError) {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "", "null", `""`:
		return nil, nil
	case `"json"`:
		return defaultJSON, nil
	}
	if raw[0] != '{' {
		return nil, badRequest("invalid format: %q; expected \"json\" or a valid JSON Schema object", raw)
	}
	doc, err := parseSchema(raw)
	if err != nil {
		return nil, badRequest("invalid JSON schema in format: %v", err)
	}
	return doc, nil
}

// openAIResponseFormat reads OpenAI's response_format: {"type": "text"},
// {"type": "json_object"} or {"type": "json_schema", "json_schema":
// {"name", "schema", "strict"}}.
func openAIResponseFormat(raw json.RawMessage) (*schemaDoc, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if json.Unmarshal(raw, &rf) != nil {
		return nil, invalidParam("response_format", "Invalid type for 'response_format': expected an object.")
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return defaultJSON, nil
	case "json_schema":
	case "":
		return nil, invalidParam("response_format.type", "Missing required parameter: 'response_format.type'.")
	default:
		return nil, invalidParam("response_format.type", fmt.Sprintf(
			"Invalid value: '%s'. Supported values are: 'text', 'json_object', and 'json_schema'.", rf.Type))
	}
	if rf.JSONSchema == nil {
		return nil, invalidParam("response_format.json_schema", "Missing required parameter: 'response_format.json_schema'.")
	}
	if !validFunctionName(rf.JSONSchema.Name) {
		return nil, invalidParam("response_format.json_schema.name", fmt.Sprintf(
			"Invalid 'response_format.json_schema.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$', got '%s'.", rf.JSONSchema.Name))
	}
	schemaRaw := rf.JSONSchema.Schema
	if len(bytes.TrimSpace(schemaRaw)) == 0 {
		schemaRaw = json.RawMessage(`{}`)
	}
	doc, err := parseSchema(schemaRaw)
	if err != nil {
		return nil, invalidParam("response_format.json_schema.schema", fmt.Sprintf(
			"Invalid schema for response_format '%s': %v", rf.JSONSchema.Name, err))
	}
	return doc, nil
}

// invalidParam is an OpenAI 400 naming the parameter at fault.
func invalidParam(param, message string) *apiError {
	return &apiError{status: http.StatusBadRequest, param: param, message: message}
}

// openAIChoiceCount validates n (1 to 128, as OpenAI documents).
func openAIChoiceCount(v *int64) (int, *apiError) {
	switch {
	case v == nil:
		return 1, nil
	case *v < 1:
		return 0, invalidParam("n", fmt.Sprintf("Invalid 'n': integer below minimum value. Expected a value >= 1, but got %d instead.", *v))
	case *v > 128:
		return 0, invalidParam("n", fmt.Sprintf("Invalid 'n': integer above maximum value. Expected a value <= 128, but got %d instead.", *v))
	}
	return int(*v), nil
}

// openAITopLogprobs validates top_logprobs (0 to 20, with logprobs true).
func openAITopLogprobs(logprobs bool, v *int64) (int, *apiError) {
	switch {
	case v == nil:
		return 0, nil
	case *v < 0 || *v > 20:
		return 0, invalidParam("top_logprobs", fmt.Sprintf(
			"Invalid 'top_logprobs': expected a value between 0 and 20, but got %d instead.", *v))
	case !logprobs:
		return 0, invalidParam("top_logprobs", "Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.")
	}
	return int(*v), nil
}

// checkAnswerSize refuses a structured answer of more tokens, across its
// choices, than four times MaxOutputTokens.
func checkAnswerSize(choices []choicePlan) *apiError {
	total := 0
	for _, c := range choices {
		total += len(c.pieces)
	}
	if total > 4*MaxOutputTokens {
		return badRequest("the requested output is too large to generate (%d tokens)", total)
	}
	return nil
}

// typeError renders a JSON value of the wrong type for a field as OpenAI
// does ("Invalid type for 'stream': expected a boolean, but got a string
// instead."), naming the field; nil for other errors.
func typeError(err error) *apiError {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return nil
	}
	want := "a valid value"
	if te.Type != nil {
		switch te.Type.Kind() {
		case reflect.Bool:
			want = "a boolean"
		case reflect.String:
			want = "a string"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			want = "an integer"
		case reflect.Float32, reflect.Float64:
			want = "a number"
		case reflect.Slice, reflect.Array:
			want = "an array"
		case reflect.Struct, reflect.Map:
			want = "an object"
		}
	}
	got := te.Value
	switch got {
	case "array", "object", "number", "string", "bool":
		if got == "bool" {
			got = "boolean"
		}
		got = "a " + got
		if got == "a array" || got == "a object" {
			got = "an " + got[2:]
		}
	}
	return invalidParam(te.Field, fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", te.Field, want, got))
}
