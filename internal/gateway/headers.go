package gateway

import (
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"github.com/tidegpu/tidegpu/internal/gateway/h1"
)

// Shared header values; the transport only reads outbound headers.
var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
	emptyValue = []string{""}
)

// isHopHeader reports whether the canonical key k is a hop-by-hop header of
// RFC 9110 section 7.6.1 (or an obsolete one proxies still see): it
// describes one connection and is not forwarded.
func isHopHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// removeListedHeaders deletes from h the headers named in conn, the values
// of a Connection header (they are hop-by-hop too).
func removeListedHeaders(h http.Header, conn []string) {
	for _, f := range conn {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
}

// namedIn reports whether the values of a Connection header, conn, name
// the canonical key k. A field name is a token, and two tokens name the
// same field when they are equal but for ASCII case (RFC 9110, 5.1), which
// asciiEqualFold tells without making the token canonical (an allocation
// for each field of each answer, "keep-alive" being the usual token).
func namedIn(conn []string, k string) bool {
	for _, v := range conn {
		for t := range strings.SplitSeq(v, ",") {
			if t = textproto.TrimString(t); t != "" && asciiEqualFold(t, k) {
				return true
			}
		}
	}
	return false
}

// asciiEqualFold is strings.EqualFold for ASCII letters only: a token
// with the Kelvin sign does not name Keep-Alive.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x|0x20 != y|0x20 || x|0x20 < 'a' || x|0x20 > 'z' {
			return false
		}
	}
	return true
}

// containsToken reports whether a comma-separated header value list holds
// token, case-insensitively.
func containsToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if t, _, _ = strings.Cut(t, ";"); strings.EqualFold(textproto.TrimString(t), token) {
				return true
			}
		}
	}
	return false
}

// outboundHeader returns the headers of the request to send to a backend:
// the client's, without hop-by-hop headers and Expect (the body is already
// read), with X-Forwarded-For/-Host/-Proto. The same map serves every
// attempt and is never written after this.
//
// The map is new, but its values are the client's slices, not copies:
// while the request is served neither the client's request nor this map
// has a value slice written in place (a header is replaced or deleted as a
// whole), and the backend clients only read them. That saves
// http.Header.Clone's copy of every value. The h1 server writes the array
// of those values again for the connection's next request once the
// handler has returned: a client that may still read them then must have
// copies (ownValues).
//
// Upgrades (WebSocket) are not proxied: without Connection and Upgrade the
// backend answers the request as a plain one.
func outboundHeader(r *http.Request) http.Header {
	// Room for the X-Forwarded-* headers and User-Agent.
	h := make(http.Header, len(r.Header)+4)
	for k, vv := range r.Header {
		// Skipped here rather than deleted after the copy: nine deletes
		// of absent keys cost more than the copy.
		if !isHopHeader(k) && k != "Expect" {
			h[k] = vv
		}
	}
	removeListedHeaders(h, r.Header["Connection"])
	if containsToken(r.Header["Te"], "trailers") {
		h["Te"] = []string{"trailers"}
	}
	// One allocation for the values of X-Forwarded-For and -Host.
	var added *[2]string
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		prior, present := h["X-Forwarded-For"]
		// A nil value, set by a trusted middleware, means "do not add".
		if !present || prior != nil {
			if len(prior) > 0 {
				ip = strings.Join(prior, ", ") + ", " + ip
			}
			added = &[2]string{0: ip}
			h["X-Forwarded-For"] = added[0:1:1]
		}
	}
	if _, ok := h["X-Forwarded-Host"]; !ok && r.Host != "" {
		if added == nil {
			added = new([2]string)
		}
		added[1] = r.Host
		h["X-Forwarded-Host"] = added[1:2:2]
	}
	if _, ok := h["X-Forwarded-Proto"]; !ok {
		h["X-Forwarded-Proto"] = protoHTTP
		if r.TLS != nil {
			h["X-Forwarded-Proto"] = protoHTTPS
		}
	}
	// Do not let the transport add Go's default User-Agent.
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = emptyValue
	}
	return h
}

// shapeOutbound readies e as the h1 client's h1.Outbound: the header
// outboundHeader would build, without building it. The client's header is
// sent on but for the fields SkipField names; ExtraFields adds Te:
// trailers, X-Forwarded-For, -Host and -Proto as outboundHeader sets them.
// (No User-Agent is needed: the h1 client adds none of its own.)
func (e *exchange) shapeOutbound() {
	r := e.r
	e.outConn = r.Header["Connection"] // read once: listed asks for every field
	add := func(k, v string) {
		e.outExtra[e.outN] = h1.Field{Name: k, Value: v}
		e.outN++
	}
	if containsToken(r.Header["Te"], "trailers") {
		add("Te", "trailers")
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		prior, present := r.Header["X-Forwarded-For"]
		if present && e.listed("X-Forwarded-For") {
			prior, present = nil, false
		}
		// A nil value, set by a trusted middleware, means "do not add".
		if !present || prior != nil {
			if len(prior) > 0 {
				ip = strings.Join(prior, ", ") + ", " + ip
			}
			add("X-Forwarded-For", ip)
			e.outOwnXFF = true
		}
	}
	if !e.present("X-Forwarded-Host") && r.Host != "" {
		add("X-Forwarded-Host", r.Host)
	}
	if !e.present("X-Forwarded-Proto") {
		if r.TLS != nil {
			add("X-Forwarded-Proto", "https")
		} else {
			add("X-Forwarded-Proto", "http")
		}
	}
}

// present reports whether the client's header has k and sends it on.
func (e *exchange) present(k string) bool {
	_, ok := e.r.Header[k]
	return ok && !e.listed(k)
}

// listed reports whether the client's Connection field names k.
func (e *exchange) listed(k string) bool { return namedIn(e.outConn, k) }

// SkipField implements h1.Outbound: the fields outboundHeader leaves out.
func (e *exchange) SkipField(k string) bool {
	return isHopHeader(k) || k == "Expect" || (k == "X-Forwarded-For" && e.outOwnXFF) || e.listed(k)
}

// ExtraFields implements h1.Outbound.
func (e *exchange) ExtraFields() h1.Fields { return e.outExtra[:e.outN] }

// ownValues replaces h's value slices with copies, in one array: for a
// Transport, which may write the request after RoundTrip returned (net/http's
// does when the answer comes first), while the h1 server already reads the
// client connection's next request into the array the values share.
func ownValues(h http.Header) {
	n := 0
	for _, vv := range h {
		n += len(vv)
	}
	all := make([]string, 0, n)
	for k, vv := range h {
		if vv == nil {
			continue // a nil X-Forwarded-For stays nil (outboundHeader)
		}
		start := len(all)
		all = append(all, vv...)
		h[k] = all[start:len(all):len(all)]
	}
}

// passable drops from f, in place, the hop-by-hop fields (isHopHeader's
// and the names its Connection fields list) and the backend's own
// BackendHeader: the gateway's names the backend that answered.
func passable(f h1.Fields) h1.Fields {
	var conn []string
	for _, x := range f {
		if x.Name == "Connection" {
			conn = append(conn, x.Value)
		}
	}
	return slices.DeleteFunc(f, func(x h1.Field) bool {
		return isHopHeader(x.Name) || namedIn(conn, x.Name) || x.Name == BackendHeader
	})
}
