package gateway

import (
	"bytes"
	"unicode/utf8"
)

// promptTextPlain is promptText's fast path, for the bodies most requests
// send: a chat whose messages each have a string role and a string
// content, or a generation whose prompt is a string, every string it uses
// free of escape sequences. It scans the body once, without
// encoding/json's reflection and its copy of every message (17
// allocations for a one-message chat; 2 here). handled is false for any
// other body, valid or not, which promptText then parses with
// encoding/json; for every body it handles it returns what that parse
// returns (FuzzPromptTextPlain checks this). Pure. The text goes into
// dst's array if it has room for the whole body's (promptText).
//
// The model is the body's bytes (a plain string: no escape to decode).
// stream is the raw value of the body's top-level "stream" member (the
// last, as topLevelValue takes it; nil if there is none), so that the
// gateway need not scan the body again for it (asksToStream).
func promptTextPlain(path string, body, dst []byte) (model, text, stream []byte, handled bool) {
	chat := path == "/api/chat" || path == "/v1/chat/completions"
	if !chat && path != "/api/generate" && path != "/v1/completions" {
		return nil, nil, nil, false
	}
	s := jsonScan{b: body}
	s.ws()
	if s.i == len(s.b) || s.b[s.i] != '{' {
		return nil, nil, nil, false
	}
	var (
		seen                   [fieldCount]bool
		modelB, system, prompt []byte
		hasPrompt              bool
		b                      = promptBuf{buf: promptRoom(dst, body)}
	)
	ok := s.object(func(key []byte) bool {
		if string(key) == "stream" {
			at := s.i
			ok := s.value()
			stream = s.b[at:s.i]
			return ok
		}
		f := promptField(key)
		switch {
		case f == fieldOther:
			return s.value()
		case f == fieldUnsure || seen[f]:
			// A key encoding/json may match case-insensitively, or a
			// repeated one (the last counts): left to it.
			return false
		}
		seen[f] = true
		switch f {
		case fieldMessages:
			if !chat {
				return s.array(s.value) // []json.RawMessage
			}
			return s.array(func() bool {
				role, content, ok := s.message()
				if ok {
					b.fieldBytes(role, content)
				}
				return ok
			})
		case fieldPrompt:
			if chat {
				return s.value()
			}
			hasPrompt = true
			var ok bool
			prompt, ok = s.plainString()
			return ok
		case fieldInput:
			return s.value()
		}
		v, ok := s.plainString() // model, system, instructions
		switch f {
		case fieldModel:
			modelB = v
		case fieldSystem:
			system = v
		}
		return ok
	})
	s.ws()
	if !ok || s.i != len(s.b) {
		return nil, nil, nil, false
	}
	switch path {
	case "/api/generate":
		b.fieldBytes([]byte("system"), system)
		if hasPrompt {
			b.fieldBytes([]byte("prompt"), prompt)
		}
	case "/v1/completions":
		if !hasPrompt {
			return nil, nil, nil, false
		}
		b.fieldBytes([]byte("prompt"), prompt)
	}
	return modelB, b.buf, stream, true
}

// The top-level fields promptText reads, as promptField tells them.
const (
	fieldModel = iota
	fieldMessages
	fieldSystem
	fieldPrompt
	fieldInstructions
	fieldInput
	fieldCount

	fieldOther  = -1 // not one of them
	fieldUnsure = -2 // escaped, or one of them in other letter case
)

var promptFieldNames = [fieldCount]string{"model", "messages", "system", "prompt", "instructions", "input"}

// promptField returns which of promptText's fields a key (as written in
// the body, between its quotes) is: fieldOther if none, fieldUnsure if
// encoding/json might match it to one while the scan cannot tell (an
// escape sequence, or a case-insensitive match). Pure.
func promptField(key []byte) int {
	if bytes.IndexByte(key, '\\') >= 0 {
		return fieldUnsure
	}
	for f, name := range promptFieldNames {
		if string(key) == name {
			return f
		}
	}
	for _, name := range promptFieldNames {
		if bytes.EqualFold(key, []byte(name)) {
			return fieldUnsure
		}
	}
	if !utf8.Valid(key) {
		return fieldUnsure // encoding/json would read U+FFFD
	}
	return fieldOther
}

// jsonScan reads JSON text at b[i:]. Its methods return false on any
// input the fast path does not take, including all invalid JSON (what
// encoding/json refuses, it refuses), beyond which they stop.
type jsonScan struct {
	b     []byte
	i     int
	depth int
}

// maxScanDepth bounds the nesting the scan follows (encoding/json's own
// bound is 10000; deeper bodies go to it).
const maxScanDepth = 64

func (s *jsonScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value reads any one value.
func (s *jsonScan) value() bool {
	if s.i == len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == '{':
		return s.object(func([]byte) bool { return s.value() })
	case c == '[':
		return s.array(s.value)
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return false
}

func (s *jsonScan) literal(lit string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		return false
	}
	s.i += len(lit)
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number reads a number as RFC 8259 writes it.
func (s *jsonScan) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i == len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return true
}

// str reads a string and returns its bytes between the quotes, and
// whether they are its value: no escape sequence, valid UTF-8.
func (s *jsonScan) str() (raw []byte, plain, ok bool) {
	start := s.i + 1
	plain = true
	ascii := true // stringRun stops at every byte from 0x80: none seen, valid UTF-8
	for j := start; ; j++ {
		if j = stringRun(s.b, j); j >= len(s.b) {
			return nil, false, false
		}
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			raw = s.b[start:j]
			return raw, plain && (ascii || utf8.Valid(raw)), true
		case c == '\\':
			plain = false
			j++
			if j == len(s.b) {
				return nil, false, false
			}
			switch s.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(s.b) {
					return nil, false, false
				}
				for _, h := range s.b[j+1 : j+5] {
					if !isDigit(h) && !('a' <= h && h <= 'f') && !('A' <= h && h <= 'F') {
						return nil, false, false
					}
				}
				j += 4
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		default: // 0x80 and above
			ascii = false
		}
	}
}

// plainString reads a string that is its own value (see str).
func (s *jsonScan) plainString() ([]byte, bool) {
	if s.i == len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	raw, plain, ok := s.str()
	return raw, plain && ok
}

// object reads an object, calling member with s at each member's value,
// which member must read.
func (s *jsonScan) object(member func(key []byte) bool) bool {
	if s.depth++; s.depth > maxScanDepth {
		return false
	}
	s.i++ // '{'
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return true
	}
	for {
		if s.i == len(s.b) || s.b[s.i] != '"' {
			return false
		}
		key, _, ok := s.str()
		if !ok {
			return false
		}
		s.ws()
		if s.i == len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		if !member(key) {
			return false
		}
		if more, ok := s.next('}'); !more {
			return ok
		}
	}
}

// next reads what follows a member or an element: a comma (more is true)
// or the closing byte, which ends the object or array (ok is true).
func (s *jsonScan) next(closing byte) (more, ok bool) {
	s.ws()
	if s.i == len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		s.ws()
		return true, true
	case closing:
		s.i++
		s.depth--
		return false, true
	}
	return false, false
}

// array reads an array, calling elem with s at each element, which elem
// must read.
func (s *jsonScan) array(elem func() bool) bool {
	if s.i == len(s.b) || s.b[s.i] != '[' {
		return false
	}
	if s.depth++; s.depth > maxScanDepth {
		return false
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return true
	}
	for {
		if !elem() {
			return false
		}
		if more, ok := s.next(']'); !more {
			return ok
		}
	}
}

// message reads a chat message that has a role and a content, both plain
// strings (see str), each once and under its own name.
func (s *jsonScan) message() (role, content []byte, ok bool) {
	if s.i == len(s.b) || s.b[s.i] != '{' {
		return nil, nil, false
	}
	var hasRole, hasContent bool
	ok = s.object(func(key []byte) bool {
		switch {
		case string(key) == "role" && !hasRole:
			hasRole = true
			var ok bool
			role, ok = s.plainString()
			return ok
		case string(key) == "content" && !hasContent:
			hasContent = true
			var ok bool
			content, ok = s.plainString()
			return ok
		case bytes.IndexByte(key, '\\') >= 0 || bytes.EqualFold(key, []byte("role")) || bytes.EqualFold(key, []byte("content")) || !utf8.Valid(key):
			return false // see promptField
		}
		return s.value()
	})
	return role, content, ok && hasRole && hasContent
}
