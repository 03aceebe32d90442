package gateway

import (
	"bytes"
	"encoding/binary"
	"encoding/json"

	"github.com/cespare/xxhash/v2"
)

// Prefix blocks: what the prefix-aware policy hashes of a prompt.
const (
	// DefaultPrefixBlockBytes is the size of one prefix block in bytes of
	// prompt text: 64 bytes is about 16 tokens, vLLM's default KV-cache
	// block, and the Gateway API Inference Extension's prefix plugin's
	// default block of characters.
	DefaultPrefixBlockBytes = 64
	// maxPrefixBlocks bounds the blocks hashed per request (32 KiB of
	// prompt at the default block size): what lies beyond tells little
	// more about where the prompt's prefix is, and bounds the work per
	// request.
	maxPrefixBlocks = 512
)

// promptText returns the text of the prompt of a generation request body
// on one of the generation APIs, as the bytes a backend's prefix cache
// would see in the same order — roles and contents of chat messages,
// system and prompt of a completion — and whether path is such an API and
// body parses. The model name is returned apart (it is part of the cache
// key: a vLLM LoRA adapter is addressed by its own model name). A chat's
// next turn repeats the previous one's messages, so its text begins with
// the previous turn's. Pure; never panics on any input. The text is
// appended to dst[:0] (which may be nil) when it fits, so that a caller
// can reuse one buffer from request to request.
//
//	/api/chat, /v1/chat/completions  messages[].role, .content (a string or text parts)
//	/api/generate                    system, prompt
//	/v1/completions                  prompt (a string, strings, or token ids as JSON)
//	/v1/responses                    instructions, input (a string or items with role and content)
func promptText(path string, body, dst []byte) (model string, text []byte, ok bool) {
	m, text, _, ok := promptRead(path, body, dst)
	return string(m), text, ok
}

// promptRead is promptText and the request's "stream" flag as streamFlag
// reads it (found false: not a boolean, or absent), in one pass of the
// body for the bodies promptTextPlain takes; other bodies are read again
// for the flag. The model is in body's bytes for those, so that reading
// it allocates nothing. Pure.
func promptRead(path string, body, dst []byte) (model, text []byte, flag streamField, ok bool) {
	if model, text, raw, ok := promptTextPlain(path, body, dst); ok {
		return model, text, streamFieldOf(raw), true
	}
	m, text, ok := promptTextJSON(path, body, dst)
	v, found := streamFlag(body)
	return []byte(m), text, streamField{v: v, found: found, known: true}, ok
}

// streamField is a request's top-level "stream" flag (streamFlag), and
// whether it was read at all (known).
type streamField struct{ v, found, known bool }

// streamFieldOf is the flag of a raw "stream" value (nil: none), as
// streamFlag reads it. Pure.
func streamFieldOf(raw []byte) streamField {
	switch string(raw) {
	case "true":
		return streamField{v: true, found: true, known: true}
	case "false":
		return streamField{found: true, known: true}
	}
	return streamField{known: true}
}

// promptTextJSON is promptText for every body, by encoding/json.
func promptTextJSON(path string, body, dst []byte) (model string, text []byte, ok bool) {
	var req struct {
		Model        string            `json:"model"`
		Messages     []json.RawMessage `json:"messages"`
		System       string            `json:"system"`
		Prompt       json.RawMessage   `json:"prompt"`
		Instructions string            `json:"instructions"`
		Input        json.RawMessage   `json:"input"`
	}
	switch path {
	case "/api/chat", "/v1/chat/completions", "/api/generate", "/v1/completions", "/v1/responses":
	default:
		return "", nil, false
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return "", nil, false
	}
	b := promptBuf{buf: promptRoom(dst, body)}
	switch path {
	case "/api/chat", "/v1/chat/completions":
		for _, m := range req.Messages {
			b.message(m)
		}
	case "/api/generate":
		b.field("system", []byte(req.System))
		var p string
		if json.Unmarshal(req.Prompt, &p) == nil {
			b.field("prompt", []byte(p))
		}
	case "/v1/completions":
		var p string
		if json.Unmarshal(req.Prompt, &p) == nil {
			b.field("prompt", []byte(p))
		} else {
			b.field("prompt", bytes.TrimSpace(req.Prompt)) // strings or token ids, as JSON
		}
	case "/v1/responses":
		b.field("instructions", []byte(req.Instructions))
		var s string
		var items []json.RawMessage
		switch {
		case json.Unmarshal(req.Input, &s) == nil:
			b.field("user", []byte(s))
		case json.Unmarshal(req.Input, &items) == nil:
			for _, it := range items {
				b.message(it)
			}
		}
	}
	return req.Model, b.buf, true
}

// promptBuf accumulates a prompt's text as role, 0, content, 0, up to
// maxPrefixBlocks of the default block size.
type promptBuf struct{ buf []byte }

// promptRoom returns dst emptied if it has room for body's text (which is
// never longer than body, up to maxPromptBytes), else a new buffer that
// has: one allocation at most.
func promptRoom(dst, body []byte) []byte {
	if n := min(len(body), maxPromptBytes); cap(dst) < n {
		return make([]byte, 0, n)
	}
	return dst[:0]
}

const maxPromptBytes = maxPrefixBlocks * DefaultPrefixBlockBytes

func (b *promptBuf) field(role string, content []byte) {
	b.fieldBytes([]byte(role), content)
}

func (b *promptBuf) fieldBytes(role, content []byte) {
	for _, part := range [][]byte{role, {0}, content, {0}} {
		if room := maxPromptBytes - len(b.buf); room > 0 {
			b.buf = append(b.buf, part[:min(len(part), room)]...)
		}
	}
}

// message adds one chat message or Responses input item: its role and its
// content, a string or an array of parts whose text counts; an item
// without either (a tool call, say) counts as its JSON.
func (b *promptBuf) message(raw json.RawMessage) {
	var m struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return
	}
	if m.Role == "" && len(m.Content) == 0 {
		b.field("item", bytes.TrimSpace(raw))
		return
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		b.field(m.Role, []byte(s))
		return
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) == nil {
		var t []byte
		for _, p := range parts {
			t = append(t, p.Text...)
		}
		b.field(m.Role, t)
		return
	}
	b.field(m.Role, bytes.TrimSpace(m.Content))
}

// prefixHashes returns the chained hashes of the full blocks of blockBytes
// of text: block i's hash covers the model and every byte up to the end of
// block i, so two prompts share block i's hash only if they agree up to its
// end, as in vLLM's prefix cache. At most maxPrefixBlocks. Pure.
func prefixHashes(model, text []byte, blockBytes int) []uint64 {
	if blockBytes <= 0 {
		blockBytes = DefaultPrefixBlockBytes
	}
	n := min(len(text)/blockBytes, maxPrefixBlocks)
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	prev := xxhash.Sum64(model)
	var d xxhash.Digest
	var seed [8]byte
	for i := range n {
		d.Reset()
		binary.LittleEndian.PutUint64(seed[:], prev)
		d.Write(seed[:])
		d.Write(text[i*blockBytes : (i+1)*blockBytes])
		prev = d.Sum64()
		out[i] = prev
	}
	return out
}
