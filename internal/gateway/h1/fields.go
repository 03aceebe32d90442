package h1

import (
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Field is one field line of a response head: the name canonical, the
// value trimmed and valid.
type Field struct{ Name, Value string }

// Fields are a response head's fields in the order the backend sent them,
// for a proxy that passes them on without a header map (Options.PassHeads,
// PassFields): parsing a head into an http.Header, copying it into the
// response writer's and writing that again cost about a tenth of a short
// request's CPU.
type Fields []Field

// Get returns the first value of the canonical name, or "".
func (f Fields) Get(name string) string {
	for _, x := range f {
		if x.Name == name {
			return x.Value
		}
	}
	return ""
}

// Values returns the values of the canonical name (a new slice; nil if
// none).
func (f Fields) Values(name string) []string {
	var vv []string
	for _, x := range f {
		if x.Name == name {
			vv = append(vv, x.Value)
		}
	}
	return vv
}

// splitField splits a field line ("Name: value", the name valid and
// canonical) as addField does, without a map; false if the value is not
// valid.
func splitField(line string) (key, value string, ok bool) {
	colon := strings.IndexByte(line, ':')
	key = line[:colon]
	value = trimOWS(line[colon+1:])
	return key, value, httpguts.ValidHeaderFieldValue(value)
}

// PassedFields returns the fields of resp, an answer of a Client with
// PassHeads: its Header is then nil.
func PassedFields(resp *http.Response) (Fields, bool) {
	b, ok := resp.Body.(*Body)
	if !ok || b.fields == nil {
		return nil, false
	}
	return b.fields, true
}

// PassFields has w, a response of this package's Server, write f after its
// own header's fields when its head goes out, but for the fields it
// frames itself (Content-Length, Transfer-Encoding, Connection) and those
// its header sets. Content-Length, Content-Type and Date in f count as in
// the header. It returns false, and does nothing, if w is not such a
// response (a wrapper included) or its head is decided.
func PassFields(w http.ResponseWriter, f Fields) bool {
	r, ok := w.(*response)
	if !ok || r.wroteHeader {
		return false
	}
	r.pass = f
	return true
}
