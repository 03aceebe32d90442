package gateway

// Token counts of streams. An OpenAI-style stream carries its token usage
// only when the request asks for it with stream_options.include_usage
// (OpenAI API reference, "Create chat completion" → stream_options: "an
// additional chunk will be streamed before the data: [DONE] message. The
// usage field on this chunk shows the token usage statistics for the entire
// request, and the choices field will always be an empty array"), and most
// clients do not ask. With Options.OnUsage set, the gateway asks on their
// behalf, reports the usage chunk to OnUsage and removes it from the
// client's stream, so the client gets the stream it asked for.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
)

// UsageFunc receives the token counts of a streamed answer whose usage chunk
// the gateway removed: the backend that served it, the model the chunk
// names, and the prompt and completion tokens.
type UsageFunc func(backendID, model string, prompt, completion int64)

// usagePaths are the backend paths whose streams take
// stream_options.include_usage.
func usagePath(path string) bool {
	return path == "/v1/chat/completions" || path == "/v1/completions"
}

// withStreamUsage returns body with stream_options.include_usage set to true
// if body is a JSON object with "stream": true that does not already ask for
// usage, and reports whether it changed body. Every other field is kept:
// byte for byte when the body has no stream_options (the field is added at
// the end), otherwise as values byte for byte, the object re-encoded. A
// body that is not such an object, or whose rewrite would be larger than
// limit, is returned unchanged.
func withStreamUsage(body []byte, limit int64) ([]byte, bool) {
	// Cheap rejections first: most bodies are not streamed.
	if !bytes.Contains(body, []byte(`"stream"`)) {
		return body, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil || obj == nil {
		return body, false
	}
	var stream bool
	if raw, ok := obj["stream"]; !ok || json.Unmarshal(raw, &stream) != nil || !stream {
		return body, false
	}
	raw, ok := obj["stream_options"]
	if !ok {
		// The common case: add the field before the closing brace, so the
		// client's bytes stay as they are. The object has a member
		// ("stream"), so a comma goes first.
		const field = `,"stream_options":{"include_usage":true}`
		end := len(bytes.TrimRight(body, " \t\r\n")) - 1 // the closing brace
		if int64(len(body)+len(field)) > limit {
			return body, false
		}
		out := make([]byte, 0, len(body)+len(field))
		out = append(append(append(out, body[:end]...), field...), body[end:]...)
		return out, true
	}
	opts := map[string]json.RawMessage{}
	if !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		if json.Unmarshal(raw, &opts) != nil || opts == nil {
			return body, false // not an object: the backend's to reject
		}
		var include bool
		if iu, ok := opts["include_usage"]; ok && json.Unmarshal(iu, &include) == nil && include {
			return body, false // the client asked: its stream is its own
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	rawOpts, err := marshalRaw(opts)
	if err != nil {
		return body, false
	}
	obj["stream_options"] = rawOpts
	out, err := marshalRaw(obj)
	if err != nil || int64(len(out)) > limit {
		return body, false
	}
	return out, true
}

// marshalRaw encodes v without HTML escaping, so that strings keep their
// bytes, and without the encoder's trailing newline.
func marshalRaw(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// maxPendingEvent bounds the bytes of an unfinished SSE event held back
// while looking for the usage chunk; a longer event (never a usage chunk) is
// passed on as it is.
const maxPendingEvent = 64 << 10

// usageStrip removes the usage chunk from a Server-Sent Events stream. Whole
// events are passed on as soon as their blank line arrives; only the bytes
// of an event not yet ended are held, which delays nothing a client can
// use, since an SSE client dispatches an event only at its blank line.
type usageStrip struct {
	pending []byte // the start of an event not yet ended
	found   bool   // the usage chunk was seen
	model   string
	prompt  int64
	compl   int64

	// report, if non-nil, gets the usage of backend as soon as the chunk
	// is seen, before anything after it reaches the client; reqModel (the
	// request's) names the model if the chunk does not.
	report   UsageFunc
	backend  string
	reqModel string
}

// write passes p on to w, without the usage chunk.
func (s *usageStrip) write(w io.Writer, p []byte) error {
	data := p
	if len(s.pending) > 0 {
		s.pending = append(s.pending, p...)
		data = s.pending
	}
	run, i := 0, 0 // data[run:i] is to be written; data[i:] not yet scanned
	for {
		n := eventEnd(data[i:])
		if n < 0 {
			break
		}
		if !s.found && s.usage(data[i:i+n]) {
			if err := writeSome(w, data[run:i]); err != nil {
				return err
			}
			run = i + n
		}
		i += n
	}
	if err := writeSome(w, data[run:i]); err != nil {
		return err
	}
	rest := data[i:]
	if len(rest) > maxPendingEvent || s.found {
		// Nothing more to look for, or an event too long to be the
		// usage chunk: pass it on now.
		err := writeSome(w, rest)
		s.pending = s.pending[:0]
		return err
	}
	s.pending = append(s.pending[:0], rest...) // copy handles the overlap
	return nil
}

// flush passes on what is held, at the end of the stream.
func (s *usageStrip) flush(w io.Writer) error {
	err := writeSome(w, s.pending)
	s.pending = s.pending[:0]
	return err
}

func writeSome(w io.Writer, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, err := w.Write(b)
	return err
}

// eventEnd returns the length of the first SSE event in b, up to and
// including the blank line that ends it, or -1 if b holds no whole event.
func eventEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		k := i + j + 1
		switch {
		case k < len(b) && b[k] == '\n':
			return k + 1
		case k+1 < len(b) && b[k] == '\r' && b[k+1] == '\n':
			return k + 2
		}
		i = k
	}
}

// usageChunk is the part of a usage chunk that is read.
type usageChunk struct {
	Model   string            `json:"model"`
	Choices []json.RawMessage `json:"choices"`
	Usage   *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

// usage reports whether ev is the usage chunk (one data line, a JSON object
// with a non-null usage and no choices) and if so keeps its counts. Token
// chunks, whose usage is null, are told apart without decoding them.
func (s *usageStrip) usage(ev []byte) bool {
	if !hasUsageObject(ev) {
		return false
	}
	line := bytes.TrimRight(ev, "\r\n")
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || bytes.ContainsAny(data, "\r\n") {
		return false
	}
	var c usageChunk
	if json.Unmarshal(data, &c) != nil || c.Usage == nil || len(c.Choices) > 0 ||
		c.Usage.PromptTokens < 0 || c.Usage.CompletionTokens < 0 {
		return false
	}
	s.found, s.model, s.prompt, s.compl = true, c.Model, c.Usage.PromptTokens, c.Usage.CompletionTokens
	if s.model == "" {
		s.model = s.reqModel
	}
	if s.report != nil {
		s.report(s.backend, s.model, s.prompt, s.compl)
	}
	return true
}

// hasUsageObject reports whether ev has a "usage" key whose value is an
// object (spaces allowed before it): the usage chunk has one, token chunks
// have "usage":null or none. One scan of ev per token chunk.
func hasUsageObject(ev []byte) bool {
	key := []byte(`"usage":`)
	for {
		i := bytes.Index(ev, key)
		if i < 0 {
			return false
		}
		ev = ev[i+len(key):]
		if v := bytes.TrimLeft(ev, " "); len(v) > 0 && v[0] == '{' {
			return true
		}
	}
}

type usageHookKey struct{}

// WithUsageHook returns a copy of ctx that carries fn: the usage chunk the
// gateway removes from the stream of a request with this context goes to fn
// as well as to Options.OnUsage. It lets a handler in front of the gateway
// (the tenant middleware) learn the tokens of the requests it passed on.
// Streams are asked for their usage only when Options.OnUsage is set.
func WithUsageHook(ctx context.Context, fn UsageFunc) context.Context {
	return context.WithValue(ctx, usageHookKey{}, fn)
}

// UsageHook returns the hook ctx carries (WithUsageHook), or nil: a
// handler that sets its own hook calls the one it found too, so that the
// handlers in front of the gateway (the tenant middleware, the usage
// recorder) all learn a stream's usage.
func UsageHook(ctx context.Context) UsageFunc {
	hook, _ := ctx.Value(usageHookKey{}).(UsageFunc)
	return hook
}

// withUsageHook returns report, followed by the hook ctx carries, if any.
func withUsageHook(ctx context.Context, report UsageFunc) UsageFunc {
	hook, _ := ctx.Value(usageHookKey{}).(UsageFunc)
	if hook == nil || report == nil {
		return report
	}
	return func(backendID, model string, prompt, completion int64) {
		report(backendID, model, prompt, completion)
		hook(backendID, model, prompt, completion)
	}
}
