package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// FuzzChatRequest feeds arbitrary request bodies (outside input) to every
// request parser: they must not panic, must reject with 400, and must
// accept only requests satisfying the invariants the server relies on.
func FuzzChatRequest(f *testing.F) {
	for _, seed := range []string{
		``,
		`{`,
		`null`,
		`[]`,
		`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"num_predict":3}}`,
		`{"model":"m","messages":[],"options":{"num_predict":-1}}`,
		`{"model":"m","options":{"num_predict":1e300}}`,
		`{"model":"m","options":null,"messages":null}`,
		`{"model":"m","prompt":"p","system":"s","suffix":"x","options":{"num_predict":"7"}}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}],"max_tokens":5}`,
		`{"model":"m","messages":[{"role":"assistant","content":null}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[{"content":7}],"max_completion_tokens":0}`,
		`{"model":"m","prompt":["a","b"],"max_tokens":9223372036854775807}`,
		`{"model":"m","prompt":[1,2,3]}`,
		`{"model":"m","prompt":[[1],[2,3]]}`,
		`{"model":"m"} {"model":"n"}`,
		`{"model":"\u00e9\ud800","messages":[{"role":"user","content":"\u6f6e"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"f g"}],"format":"json","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}]}`,
		`{"model":"m","prompt":"x","format":{"type":"array","items":{"enum":[1,2]},"minItems":2},"logprobs":true,"top_logprobs":2}`,
		`{"model":"m","messages":[{"role":"user","content":"f"}],"n":3,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g","parameters":{"$defs":{"x":{"type":"string"}},"type":"object","properties":{"p":{"$ref":"#/$defs/x"}}}}}],"tool_choice":{"type":"function","function":{"name":"g"}},"parallel_tool_calls":false}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object","properties":{"a":{"type":"number","minimum":2}}}}},"logprobs":true,"top_logprobs":20}`,
		`{"model":"m","prompt":"x","n":2,"logprobs":5}`,
	} {
		f.Add([]byte(seed))
	}
	parsers := map[string]func([]byte) (genRequest, *apiError){
		"ollama chat":       parseOllamaChat,
		"ollama generate":   parseOllamaGenerate,
		"openai chat":       parseOpenAIChat,
		"openai completion": parseOpenAICompletion,
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for name, parse := range parsers {
			req, aerr := parse(body)
			if aerr != nil {
				if aerr.status != http.StatusBadRequest || aerr.message == "" {
					t.Errorf("%s: error %+v", name, aerr)
				}
				continue
			}
			if req.model == "" {
				t.Errorf("%s: accepted a request without model", name)
			}
			if req.promptTokens < 1 {
				t.Errorf("%s: prompt tokens %d", name, req.promptTokens)
			}
			if req.limit < 0 || req.limit > MaxOutputTokens {
				t.Errorf("%s: limit %d", name, req.limit)
			}
			if req.seed < 0 || req.seed >= len(poemTokens) {
				t.Errorf("%s: seed %d", name, req.seed)
			}
			if req.includeUsage && !req.stream {
				t.Errorf("%s: include_usage without stream", name)
			}
			if req.topLogprobs < 0 || req.topLogprobs > 20 {
				t.Errorf("%s: top_logprobs %d", name, req.topLogprobs)
			}
			p := req.planned(8)
			if len(p.choices) < 1 || len(p.choices) > 128 {
				t.Errorf("%s: %d choices", name, len(p.choices))
			}
			for _, c := range p.choices {
				if c.n < 1 || (c.pieces != nil && c.n > len(c.pieces)) {
					t.Errorf("%s: choice of %d tokens, %d pieces", name, c.n, len(c.pieces))
				}
				end := 0
				for _, call := range c.calls {
					if call.start != end || call.end <= call.start || !json.Valid([]byte(strings.Join(c.pieces[call.start:call.end], ""))) {
						t.Errorf("%s: call %+v of %q", name, call, c.pieces)
					}
					end = call.end
				}
				if c.calls == nil && c.pieces != nil && !json.Valid([]byte(strings.Join(c.pieces, ""))) {
					t.Errorf("%s: structured answer %q is not JSON", name, c.pieces)
				}
			}
		}
	})
}
