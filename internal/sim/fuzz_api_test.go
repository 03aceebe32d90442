package sim

import (
	"encoding/json"
	"net/http"
	"testing"
)

// FuzzAPIInputs feeds arbitrary outside input to the parsers of
// /v1/responses and of the embedding inputs: they must not panic, must
// reject with 400 and a message, and must accept only what the handlers
// rely on.
func FuzzAPIInputs(f *testing.F) {
	for _, seed := range []string{
		``, `{`, `null`, `[]`, `""`, `"x"`, `[""]`, `["a","b"]`, `[1,2]`, `[[1],[]]`, `[[1,2],[3]]`, `[1,"a"]`, `{"a":1}`,
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":[{"role":"user","content":"hi"}],"instructions":"be","max_output_tokens":3,"stream":true}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]}]}`,
		`{"model":"m","input":[{"type":"function_call_output","output":"x"}],"max_output_tokens":0}`,
		`{"model":"m","input":5}`,
		`{"model":"m","input":"call f","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"x":{"type":"boolean"}}}}],"tool_choice":"required","parallel_tool_calls":false}`,
		`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object","properties":{"a":{"enum":[1]}}}}}}`,
		`{"model":"m","input":"x","text":{"format":{"type":"json_object"}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkErr := func(name string, aerr *apiError) {
			if aerr.status != http.StatusBadRequest || aerr.message == "" {
				t.Errorf("%s: error %+v", name, aerr)
			}
		}
		if req, aerr := parseOpenAIResponses(body); aerr != nil {
			checkErr("responses", aerr)
		} else if req.model == "" || req.promptTokens < 1 || req.limit < 0 || req.limit > MaxOutputTokens ||
			req.seed < 0 || req.seed >= len(poemTokens) || req.api != apiOpenAIResponses {
			t.Errorf("responses: accepted %+v", req)
		}
		if !json.Valid(body) {
			return
		}
		if ins, aerr := openAIEmbedInputs(body); aerr != nil {
			checkErr("openai embed input", aerr)
		} else if len(ins) < 1 || len(ins) > maxEmbedInputs {
			t.Errorf("openai embed input: %d inputs", len(ins))
		} else {
			for _, in := range ins {
				if in.key == "" || in.tokens < 1 {
					t.Errorf("openai embed input: %+v", in)
				}
			}
		}
		if ins, aerr := ollamaEmbedInputs(body); aerr != nil {
			checkErr("ollama embed input", aerr)
		} else if len(ins) > 0 && ins[0] == "" && len(ins) == 1 && body[0] == '"' {
			t.Errorf("ollama embed input: empty string embedded")
		}
	})
}
