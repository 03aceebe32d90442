package gateway

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestAsksToStream(t *testing.T) {
	for _, tc := range []struct {
		path, body string
		want       bool
	}{
		{"/api/chat", `{"model":"m","messages":[]}`, true}, // Ollama streams by default
		{"/api/generate", `{"model":"m","prompt":"hi","stream": false}`, false},
		{"/api/generate", `{"model":"m","stream":true}`, true},
		{"/api/chat", ``, true},
		{"/api/tags", ``, false},
		{"/api/embed", `{"model":"m","input":"x"}`, false},
		{"/v1/chat/completions", `{"model":"m","stream":true}`, true},
		{"/v1/chat/completions", `{"model":"m","stream" :true}`, true},
		{"/v1/chat/completions", `{"options":{"stream":true}}`, false}, // not top-level
		{"/v1/chat/completions", `{"stream":"true"}`, false},           // not a boolean
		{"/v1/chat/completions", `{"model":"m"}`, false},
		{"/v1/completions", `{"stream":false}`, false},
		{"/v1/chat/completions", "{\"stream\":\n true}", true},
		{"/v1/chat/completions", `{"stream":true,"stream":false}`, false}, // the last one, as encoding/json
		{"/generate_stream", `{"inputs":"x"}`, false},
		{"/completion", `{"prompt":"x","stream":true}`, true},
		{"/v1/chat/completions", `{"messages":[{"content":"\"stream\":true"}]}`, false}, // escaped inside a string: no key
		{"/api/chat", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}`, false},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`, true},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"\u00e9"}],"stream":true}`, true}, // an escape: encoding/json reads the prompt
		{"/api/generate", `{"model":"m","prompt":"hi","stream":true,"stream":false}`, false},
		{"/v1/responses", `{"model":"m","input":"hi","stream":true}`, true},
	} {
		if got := asksToStream(tc.path, []byte(tc.body)); got != tc.want {
			t.Errorf("asksToStream(%q, %q) = %v, want %v", tc.path, tc.body, got, tc.want)
		}
		// The flag read with the prompt (readPrompt) says the same.
		_, _, flag, _ := promptRead(tc.path, []byte(tc.body), nil)
		if got := asksWith(tc.path, flag); !flag.known || got != tc.want {
			t.Errorf("asksWith(%q, promptRead(%q)) = %v (known %v), want %v", tc.path, tc.body, got, flag.known, tc.want)
		}
	}
}

// FuzzStreamFlag: the scan never panics, and on a JSON object it agrees
// with encoding/json on a boolean top-level "stream".
func FuzzStreamFlag(f *testing.F) {
	for _, s := range []string{`{"stream":true}`, `{"model":"m","stream": false}`, `{"stream":"yes"}`, `{"a":{"stream":true}}`, `"stream":`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, found := streamFlag(b)
		var obj map[string]any
		if json.Unmarshal(b, &obj) != nil || bytes.IndexByte(b, '\\') >= 0 {
			return // escapes in keys are encoding/json's own folding
		}
		jv, isBool := obj["stream"].(bool)
		if found != isBool || (isBool && v != jv) {
			t.Errorf("streamFlag(%q) = %v, %v; encoding/json: %v, %v", b, v, found, jv, isBool)
		}
	})
}
