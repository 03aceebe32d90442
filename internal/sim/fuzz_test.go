package sim

import (
	"net/http"
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
		}
	})
}
