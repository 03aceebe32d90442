package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// JSON Schema reading and value generation, for structured output (Ollama
// format, OpenAI response_format json_schema) and tool-call arguments (a
// function's parameters). The simulator reads the keywords that shape a
// value — type, properties, required, additionalProperties, items,
// prefixItems, minItems/maxItems, enum, const, anyOf/oneOf (the first
// branch), allOf (merged), local $ref ("#/..."), minimum/maximum and their
// exclusive forms, multipleOf, minLength/maxLength and a few string formats
// — and writes one deterministic value that satisfies them. pattern, not,
// if/then/else, uniqueItems and the like are accepted and not honoured.
// Properties are written in the order the schema declares them, as a
// constrained model does.

// Limits on a schema and on what it may ask for.
const (
	maxSchemaNodes  = 10000
	maxSchemaDepth  = 64
	maxSchemaOutput = 256 << 10 // bytes of generated JSON
	maxSchemaCount  = 10000     // minItems / minLength the simulator honours
	// shallowDepth is the nesting beyond which only required properties
	// and minItems items are written, so recursive schemas end.
	shallowDepth = 6
)

// schema is one parsed JSON Schema node.
type schema struct {
	path        string // JSON pointer of the node, for errors
	boolean     *bool  // the schemas true and false
	types       []string
	props       []schemaProp
	required    []string
	additional  *schema // additionalProperties as a schema
	items       *schema
	prefixItems []*schema
	minItems    int
	maxItems    int // -1: none
	enum        []json.RawMessage
	konst       json.RawMessage
	anyOf       []*schema // anyOf or oneOf
	allOf       []*schema
	ref         string
	minimum     *float64
	maximum     *float64
	exclMin     bool
	exclMax     bool
	multipleOf  float64
	minLength   int
	maxLength   int // -1: none
	format      string
}

type schemaProp struct {
	name string
	s    *schema
}

// schemaDoc is a parsed schema with its nodes by JSON pointer, for $ref.
type schemaDoc struct {
	root  *schema
	nodes map[string]*schema
}

// parseSchema reads a JSON Schema. Errors name the offending node.
func parseSchema(raw json.RawMessage) (*schemaDoc, error) {
	p := &schemaParser{doc: &schemaDoc{nodes: map[string]*schema{}}}
	root, err := p.node(bytes.TrimSpace(raw), "#", 0)
	if err != nil {
		return nil, err
	}
	p.doc.root = root
	// Resolve every $ref now, so generation cannot fail on one.
	for _, n := range p.doc.nodes {
		if n.ref != "" {
			if _, ok := p.doc.nodes[n.ref]; !ok {
				return nil, fmt.Errorf("schema at %s: $ref %q does not point into the schema (only local references like \"#/$defs/Name\" are supported)", n.path, n.ref)
			}
		}
	}
	return p.doc, nil
}

type schemaParser struct {
	doc   *schemaDoc
	count int
}

func pointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func (p *schemaParser) node(raw []byte, path string, depth int) (*schema, error) {
	p.count++
	if p.count > maxSchemaNodes {
		return nil, fmt.Errorf("schema has more than %d nodes", maxSchemaNodes)
	}
	if depth > maxSchemaDepth {
		return nil, fmt.Errorf("schema at %s nests deeper than %d levels", path, maxSchemaDepth)
	}
	s := &schema{path: path, maxItems: -1, maxLength: -1}
	p.doc.nodes[path] = s
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		s.boolean = &b
		return s, nil
	}
	fields, err := orderedObject(raw)
	if err != nil {
		return nil, fmt.Errorf("schema at %s must be a JSON object or a boolean", path)
	}
	bad := func(key, want string) error {
		return fmt.Errorf("schema at %s: %q must be %s", path, key, want)
	}
	for _, f := range fields {
		key, val := f.name, f.raw
		sub := path + "/" + pointerEscape(key)
		switch key {
		case "type":
			var one string
			if json.Unmarshal(val, &one) == nil {
				s.types = []string{one}
			} else if json.Unmarshal(val, &s.types) != nil {
				return nil, bad(key, "a string or an array of strings")
			}
			for _, t := range s.types {
				switch t {
				case "string", "number", "integer", "boolean", "object", "array", "null":
				default:
					return nil, fmt.Errorf("schema at %s: unknown type %q (want string, number, integer, boolean, object, array or null)", path, t)
				}
			}
		case "properties", "$defs", "definitions", "patternProperties", "dependentSchemas":
			members, err := orderedObject(val)
			if err != nil {
				return nil, bad(key, "an object of schemas")
			}
			for _, m := range members {
				child, err := p.node(m.raw, sub+"/"+pointerEscape(m.name), depth+1)
				if err != nil {
					return nil, err
				}
				if key == "properties" {
					s.props = append(s.props, schemaProp{name: m.name, s: child})
				}
			}
		case "required":
			if json.Unmarshal(val, &s.required) != nil {
				return nil, bad(key, "an array of strings")
			}
		case "additionalProperties", "items", "not", "if", "then", "else", "contains", "propertyNames", "unevaluatedProperties", "unevaluatedItems":
			if key == "items" && len(bytes.TrimSpace(val)) > 0 && bytes.TrimSpace(val)[0] == '[' {
				// Draft 4-7 tuple form.
				list, err := p.list(val, sub, depth)
				if err != nil {
					return nil, bad(key, "a schema or an array of schemas")
				}
				s.prefixItems = list
				continue
			}
			child, err := p.node(val, sub, depth+1)
			if err != nil {
				return nil, err
			}
			switch key {
			case "additionalProperties":
				s.additional = child
			case "items":
				s.items = child
			}
		case "prefixItems", "anyOf", "oneOf", "allOf":
			list, err := p.list(val, sub, depth)
			if err != nil {
				return nil, err
			}
			switch key {
			case "prefixItems":
				s.prefixItems = list
			case "allOf":
				s.allOf = list
			default:
				if len(list) == 0 {
					return nil, bad(key, "a non-empty array of schemas")
				}
				if s.anyOf == nil {
					s.anyOf = list
				}
			}
		case "enum":
			if json.Unmarshal(val, &s.enum) != nil || len(s.enum) == 0 {
				return nil, bad(key, "a non-empty array")
			}
			for i, e := range s.enum {
				s.enum[i] = compactJSON(e)
			}
		case "const":
			s.konst = compactJSON(val)
		case "$ref":
			if json.Unmarshal(val, &s.ref) != nil {
				return nil, bad(key, "a string")
			}
			if s.ref != "#" && !strings.HasPrefix(s.ref, "#/") {
				return nil, fmt.Errorf("schema at %s: $ref %q is not local (only references like \"#/$defs/Name\" are supported)", path, s.ref)
			}
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			var f float64
			var flag bool
			if key[0] == 'e' && json.Unmarshal(val, &flag) == nil {
				// Draft 4: a boolean making minimum/maximum exclusive.
				if key == "exclusiveMinimum" {
					s.exclMin = flag
				} else {
					s.exclMax = flag
				}
				continue
			}
			if json.Unmarshal(val, &f) != nil {
				return nil, bad(key, "a number")
			}
			switch key {
			case "minimum":
				s.minimum = tighter(s.minimum, f, true)
			case "maximum":
				s.maximum = tighter(s.maximum, f, false)
			case "exclusiveMinimum":
				s.minimum, s.exclMin = &f, true
			case "exclusiveMaximum":
				s.maximum, s.exclMax = &f, true
			}
		case "multipleOf":
			if json.Unmarshal(val, &s.multipleOf) != nil || !(s.multipleOf > 0) || math.IsInf(s.multipleOf, 0) {
				return nil, bad(key, "a number above 0")
			}
		case "minItems", "maxItems", "minLength", "maxLength":
			var f float64
			if json.Unmarshal(val, &f) != nil || f < 0 || f != math.Trunc(f) {
				return nil, bad(key, "a non-negative integer")
			}
			n := int(min(f, math.MaxInt32))
			if (key == "minItems" || key == "minLength") && n > maxSchemaCount {
				return nil, fmt.Errorf("schema at %s: %q is %d; the simulator generates at most %d", path, key, n, maxSchemaCount)
			}
			switch key {
			case "minItems":
				s.minItems = n
			case "maxItems":
				s.maxItems = n
			case "minLength":
				s.minLength = n
			case "maxLength":
				s.maxLength = n
			}
		case "format":
			json.Unmarshal(val, &s.format) // annotation only: a non-string is ignored
		}
	}
	return s, nil
}

func (p *schemaParser) list(raw []byte, path string, depth int) ([]*schema, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("schema at %s must be an array of schemas", path)
	}
	out := make([]*schema, len(items))
	for i, it := range items {
		child, err := p.node(it, path+"/"+strconv.Itoa(i), depth+1)
		if err != nil {
			return nil, err
		}
		out[i] = child
	}
	return out, nil
}

func tighter(old *float64, f float64, isMin bool) *float64 {
	if old == nil || (isMin && f > *old) || (!isMin && f < *old) {
		return &f
	}
	return old
}

func compactJSON(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

type rawMember struct {
	name string
	raw  json.RawMessage
}

// orderedObject returns the members of a JSON object in document order
// (a later duplicate key replaces the earlier one, as encoding/json does).
func orderedObject(raw []byte) ([]rawMember, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not an object")
	}
	var out []rawMember
	index := map[string]int{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if i, ok := index[key]; ok {
			out[i].raw = v
			continue
		}
		index[key] = len(out)
		out = append(out, rawMember{name: key, raw: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data")
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("trailing data")
	}
	return out, nil
}

// generate writes a JSON value satisfying the schema, chosen
// deterministically by seed.
func (d *schemaDoc) generate(seed int) ([]byte, error) {
	g := &schemaGen{doc: d, state: uint64(seed)*0x9e3779b97f4a7c15 + 1}
	if err := g.value(d.root, 0); err != nil {
		return nil, err
	}
	return g.buf.Bytes(), nil
}

type schemaGen struct {
	doc   *schemaDoc
	buf   bytes.Buffer
	state uint64
}

// next is SplitMix64: a small deterministic stream of choices.
func (g *schemaGen) next() uint64 {
	g.state += 0x9e3779b97f4a7c15
	z := g.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (g *schemaGen) value(s *schema, depth int) error {
	if g.buf.Len() > maxSchemaOutput {
		return fmt.Errorf("the schema asks for more than %d KiB of output", maxSchemaOutput>>10)
	}
	if depth > 2*maxSchemaDepth {
		return fmt.Errorf("schema at %s recurses without end (a required property or minItems refers back to itself)", s.path)
	}
	if s.boolean != nil {
		if !*s.boolean {
			return fmt.Errorf("schema at %s is false: no value satisfies it", s.path)
		}
		g.buf.WriteString("null")
		return nil
	}
	if s.ref != "" {
		return g.value(g.doc.nodes[s.ref], depth+1)
	}
	if len(s.allOf) > 0 {
		return g.value(g.mergeAll(s, 0), depth+1)
	}
	if s.konst != nil {
		g.buf.Write(s.konst)
		return nil
	}
	if len(s.enum) > 0 {
		g.buf.Write(s.enum[g.next()%uint64(len(s.enum))])
		return nil
	}
	if len(s.anyOf) > 0 {
		return g.value(s.anyOf[0], depth+1)
	}
	switch s.kind() {
	case "object":
		return g.object(s, depth)
	case "array":
		return g.array(s, depth)
	case "integer":
		g.buf.WriteString(g.number(s, true))
	case "number":
		g.buf.WriteString(g.number(s, false))
	case "boolean":
		g.buf.WriteString(strconv.FormatBool(g.next()%2 == 0))
	case "null":
		g.buf.WriteString("null")
	default:
		b, _ := json.Marshal(g.str(s))
		g.buf.Write(b)
	}
	return nil
}

// kind is the type to generate: the first declared type that is not null
// (null when it is the only one), else inferred from the keywords.
func (s *schema) kind() string {
	for _, t := range s.types {
		if t != "null" {
			return t
		}
	}
	switch {
	case len(s.types) > 0:
		return "null"
	case len(s.props) > 0 || len(s.required) > 0 || s.additional != nil:
		return "object"
	case s.items != nil || len(s.prefixItems) > 0:
		return "array"
	case s.minimum != nil || s.maximum != nil || s.multipleOf > 0:
		return "number"
	}
	return "string"
}

// mergeAll folds allOf into one node: types, properties and required are
// combined, the first set value of every other keyword wins.
func (g *schemaGen) mergeAll(s *schema, depth int) *schema {
	m := *s
	m.allOf = nil
	for _, sub := range s.allOf {
		for range maxSchemaDepth {
			if sub.ref == "" {
				break
			}
			sub = g.doc.nodes[sub.ref]
		}
		if len(sub.allOf) > 0 && depth < maxSchemaDepth {
			sub = g.mergeAll(sub, depth+1)
		}
		if len(m.types) == 0 {
			m.types = sub.types
		}
		m.props = append(m.props[:len(m.props):len(m.props)], sub.props...)
		m.required = append(m.required[:len(m.required):len(m.required)], sub.required...)
		if m.items == nil {
			m.items = sub.items
		}
		if m.additional == nil {
			m.additional = sub.additional
		}
		if m.enum == nil {
			m.enum = sub.enum
		}
		if m.konst == nil {
			m.konst = sub.konst
		}
		if m.minimum == nil {
			m.minimum, m.exclMin = sub.minimum, sub.exclMin
		}
		if m.maximum == nil {
			m.maximum, m.exclMax = sub.maximum, sub.exclMax
		}
		m.minItems, m.minLength = max(m.minItems, sub.minItems), max(m.minLength, sub.minLength)
		if m.maxItems < 0 {
			m.maxItems = sub.maxItems
		}
		if m.maxLength < 0 {
			m.maxLength = sub.maxLength
		}
		if m.format == "" {
			m.format = sub.format
		}
	}
	return &m
}

func (g *schemaGen) object(s *schema, depth int) error {
	g.buf.WriteByte('{')
	required := map[string]bool{}
	for _, r := range s.required {
		required[r] = true
	}
	seen := map[string]bool{}
	n := 0
	member := func(name string, sub *schema) error {
		if n > 0 {
			g.buf.WriteByte(',')
		}
		n++
		k, _ := json.Marshal(name)
		g.buf.Write(k)
		g.buf.WriteByte(':')
		return g.value(sub, depth+1)
	}
	for _, p := range s.props {
		if seen[p.name] || (depth >= shallowDepth && !required[p.name]) {
			continue
		}
		seen[p.name] = true
		if err := member(p.name, p.s); err != nil {
			return err
		}
	}
	for _, r := range s.required {
		if seen[r] {
			continue
		}
		seen[r] = true
		sub := s.additional
		if sub == nil || sub.boolean != nil {
			sub = &schema{path: s.path + "/required", maxItems: -1, maxLength: -1}
		}
		if err := member(r, sub); err != nil {
			return err
		}
	}
	g.buf.WriteByte('}')
	return nil
}

func (g *schemaGen) array(s *schema, depth int) error {
	n := max(s.minItems, len(s.prefixItems))
	if depth < shallowDepth {
		n = max(n, 1)
	}
	if s.maxItems >= 0 {
		n = min(n, s.maxItems)
	}
	g.buf.WriteByte('[')
	for i := range n {
		if i > 0 {
			g.buf.WriteByte(',')
		}
		item := s.items
		if i < len(s.prefixItems) {
			item = s.prefixItems[i]
		}
		if item == nil {
			item = &schema{path: s.path + "/items", maxItems: -1, maxLength: -1}
		}
		if err := g.value(item, depth+1); err != nil {
			return err
		}
	}
	g.buf.WriteByte(']')
	return nil
}

// number picks a value in the schema's range, a multiple of multipleOf if
// set; a range with no such value gets its lower bound.
func (g *schemaGen) number(s *schema, integer bool) string {
	lo, hi := math.Inf(-1), math.Inf(1)
	if s.minimum != nil {
		lo = *s.minimum
	}
	if s.maximum != nil {
		hi = *s.maximum
	}
	step := s.multipleOf
	if integer {
		if step == 0 {
			step = 1
		} else if step != math.Trunc(step) {
			step = math.Ceil(step)
		}
	}
	r := float64(g.next() % 100)
	var v float64
	switch {
	case !math.IsInf(lo, 0) && !math.IsInf(hi, 0):
		v = lo + math.Mod(r, max(hi-lo, 1))
	case !math.IsInf(lo, 0):
		v = lo + r
	case !math.IsInf(hi, 0):
		v = hi - r
	default:
		v = r
	}
	if step > 0 {
		v = math.Ceil(v/step) * step
		if v > hi || (s.exclMax && v >= hi) {
			v = math.Floor(hi/step) * step
			if s.exclMax && v >= hi {
				v -= step
			}
		}
		if v < lo || (s.exclMin && v <= lo) {
			v = math.Ceil(lo/step) * step
			if s.exclMin && v <= lo {
				v += step
			}
		}
	} else {
		if !integer && v+0.5 < hi {
			v += 0.5
		}
		if s.exclMin && v <= lo {
			v = lo + min(0.5, (hi-lo)/2)
		}
		if s.exclMax && v >= hi {
			v = hi - min(0.5, (hi-lo)/2)
		}
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	if integer {
		if v >= -(1<<53) && v <= 1<<53 {
			return strconv.FormatInt(int64(v), 10)
		}
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// asciiWords are the poem's words made of ASCII letters, for generated
// strings (whose length JSON Schema counts in code points).
var asciiWords = func() []string {
	var out []string
	for _, t := range poemTokens {
		w := strings.TrimSpace(t)
		if w != "" && utf8.ValidString(w) && len(w) == utf8.RuneCountInString(w) {
			out = append(out, w)
		}
	}
	return out
}()

// str is a string for s: a fixed example of a known format, else poem
// words, fitted to minLength and maxLength.
func (g *schemaGen) str(s *schema) string {
	r := g.next()
	var v string
	switch s.format {
	case "date-time":
		v = fmt.Sprintf("2026-01-%02dT%02d:00:00Z", 1+r%28, r%24)
	case "date":
		v = fmt.Sprintf("2026-01-%02d", 1+r%28)
	case "time":
		v = fmt.Sprintf("%02d:00:00Z", r%24)
	case "email":
		v = asciiWords[r%uint64(len(asciiWords))] + "@example.com"
	case "uri", "url", "iri":
		v = "https://example.com/" + asciiWords[r%uint64(len(asciiWords))]
	case "hostname":
		v = asciiWords[r%uint64(len(asciiWords))] + ".example.com"
	case "ipv4":
		v = fmt.Sprintf("192.0.2.%d", r%250+1)
	case "ipv6":
		v = fmt.Sprintf("2001:db8::%x", r%0xffff+1)
	case "uuid":
		v = fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(r), uint16(r>>32), r>>48&0xfff, r>>20&0xfff, g.next()&0xffffffffffff)
	default:
		words := 1 + int(r%3)
		parts := make([]string, words)
		for i := range parts {
			parts[i] = asciiWords[(int(r>>8)+i)%len(asciiWords)]
		}
		v = strings.Join(parts, " ")
	}
	for len(v) < s.minLength {
		v += " " + asciiWords[g.next()%uint64(len(asciiWords))]
	}
	if s.maxLength >= 0 && len(v) > s.maxLength {
		v = strings.TrimRight(v[:s.maxLength], " ")
		if len(v) < s.minLength { // trailing space mattered
			v = v + strings.Repeat("a", s.minLength-len(v))
		}
	}
	return v
}
