package gateway

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestPromptTextPlain: which bodies the fast path takes, and that it
// returns for them what encoding/json's parse does.
func TestPromptTextPlain(t *testing.T) {
	tests := []struct {
		name, path, body string
		handled          bool
	}{
		{"chat", "/api/chat", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}`, true},
		{"openai chat, other members", "/v1/chat/completions", ` {"messages":[{"role":"system","content":"S","name":"x"},{"content":"U","role":"user"}],"temperature":-0.5e+3,"stop":["a",null,true],"model":"m","x":{"y":[{}]}} `, true},
		{"chat, no messages", "/api/chat", `{"model":"m"}`, true},
		{"chat, empty messages", "/api/chat", `{"messages":[]}`, true},
		{"chat, prompt and input of any kind", "/api/chat", `{"messages":[],"prompt":[1,2],"input":{"a":1}}`, true},
		{"generate", "/api/generate", `{"model":"m","system":"S","prompt":"P"}`, true},
		{"generate without system or prompt", "/api/generate", `{"model":"m"}`, true},
		{"generate, messages ignored", "/api/generate", `{"prompt":"P","messages":[1,"x"]}`, true},
		{"completion", "/v1/completions", `{"model":"m","prompt":"P"}`, true},
		{"unicode", "/api/chat", `{"messages":[{"role":"user","content":"héllo ☃"}]}`, true},

		{"escape in content", "/api/chat", `{"messages":[{"role":"user","content":"a\nb"}]}`, false},
		{"parts", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`, false},
		{"no content", "/api/chat", `{"messages":[{"role":"user"}]}`, false},
		{"content null", "/api/chat", `{"messages":[{"role":"user","content":null}]}`, false},
		{"a message not an object", "/api/chat", `{"messages":[7]}`, false},
		{"model in other case", "/api/chat", `{"Model":"m","messages":[]}`, false},
		{"role in other case", "/api/chat", `{"messages":[{"Role":"user","content":"x"}]}`, false},
		{"long s", "/api/chat", "{\"me\u017f\u017fages\":[]}", false},
		{"escaped key", "/api/chat", `{"mod\u0065l":"m"}`, false},
		{"repeated model", "/api/chat", `{"model":"a","model":"b"}`, false},
		{"repeated role", "/api/chat", `{"messages":[{"role":"a","role":"b","content":"x"}]}`, false},
		{"model a number", "/api/chat", `{"model":1}`, false},
		{"model null", "/api/chat", `{"model":null}`, false},
		{"system a number", "/api/chat", `{"system":1}`, false},
		{"messages not an array", "/api/generate", `{"messages":1}`, false},
		{"invalid UTF-8 in content", "/api/chat", "{\"messages\":[{\"role\":\"u\",\"content\":\"\xff\"}]}", false},
		{"completion without prompt", "/v1/completions", `{"model":"m"}`, false},
		{"completion, token ids", "/v1/completions", `{"prompt":[1,2]}`, false},
		{"responses", "/v1/responses", `{"input":"x"}`, false},
		{"not an object", "/api/chat", `[]`, false},
		{"null", "/api/chat", `null`, false},
		{"trailing comma", "/api/chat", `{"model":"m",}`, false},
		{"trailing data", "/api/chat", `{"model":"m"}x`, false},
		{"leading zero", "/api/chat", `{"n":01}`, false},
		{"bad literal", "/api/chat", `{"n":tru}`, false},
		{"bad escape", "/api/chat", `{"n":"\x"}`, false},
		{"short unicode escape", "/api/chat", `{"n":"\u12"}`, false},
		{"control character", "/api/chat", "{\"n\":\"a\tb\"}", false},
		{"unterminated", "/api/chat", `{"messages":[{"role":"u","content":"x"}`, false},
		{"empty", "/api/chat", ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model, text, _, handled := promptTextPlain(tt.path, []byte(tt.body), nil)
			if handled != tt.handled {
				t.Fatalf("handled %v, want %v", handled, tt.handled)
			}
			if !handled {
				return
			}
			wm, wt, wok := promptTextJSON(tt.path, []byte(tt.body), nil)
			if !wok || string(model) != wm || !bytes.Equal(text, wt) {
				t.Fatalf("got %q %q, encoding/json %q %q %v", model, text, wm, wt, wok)
			}
		})
	}
}

func TestPromptField(t *testing.T) {
	tests := []struct {
		key  string
		want int
	}{
		{"model", fieldModel},
		{"messages", fieldMessages},
		{"system", fieldSystem},
		{"prompt", fieldPrompt},
		{"instructions", fieldInstructions},
		{"input", fieldInput},
		{"stream", fieldOther},
		{"models", fieldOther},
		{"", fieldOther},
		{"MODEL", fieldUnsure},
		{"\u017fystem", fieldUnsure},
		{`mod\u0065l`, fieldUnsure},
		{`st\"ream`, fieldUnsure},
		{"\xff", fieldUnsure},
	}
	for _, tt := range tests {
		if got := promptField([]byte(tt.key)); got != tt.want {
			t.Errorf("promptField(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
}

// FuzzPromptTextPlain: whatever the fast path takes, it reads as
// encoding/json does, and it takes only valid JSON.
func FuzzPromptTextPlain(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}`,
		`{"model":"m","messages":[{"role":"user","content":"a","name":"n"},{"role":"assistant","content":"b"}],"options":{"t":[1.5e3,-0,true,null]}}`,
		`{"model":"m","system":"S","prompt":"P"}`,
		`{"model":"m","prompt":"P","messages":[]}`,
		`{"Model":"m"}`, `{"model":"a","model":"b"}`, `{"messages":[{"role":"u","content":"\u00e9"}]}`,
		`{"model":"m","prompt":"P","stream":true,"stream":false}`, `{"prompt":"P","stream":"yes"}`, `{"prompt":"P","Stream":true}`,
	} {
		for _, p := range []string{"/api/chat", "/api/generate", "/v1/chat/completions", "/v1/completions"} {
			f.Add(p, []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		// Into a buffer reused from an earlier request (dirty, and large
		// enough to be used), as the gateway calls it: nothing of its old
		// bytes may show.
		dirty := bytes.Repeat([]byte{0xff}, len(body)+8)
		model, text, stream, handled := promptTextPlain(path, body, dirty)
		if !handled {
			return
		}
		// The stream flag it read is the one asksToStream reads.
		if v, found := streamFlag(body); streamFieldOf(stream) != (streamField{v: v, found: found, known: true}) {
			t.Fatalf("%s %q: stream value %q, streamFlag %v %v", path, body, stream, v, found)
		}
		if !json.Valid(body) {
			t.Fatalf("took invalid JSON %q", body)
		}
		wm, wt, wok := promptTextJSON(path, body, nil)
		if !wok || string(model) != wm || !bytes.Equal(text, wt) {
			t.Fatalf("%s %q: got %q %q, encoding/json %q %q %v", path, body, model, text, wm, wt, wok)
		}
		if len(text) > 0 && &text[0] != &dirty[0] {
			t.Fatalf("%s %q: the text was not written into the buffer given", path, body)
		}
	})
}

// BenchmarkPromptRead is the prompt's scan of the short chat POST that
// bench/gateway/run.sh sends (118 bytes), per request.
func BenchmarkPromptRead(b *testing.B) {
	body := []byte(`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"Write one short sentence about the sea."}],"stream":false}`)
	dst := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		_, text, _, ok := promptRead("/api/chat", body, dst)
		if !ok || len(text) == 0 {
			b.Fatal("no prompt")
		}
	}
}

// TestPromptReadAllocations holds BenchmarkPromptRead's 0
// allocations: a short chat POST's model, text and stream flag are read
// into the given buffer and the body's own bytes.
func TestPromptReadAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	body := []byte(`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"Write one short sentence about the sea."}],"stream":false}`)
	dst := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { _, _, _, _ = promptRead("/api/chat", body, dst) }); n != 0 {
		t.Fatalf("%.1f allocations per read, want 0", n)
	}
}
