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
		{"/v1/chat/completions", `{"model":"m","stream" :true}`, false}, // a space before the colon is not looked for
		{"/v1/chat/completions", `{"model":"m"}`, false},
		{"/v1/completions", `{"stream":false}`, false},
		{"/v1/chat/completions", "{\"stream\":\n true}", true},
		{"/v1/chat/completions", `{"stream":true,"stream":false}`, false}, // the last one, as encoding/json
		{"/generate_stream", `{"inputs":"x"}`, false},
		{"/completion", `{"prompt":"x","stream":true}`, true},
		{"/v1/chat/completions", `{"messages":[{"content":"\"stream\":true"}]}`, false}, // escaped inside a string: no key
	} {
		if got := asksToStream(tc.path, []byte(tc.body)); got != tc.want {
			t.Errorf("asksToStream(%q, %q) = %v, want %v", tc.path, tc.body, got, tc.want)
		}
	}
}

// FuzzStreamFlag: the scan never panics, and on a JSON object whose only
// "stream" key, written with its colon right after it, is a top-level
// boolean it agrees with encoding/json.
func FuzzStreamFlag(f *testing.F) {
	for _, s := range []string{`{"stream":true}`, `{"model":"m","stream": false}`, `{"stream":"yes"}`, `"stream":`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, found := streamFlag(b)
		var obj map[string]any
		// The scan looks for the key followed by its colon, as encoders
		// write it.
		if json.Unmarshal(b, &obj) != nil || bytes.Count(b, []byte(`"stream"`)) != 1 || bytes.Count(b, []byte(`"stream":`)) != 1 {
			return
		}
		jv, ok := obj["stream"].(bool)
		if ok && (!found || v != jv) {
			t.Errorf("streamFlag(%q) = %v, %v; encoding/json: %v", b, v, found, jv)
		}
	})
}
