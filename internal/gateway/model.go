package gateway

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
)

// Model-aware routing.
//
// A request names its model in the "model" field of its JSON body (Ollama's
// /api/chat and /api/generate, OpenAI's /v1/chat/completions and
// /v1/completions, vLLM). Backends published with Backend.Models serve only
// those models; a backend without Models serves any. When at least one
// published backend (of the request's pool, if it names one) serves the
// request's model, only those are candidates; when none does, every backend
// is (its own answer, typically 404 "model not found", reaches the client).
// Requests without a model (GET /api/tags, a body that is not a JSON
// object) are not restricted.
//
// A version split divides one model's traffic among versions of it
// (AIBalancer's ModelBased strategy: v1 90, v2 10). Backends carry their
// version in Backend.Version; SetVersionSplit sets a model's weights. For
// each attempt a version is drawn among the split's versions that have a
// candidate, in proportion to their weights, and only that version's
// candidates are offered to the policy. Candidates of versions not in the
// split get no traffic while any split version has a candidate; if none
// has, the split is ignored rather than failing the request.

// VersionWeight is one version's share of a model's traffic.
type VersionWeight struct {
	Version string
	// Weight is relative to the other versions of the split; 0 sends the
	// version nothing.
	Weight int
}

// SetVersionSplit sets the traffic split of model among its versions; an
// empty split removes it. The model "" is the default split, for requests
// whose model has no split of its own (and requests without a model). It is
// in force when SetVersionSplit returns.
func (g *Gateway) SetVersionSplit(model string, split []VersionWeight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.splits.Load()
	next := map[string][]VersionWeight{}
	if old != nil {
		next = maps.Clone(*old)
	}
	clean := make([]VersionWeight, 0, len(split))
	for _, v := range split {
		if v.Weight > 0 {
			clean = append(clean, v)
		}
	}
	if len(clean) == 0 {
		delete(next, model)
	} else {
		next[model] = clean
	}
	if len(next) == 0 {
		g.splits.Store(nil)
		return
	}
	g.splits.Store(&next)
}

// VersionSplits returns a copy of the version splits in force, by model.
func (g *Gateway) VersionSplits() map[string][]VersionWeight {
	p := g.splits.Load()
	if p == nil {
		return map[string][]VersionWeight{}
	}
	out := make(map[string][]VersionWeight, len(*p))
	for k, v := range *p {
		out[k] = slices.Clone(v)
	}
	return out
}

// splitFor returns the split that applies to a request for model.
func (g *Gateway) splitFor(model string) []VersionWeight {
	p := g.splits.Load()
	if p == nil {
		return nil
	}
	if s, ok := (*p)[model]; ok {
		return s
	}
	return (*p)[""]
}

// chooseVersion draws a version of split in proportion to the weights of
// those for which has(version) is true, using draw(n) uniform in [0, n).
// ok is false when no version of the split has candidates. Pure given draw.
func chooseVersion(split []VersionWeight, has func(string) bool, draw func(n int) int) (string, bool) {
	total := 0
	for _, v := range split {
		if v.Weight > 0 && has(v.Version) {
			total += v.Weight
		}
	}
	if total == 0 {
		return "", false
	}
	r := draw(total)
	for _, v := range split {
		if v.Weight > 0 && has(v.Version) {
			if r < v.Weight {
				return v.Version, true
			}
			r -= v.Weight
		}
	}
	return "", false // unreachable with a draw in range
}

// applySplit narrows cands (in place) to one version drawn by the split
// that applies to model, if any.
func (g *Gateway) applySplit(cands []*Upstream, model string) []*Upstream {
	split := g.splitFor(model)
	if split == nil || len(cands) == 0 {
		return cands
	}
	has := func(v string) bool {
		for _, u := range cands {
			if u.meta.Load().version == v {
				return true
			}
		}
		return false
	}
	v, ok := chooseVersion(split, has, rand.IntN)
	if !ok {
		return cands
	}
	return slices.DeleteFunc(cands, func(u *Upstream) bool { return u.meta.Load().version != v })
}

// preferLoaded narrows cands, in place, to those that have model loaded in
// memory per their fresh metrics (Ollama's /api/ps), if any has: a model
// loaded answers at once, one not loaded waits for the load. If none is
// known to have it, cands are returned as they are.
func (g *Gateway) preferLoaded(cands []*Upstream, model string) []*Upstream {
	now := g.clock.Now()
	has := func(u *Upstream) bool {
		m := u.ext.Load()
		if m == nil || m.Has&loadmetrics.FieldLoaded == 0 || !m.Fresh(now, g.metricsMaxAge) {
			return false
		}
		for _, l := range m.Loaded {
			if sameModel(l, model) {
				return true
			}
		}
		return false
	}
	if !slices.ContainsFunc(cands, has) {
		return cands
	}
	out := cands[:0]
	for _, u := range cands {
		if has(u) {
			out = append(out, u)
		}
	}
	return out
}

// sameModel reports whether two model names name the same model: equal, or
// equal once a ":latest" tag is dropped (Ollama resolves "llama3" to
// "llama3:latest").
func sameModel(a, b string) bool {
	if a == b {
		return true
	}
	return strings.TrimSuffix(a, ":latest") == strings.TrimSuffix(b, ":latest")
}

// requestModel returns the top-level "model" field of a JSON object body
// if it is a string. It scans the buffered body without building a
// document: a chat request's messages can be megabytes. As encoding/json
// does, a repeated key counts with its last value. It returns false for
// bodies that are not a JSON object, are cut short, or have no string
// "model".
func requestModel(b []byte) (string, bool) {
	v, ok := topLevelValue(b, "model")
	if !ok || len(v) == 0 || v[0] != '"' {
		return "", false
	}
	_, simple, ok := scanString(v, 0) // topLevelValue skipped it unread
	if !ok {
		return "", false
	}
	return decodeString(v, simple), true
}

// topLevelValue returns the raw JSON value of the top-level key in the
// JSON object b (the last one, as encoding/json takes a repeated key), by
// a scan that builds no document. It returns false for bodies that are
// not a JSON object, are cut short, or lack the key.
func topLevelValue(b []byte, key string) ([]byte, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i++
	var val []byte
	found := false
	for first := true; ; first = false {
		i = skipSpace(b, i)
		if i >= len(b) {
			return nil, false
		}
		if b[i] == '}' && first {
			return val, found
		}
		if b[i] != '"' {
			return nil, false
		}
		kEnd, kSimple, ok := scanString(b, i)
		if !ok {
			return nil, false
		}
		isKey := keyIs(b[i:kEnd], kSimple, key)
		i = skipSpace(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipSpace(b, i+1)
		vStart := i
		if i, ok = skipValue(b, i); !ok {
			return nil, false
		}
		if isKey {
			val, found = b[vStart:i], true
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			return val, found
		default:
			return nil, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString scans the JSON string starting at b[i] == '"' and returns the
// index after its closing quote, and whether it is simple: printable ASCII
// without escapes, so that its bytes are its value.
func scanString(b []byte, i int) (end int, simple, ok bool) {
	simple = true
	for j := i + 1; ; j++ {
		if j = stringRun(b, j); j >= len(b) {
			return 0, false, false
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, simple, true
		case c == '\\':
			simple = false
			j++ // skip the escaped byte; \uXXXX's digits are plain bytes
		case c < 0x20:
			return 0, false, false // control characters must be escaped
		default: // c >= 0x80
			simple = false
		}
	}
}

// stringRun returns the index of the first byte of b at or after i that a
// scan of a JSON string must look at: '"', '\\', a control character, or
// a byte of a multi-byte UTF-8 sequence; len(b) if there is none. It
// looks at eight bytes at a time: a prompt's text is most of a request's
// body, and a scan of it byte by byte was 8 % of the gateway's CPU on a
// request with a 4 KiB prompt (BENCHMARKS.md, issue 19 session 19).
func stringRun(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		q, s := w^(ones*'"'), w^(ones*'\\')
		// A byte's high bit is set in each term where that byte is 0 (q,
		// s), below 0x20, or itself at or above 0x80 (w): exact as to
		// whether any byte is, which is all that is asked.
		if ((q-ones)&^q|(s-ones)&^s|(w-ones*0x20)&^w|w)&highs != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
			return i
		}
	}
	return i
}

// keyIs reports whether the JSON string quoted (with its quotes) is want.
func keyIs(quoted []byte, simple bool, want string) bool {
	if simple {
		return string(quoted[1:len(quoted)-1]) == want
	}
	return decodeString(quoted, false) == want
}

// decodeString returns the value of the JSON string quoted (with its
// quotes).
func decodeString(quoted []byte, simple bool) string {
	if simple {
		return string(quoted[1 : len(quoted)-1])
	}
	var s string
	if json.Unmarshal(quoted, &s) != nil {
		return ""
	}
	return s
}

// skipString returns the index after the closing quote of the JSON string
// starting at b[i] == '"'. Unlike scanString it does not look at every
// byte: it finds each '"' with bytes.IndexByte (vector instructions, 16 or
// 32 bytes at a time) and takes the first one not escaped, that is with an
// even run of backslashes before it. It does not reject control
// characters: a skipped value is forwarded, not read. The values a request
// body's scans skip are its messages, most of its bytes, scanned once for
// the stream flag (BENCHMARKS.md, issue 19 session 20).
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, false
		}
		q := j + k
		p := q - 1
		for p > i && b[p] == '\\' {
			p--
		}
		if (q-1-p)%2 == 0 {
			return q + 1, true
		}
		j = q + 1
	}
	return 0, false
}

// skipValue skips the JSON value starting at b[i] and returns the index
// after it. Objects and arrays are skipped by nesting depth; the scalars
// are not validated beyond their extent.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	case ',', '}', ']', ':':
		return 0, false
	}
	start := i
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i, i > start
		}
		i++
	}
	return i, i > start
}
