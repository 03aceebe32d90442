package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tidegpu/tidegpu/internal/sim"
)

// The usage chunk, as the OpenAI API reference describes it ("Create chat
// completion" → stream_options.include_usage): "an additional chunk will be
// streamed before the data: [DONE] message. The usage field on this chunk
// shows the token usage statistics for the entire request, and the choices
// field will always be an empty array. All other chunks will also include a
// usage field, but with a null value."

func TestWithStreamUsage(t *testing.T) {
	cases := []struct {
		name, in string
		changed  bool
		want     string // when changed
	}{
		{"streamed, no options", `{"model":"m","stream":true,"messages":[{"role":"user","content":"<b>&</b>"}]}`, true,
			`{"model":"m","stream":true,"messages":[{"role":"user","content":"<b>&</b>"}],"stream_options":{"include_usage":true}}`},
		{"streamed, spaces kept", "{ \"stream\" : true }\n", true,
			"{ \"stream\" : true ,\"stream_options\":{\"include_usage\":true}}\n"},
		{"streamed, options re-encoded", `{"model":"m","stream":true,"stream_options":{}}`, true,
			`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{"streamed, other options kept", `{"stream":true,"stream_options":{"include_obfuscation":false}}`, true,
			`{"stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true}}`},
		{"streamed, include_usage false", `{"stream":true,"stream_options":{"include_usage":false}}`, true,
			`{"stream":true,"stream_options":{"include_usage":true}}`},
		{"streamed, options null", `{"stream":true,"stream_options":null}`, true,
			`{"stream":true,"stream_options":{"include_usage":true}}`},
		{"big numbers kept as written", `{"stream":true,"seed":12345678901234567890,"stream_options":null,"temperature":1.0e0}`, true,
			`{"seed":12345678901234567890,"stream":true,"stream_options":{"include_usage":true},"temperature":1.0e0}`},
		{"client asked", `{"stream":true,"stream_options":{"include_usage":true}}`, false, ""},
		{"not streamed", `{"model":"m","stream":false}`, false, ""},
		{"stream absent", `{"model":"m"}`, false, ""},
		{"stream not a bool", `{"stream":"true"}`, false, ""},
		{"options not an object", `{"stream":true,"stream_options":[1]}`, false, ""},
		{"not JSON", `stream=true`, false, ""},
		{"malformed", `{"stream":true,`, false, ""},
		{"array", `[{"stream":true}]`, false, ""},
		{"trailing garbage", `{"stream":true} x`, false, ""},
		{"empty", ``, false, ""},
	}
	for _, tc := range cases {
		got, changed := withStreamUsage([]byte(tc.in), DefaultMaxBodyBytes)
		switch {
		case changed != tc.changed:
			t.Errorf("%s: changed = %t, want %t (%s)", tc.name, changed, tc.changed, got)
		case !changed && string(got) != tc.in:
			t.Errorf("%s: unchanged body altered: %s", tc.name, got)
		case changed && string(got) != tc.want:
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
	in := `{"stream":true}`
	if got, changed := withStreamUsage([]byte(in), int64(len(in))+10); changed || string(got) != in {
		t.Errorf("rewrite past the body limit: %s %t", got, changed)
	}
}

func FuzzWithStreamUsage(f *testing.F) {
	f.Add([]byte(`{"model":"m","stream":true,"messages":[]}`))
	f.Add([]byte(`{"stream":true,"stream_options":{"include_usage":false,"x":1}}`))
	f.Add([]byte(`{"stream":true,"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"stream":false}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		out, changed := withStreamUsage(in, 1<<20)
		if !bytes.Equal(in, orig) {
			t.Fatal("input modified")
		}
		if !changed {
			if !bytes.Equal(out, in) {
				t.Fatalf("unchanged but different: %q -> %q", in, out)
			}
			return
		}
		if len(out) > 1<<20 {
			t.Fatalf("rewrite of %d bytes past the limit", len(out))
		}
		var before, after map[string]json.RawMessage
		if json.Unmarshal(in, &before) != nil || json.Unmarshal(out, &after) != nil {
			t.Fatalf("rewrote a body that is not an object, or wrote one: %q -> %q", in, out)
		}
		var so map[string]json.RawMessage
		if json.Unmarshal(after["stream_options"], &so) != nil || string(so["include_usage"]) != "true" {
			t.Fatalf("no include_usage: %q", out)
		}
		if len(after) != len(before) && len(after) != len(before)+1 {
			t.Fatalf("fields lost: %q -> %q", in, out)
		}
		if _, had := before["stream_options"]; !had {
			end := bytes.LastIndexByte(in, '}')
			if !bytes.HasPrefix(out, in[:end]) || !bytes.HasSuffix(out, in[end:]) {
				t.Fatalf("the client's bytes changed: %q -> %q", in, out)
			}
		}
		for k, v := range before {
			if k == "stream_options" {
				continue
			}
			if !jsonEqual(v, after[k]) {
				t.Fatalf("field %q changed: %s -> %s", k, v, after[k])
			}
		}
	})
}

func jsonEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

const (
	tokenEvent = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi \\\"usage\\\":{\"}}],\"usage\":null}\n\n"
	usageEvent = "data: {\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":7,\"total_tokens\":10}}\n\n"
	doneEvent  = "data: [DONE]\n\n"
)

// The stream without its usage chunk, however the reads split it.
func TestUsageStripEverySplit(t *testing.T) {
	in := tokenEvent + tokenEvent + usageEvent + doneEvent
	want := tokenEvent + tokenEvent + doneEvent
	for i := 0; i <= len(in); i++ {
		for _, j := range []int{i, min(i+1, len(in)), min(i+40, len(in)), len(in)} {
			var s usageStrip
			var out bytes.Buffer
			for _, p := range []string{in[:i], in[i:j], in[j:]} {
				if err := s.write(&out, []byte(p)); err != nil {
					t.Fatal(err)
				}
			}
			_ = s.flush(&out)
			if out.String() != want || !s.found || s.model != "m" || s.prompt != 3 || s.compl != 7 {
				t.Fatalf("split at %d,%d: %q found=%t %q %d %d", i, j, out.String(), s.found, s.model, s.prompt, s.compl)
			}
		}
	}
}

func TestUsageStripPassesOthers(t *testing.T) {
	cases := []string{
		tokenEvent + doneEvent,                                         // no usage chunk
		strings.ReplaceAll(usageEvent, "\n", "\r\n"),                   // CRLF: kept, but found
		"data: {\"choices\":[{}],\"usage\":{\"prompt_tokens\":1}}\n\n", // has choices
		"event: x\ndata: {\"usage\":{\"prompt_tokens\":1}}\n\n",        // not one data line
		"data: {\"usage\":{\"prompt_tokens\":1}\n\n",                   // malformed
		"data: unfinished",                                             // no blank line
		strings.Repeat("x", maxPendingEvent+10),                        // too long to hold
	}
	for i, in := range cases {
		var s usageStrip
		var out bytes.Buffer
		_ = s.write(&out, []byte(in))
		_ = s.flush(&out)
		if i == 1 {
			if out.Len() != 0 || !s.found {
				t.Errorf("CRLF usage chunk: %q found=%t", out.String(), s.found)
			}
			continue
		}
		if out.String() != in || s.found {
			t.Errorf("case %d: %q -> %q found=%t", i, in, out.String(), s.found)
		}
	}
}

func FuzzUsageStrip(f *testing.F) {
	f.Add([]byte(tokenEvent+usageEvent+doneEvent), uint16(10))
	f.Add([]byte("data: x\r\n\r\ndata: y\n\n"), uint16(3))
	f.Fuzz(func(t *testing.T, in []byte, split uint16) {
		cut := int(split) % (len(in) + 1)
		var whole, parts bytes.Buffer
		var a, b usageStrip
		_ = a.write(&whole, in)
		_ = a.flush(&whole)
		_ = b.write(&parts, in[:cut])
		_ = b.write(&parts, in[cut:])
		_ = b.flush(&parts)
		if a.found != b.found || (!bytes.Equal(whole.Bytes(), parts.Bytes()) && !a.found) {
			t.Fatalf("split at %d changes the stream: %q vs %q", cut, whole.Bytes(), parts.Bytes())
		}
		if !a.found && !bytes.Equal(whole.Bytes(), in) {
			t.Fatalf("nothing found, yet changed: %q -> %q", in, whole.Bytes())
		}
		if whole.Len() > len(in) {
			t.Fatalf("stream grew")
		}
	})
}

// usageHarness is the gateway with OnUsage recording, onto a simulator.
type usageHarness struct {
	*harness
	sim *sim.Server
	url string // the simulator, straight

	mu   sync.Mutex
	seen []usageSeen
}

type usageSeen struct {
	backend, model     string
	prompt, completion int64
}

func newUsageHarness(t *testing.T) *usageHarness {
	uh := &usageHarness{}
	srv := simBackend(t, sim.Config{TTFT: -1, TokenTime: -1, InstanceID: "s"})
	uh.url = srv.URL
	uh.harness = newHarness(t, Options{OnUsage: func(id, model string, p, c int64) {
		uh.mu.Lock()
		uh.seen = append(uh.seen, usageSeen{id, model, p, c})
		uh.mu.Unlock()
	}})
	uh.g.SetBackends("p", []Backend{{ID: "s", Pool: "p", Address: strings.TrimPrefix(srv.URL, "http://")}})
	return uh
}

func (uh *usageHarness) usage() []usageSeen {
	uh.mu.Lock()
	defer uh.mu.Unlock()
	return append([]usageSeen(nil), uh.seen...)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// streamChat streams a chat with openai-go from base and returns its chunks.
func streamChat(t *testing.T, base string, includeUsage bool) []openai.ChatCompletionChunk {
	t.Helper()
	c := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model:     "qwen2:0.5b",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Count the tokens, please")},
		MaxTokens: openai.Int(6),
	}
	if includeUsage {
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	st := c.Chat.Completions.NewStreaming(testContext(t), params)
	var chunks []openai.ChatCompletionChunk
	for st.Next() {
		chunks = append(chunks, st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return chunks
}

// What the client sees of a chunk, less what differs between two answers
// (id, created).
func chunkView(c openai.ChatCompletionChunk) string {
	var b strings.Builder
	for _, ch := range c.Choices {
		b.WriteString(ch.Delta.Role + "|" + ch.Delta.Content + "|" + ch.FinishReason + ";")
	}
	return string(c.Object) + " " + c.Model + " " + b.String()
}

func TestStreamUsageWithoutIncludeUsage(t *testing.T) {
	uh := newUsageHarness(t)
	// The reference: the simulator's own usage chunk for the same request.
	ref := streamChat(t, uh.url, true)
	last := ref[len(ref)-1]
	if len(last.Choices) != 0 || last.Usage.CompletionTokens != 6 {
		t.Fatalf("simulator's usage chunk: %+v", last)
	}
	plain := streamChat(t, uh.url, false)

	got := streamChat(t, uh.srv.URL, false)
	if len(got) != len(plain) {
		t.Fatalf("client got %d chunks, want %d (the stream without include_usage)", len(got), len(plain))
	}
	for i := range got {
		if len(got[i].Choices) == 0 || got[i].Usage.TotalTokens != 0 {
			t.Errorf("chunk %d is a usage chunk: %s", i, got[i].RawJSON())
		}
		if g, w := chunkView(got[i]), chunkView(plain[i]); g != w {
			t.Errorf("chunk %d = %s, want %s", i, g, w)
		}
	}
	want := usageSeen{"s", "qwen2:0.5b", last.Usage.PromptTokens, last.Usage.CompletionTokens}
	if u := uh.usage(); len(u) != 1 || u[0] != want {
		t.Fatalf("OnUsage got %+v, want [%+v]", u, want)
	}

	// The bytes: no usage chunk, and the stream still ends with [DONE].
	body := `{"model":"qwen2:0.5b","stream":true,"max_tokens":3,"prompt":"x"}`
	resp, raw := uh.do(t, http.MethodPost, "/v1/completions", body)
	if resp.StatusCode != http.StatusOK || strings.Contains(raw, `"choices":[]`) || !strings.HasSuffix(raw, "data: [DONE]\n\n") {
		t.Fatalf("completions stream: %d %q", resp.StatusCode, raw)
	}
	if u := uh.usage(); len(u) != 2 || u[1].completion != 3 {
		t.Fatalf("OnUsage after /v1/completions: %+v", u)
	}
}

func TestStreamUsageWithIncludeUsage(t *testing.T) {
	uh := newUsageHarness(t)
	got := streamChat(t, uh.srv.URL, true)
	last := got[len(got)-1]
	if len(last.Choices) != 0 || last.Usage.CompletionTokens != 6 || last.Usage.PromptTokens == 0 {
		t.Fatalf("client's usage chunk: %s", last.RawJSON())
	}
	if u := uh.usage(); len(u) != 0 {
		t.Fatalf("OnUsage called for a stream whose client has the usage: %+v", u)
	}
}

func TestStreamUsageLeavesOthersAlone(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	echo := newBackend(t, "e", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	})
	var called atomic.Bool
	h := newHarness(t, Options{OnUsage: func(string, string, int64, int64) { called.Store(true) }})
	h.g.SetBackends("p", []Backend{echo.backend("p")})
	cases := []struct{ method, path, body string }{
		{http.MethodPost, "/v1/chat/completions", `{"model":"m","stream":false,"messages":[]}`},
		{http.MethodPost, "/v1/chat/completions", `{"model":"m", "messages":[]}`},
		{http.MethodPost, "/v1/chat/completions", `stream: true`},
		{http.MethodPost, "/v1/chat/completions", `{"model":"m","stream":true,`},
		{http.MethodPost, "/v1/completions", `{"stream":true,"stream_options":{"include_usage":true}}`},
		{http.MethodPost, "/v1/responses", `{"model":"m","stream":true}`},
		{http.MethodPost, "/api/chat", `{"model":"m","stream":true}`},
	}
	for i, tc := range cases {
		if resp, _ := h.do(t, tc.method, tc.path, tc.body); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d", tc.method, tc.path, resp.StatusCode)
		}
		mu.Lock()
		got := seen[i]
		mu.Unlock()
		if got != tc.body {
			t.Errorf("%s %s: backend got %q, want %q", tc.method, tc.path, got, tc.body)
		}
	}
	if called.Load() {
		t.Error("OnUsage called")
	}
}

func TestStreamUsageNeedsOnUsage(t *testing.T) {
	srv := simBackend(t, sim.Config{TTFT: -1, TokenTime: -1, InstanceID: "s"})
	h := newHarness(t, Options{})
	h.g.SetBackends("p", []Backend{{ID: "s", Pool: "p", Address: strings.TrimPrefix(srv.URL, "http://")}})
	for _, c := range streamChat(t, h.srv.URL, false) {
		if len(c.Choices) == 0 || strings.Contains(c.RawJSON(), `"usage"`) {
			t.Fatalf("without OnUsage the request changed: %s", c.RawJSON())
		}
	}
}

// BenchmarkUsageStripToken measures passing on one token chunk of a stream
// whose usage the gateway asked for: no allocation.
func BenchmarkUsageStripToken(b *testing.B) {
	var s usageStrip
	ev := []byte(tokenEvent)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.write(io.Discard, ev); err != nil {
			b.Fatal(err)
		}
	}
}

func TestHasUsageObject(t *testing.T) {
	for _, tc := range []struct {
		ev   string
		want bool
	}{
		{usageEvent, true},
		{tokenEvent, false},
		{doneEvent, false},
		{`data: {"usage": {"prompt_tokens":1}}`, true},
		{`data: {"usage":   {}}`, true},
		{`data: {"usage":null,"x":{"usage":{}}}`, true}, // the second one counts
		{`data: {"usage":null}`, false},
		{`data: {"usage":`, false},
		{`data: {"usage" :{}}`, false}, // as before: no space before the colon
		{`"usage":{`, true},
		{``, false},
	} {
		if got := hasUsageObject([]byte(tc.ev)); got != tc.want {
			t.Errorf("hasUsageObject(%q) = %v, want %v", tc.ev, got, tc.want)
		}
	}
}
