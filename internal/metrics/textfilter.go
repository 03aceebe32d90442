package metrics

// A line filter for the Prometheus text exposition format
// (https://prometheus.io/docs/instrumenting/exposition_formats/): it keeps
// the lines of the metric families the gateway reads and drops the rest
// before the expfmt decoder sees them. A vLLM or simulator exposition holds
// a few dozen families, of which the balancer reads at most five; parsing
// all of them into protobuf values was most of what an idle gateway spent
// (BENCHMARKS.md, "Idle cost").
//
// Hand-written, because no library serves it: expfmt's TextParser (the
// decoder we keep for the lines that matter) parses every family into
// dto.MetricFamily values with no way to skip one, and Prometheus's own
// streaming parser (model/textparse) lives in the Prometheus server module,
// far too large a dependency for this. The filter decides per line only
// which family the line belongs to, by the rules of expfmt's parser (the
// name tokens, quoted names and escapes, the `{"name",...}` form), so that
// the kept families parse exactly as they do in the whole exposition;
// FuzzFilterText checks that against the decoder.

import (
	"bytes"
	"strings"
)

// histogramSuffixes are the suffixes by which the text format's parser
// attaches a sample to a summary or histogram family: name_bucket,
// name_sum and name_count belong to family name if it is one.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// baseName returns name without one histogram or summary suffix, or name.
// Pure.
func baseName(name string) string {
	for _, s := range histogramSuffixes {
		if strings.HasSuffix(name, s) {
			return name[:len(name)-len(s)]
		}
	}
	return name
}

// familySet is the set of family names whose lines filterText keeps.
type familySet map[string]bool

// newFamilySet returns the set that keeps the lines of every family in
// names: each name, its base (a wanted name ending in _count may belong to
// a summary of the base name), and the suffixed names of both (a
// histogram's _bucket, _sum and _count lines). Pure.
func newFamilySet(names []string) familySet {
	s := familySet{}
	for _, n := range names {
		if n == "" {
			continue
		}
		s[n] = true
		s[baseName(n)] = true
	}
	return s
}

// wants reports whether a line of the family name is kept: name or its
// base is in the set. It does not allocate.
func (s familySet) wants(name []byte) bool {
	if s[string(name)] {
		return true
	}
	for _, suf := range histogramSuffixes {
		if bytes.HasSuffix(name, []byte(suf)) {
			return s[string(name[:len(name)-len(suf)])]
		}
	}
	return false
}

// filterText appends to dst the lines of the text-format exposition body
// that belong to a family of want, in order, and returns it with ok. Lines
// of other families, comments other than HELP and TYPE, blank lines and
// lines that name no family (which the parser would reject) are dropped.
// It returns ok false, and dst as it was, for an exposition whose wanted
// lines the parser might read differently without the others: a wanted
// sample in the braces form (`{"name",label="v"} 1`, for names outside the
// legacy character set), whose labels expfmt's parser reads with state
// left by the line before (the previous family's type). Servers use that
// form only when asked for UTF-8 names, which the scrape does not ask for;
// the caller then parses the whole body. dst may be body[:0]: the kept lines
// move down in place. Pure.
func filterText(dst, body []byte, want familySet) (out []byte, ok bool) {
	start := len(dst)
	var scratch []byte
	for len(body) > 0 {
		var line []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i+1], body[i+1:]
		} else {
			line, body = body, nil
		}
		name, braces, found := lineFamily(line, scratch[:0])
		if found && want.wants(name) {
			if braces {
				return dst[:start], false
			}
			dst = append(dst, line...)
		}
		if cap(name) > cap(scratch) {
			scratch = name
		}
	}
	return dst, true
}

// lineFamily returns the name of the family one line of the text format
// belongs to, as expfmt's TextParser attributes it: a sample's metric name
// (plain, quoted, or first or later in braces), or the name of a HELP or
// TYPE comment. found is false for a blank line, another comment, or a line
// the parser rejects before it names a family. braces says the name came
// in braces. A name that needs unescaping is built in scratch. Pure.
func lineFamily(line, scratch []byte) (name []byte, braces, found bool) {
	s := skipBlankTab(line)
	if len(s) == 0 {
		return nil, false, false
	}
	switch s[0] {
	case '\n':
		return nil, false, false
	case '#':
		s = skipBlankTab(s[1:])
		kw := s
		if i := bytes.IndexAny(s, " \t\n"); i >= 0 {
			kw, s = s[:i], s[i:]
		} else {
			return nil, false, false // the end of the input in the keyword
		}
		if s[0] == '\n' || (string(kw) != "HELP" && string(kw) != "TYPE") {
			return nil, false, false // a comment the parser skips
		}
		name, rest, ok := nameToken(skipBlankTab(s), true, scratch)
		if !ok || len(name) == 0 || len(rest) == 0 || (rest[0] != ' ' && rest[0] != '\t') {
			// The end of the line already (ignored), or a malformed name.
			return nil, false, false
		}
		return name, false, true
	case '{':
		s = s[1:]
		for {
			s = skipBlankTab(s)
			if len(s) == 0 || s[0] == '}' {
				return nil, false, false // no name: the parser rejects it
			}
			tok, rest, ok := nameToken(s, false, scratch)
			if !ok || len(tok) == 0 {
				return nil, false, false
			}
			s = skipBlankTab(rest)
			if len(s) == 0 {
				return nil, false, false
			}
			switch s[0] {
			case ',', '}':
				return tok, true, true // a token without a value names the metric
			case '=':
			default:
				return nil, false, false
			}
			s = skipBlankTab(s[1:])
			if len(s) == 0 || s[0] != '"' {
				return nil, false, false
			}
			if s, ok = skipQuoted(s[1:]); !ok {
				return nil, false, false
			}
			s = skipBlankTab(s)
			if len(s) == 0 || s[0] != ',' {
				return nil, false, false // '}' without a name, or garbage
			}
			s = s[1:]
		}
	}
	name, _, ok := nameToken(s, true, scratch)
	if !ok || len(name) == 0 {
		return nil, false, false
	}
	return name, false, true
}

// skipBlankTab returns s without its leading blanks and tabs.
func skipBlankTab(s []byte) []byte {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	return s
}

// skipQuoted returns what follows the closing quote of a label value whose
// opening quote was just before s; ok is false for a value the parser
// rejects (an unknown escape, a raw newline, no closing quote).
func skipQuoted(s []byte) (rest []byte, ok bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			return s[i+1:], true
		case '\n':
			return nil, false
		case '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\' && s[i] != 'n') {
				return nil, false
			}
		}
	}
	return nil, false
}

// nameToken reads a metric name (metric) or label name token at the start
// of s the way expfmt's TextParser does: it starts with a letter, '_',
// (':' for a metric name) or '"'; it goes on over those characters and
// digits; a quote opens a quoted part, in which any byte but a raw newline
// goes on, with the escapes \\, \n and \", and whose closing quote ends the
// token. It returns the name (in scratch), the rest of s after it, and ok
// false where the parser fails (a raw newline, an unknown escape, the end
// of the input within the token). An empty name, ok, means s starts with no
// name. Pure.
func nameToken(s []byte, metric bool, scratch []byte) (name, rest []byte, ok bool) {
	out := scratch[:0]
	if len(s) == 0 || !nameStart(s[0], metric) {
		return out, s, true
	}
	quoted, escaped := false, false
	for i := 0; ; {
		c := s[i]
		switch {
		case escaped:
			switch c {
			case '\\', '"':
				out = append(out, c)
			case 'n':
				out = append(out, '\n')
			default:
				return nil, nil, false
			}
			escaped = false
		case c == '"':
			quoted = !quoted
			if !quoted {
				return out, s[i+1:], true
			}
		case c == '\n':
			return nil, nil, false
		case c == '\\':
			escaped = true
		default:
			out = append(out, c)
		}
		i++
		if i == len(s) {
			return nil, nil, false // the end of the input within the token
		}
		c = s[i]
		if !quoted && (!nameStart(c, metric) && (c < '0' || c > '9')) {
			return out, s[i:], true
		}
	}
}

// nameStart reports whether c may start a name token: a letter, '_', '"',
// or ':' in a metric name.
func nameStart(c byte, metric bool) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '"' || (metric && c == ':')
}
