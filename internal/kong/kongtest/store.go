package kongtest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// kind names an entity collection.
type kind string

const (
	kindUpstream kind = "upstreams"
	kindService  kind = "services"
	kindRoute    kind = "routes"
	kindTarget   kind = "targets"
)

// entity is one stored entity as Kong would answer it.
type entity = map[string]any

// store holds the entities; guarded by Server.mu.
type store struct {
	seq  int64
	ents map[kind]map[string]entity // kind → id → entity
	ord  map[string]int64           // id → creation sequence
}

func newStore() *store {
	return &store{
		ents: map[kind]map[string]entity{
			kindUpstream: {}, kindService: {}, kindRoute: {}, kindTarget: {},
		},
		ord: map[string]int64{},
	}
}

var uuidRe = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// endpointKey is the field an entity may be addressed by besides its id.
func endpointKey(k kind) string {
	if k == kindTarget {
		return "target"
	}
	return "name"
}

// find returns the entity of kind k with that id or endpoint key.
func (st *store) find(k kind, key string) entity {
	if uuidRe.MatchString(key) {
		if e, ok := st.ents[k][strings.ToLower(key)]; ok {
			return e
		}
		// Kong treats a UUID-shaped key as an id only.
		return nil
	}
	f := endpointKey(k)
	for _, e := range st.ents[k] {
		if s, _ := e[f].(string); s != "" && s == key {
			return e
		}
	}
	return nil
}

// sorted returns the entities of kind k ordered by id (Kong pages by
// primary key).
func (st *store) sorted(k kind) []entity {
	out := slices.Collect(maps.Values(st.ents[k]))
	slices.SortFunc(out, func(a, b entity) int { return strings.Compare(a["id"].(string), b["id"].(string)) })
	return out
}

func (st *store) insert(k kind, e entity) {
	st.seq++
	id := e["id"].(string)
	st.ord[id] = st.seq
	st.ents[k][id] = e
}

func (st *store) remove(k kind, id string) {
	delete(st.ents[k], id)
	delete(st.ord, id)
}

// clone deep-copies an entity so that answers never alias the store.
func clone(e entity) entity {
	b, _ := json.Marshal(e)
	var out entity
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	_ = d.Decode(&out)
	return out
}

// merge applies a PATCH body: nested objects are merged field by field,
// anything else (arrays included) replaces the old value.
func merge(dst, patch map[string]any) {
	for k, v := range patch {
		if pm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, pm)
				continue
			}
		}
		dst[k] = v
	}
}

// withDefaults fills the fields Kong fills on insert.
func withDefaults(k kind, in map[string]any) entity {
	now := time.Now().Unix()
	e := entity{"created_at": now, "updated_at": now, "tags": nil}
	switch k {
	case kindUpstream:
		maps.Copy(e, entity{
			"algorithm": "round-robin", "hash_on": "none", "hash_fallback": "none",
			"hash_on_cookie_path": "/", "slots": 10000, "host_header": nil,
			"client_certificate": nil, "use_srv_name": false,
			"healthchecks": defaultHealthchecks(),
		})
	case kindService:
		maps.Copy(e, entity{
			"protocol": "http", "port": 80, "path": nil, "retries": 5,
			"connect_timeout": 60000, "write_timeout": 60000, "read_timeout": 60000,
			"enabled": true, "name": nil,
		})
	case kindRoute:
		maps.Copy(e, entity{
			"name": nil, "protocols": []any{"http", "https"}, "methods": nil, "hosts": nil,
			"paths": nil, "headers": nil, "https_redirect_status_code": 426,
			"regex_priority": 0, "strip_path": true, "path_handling": "v0",
			"preserve_host": false, "request_buffering": true, "response_buffering": true,
			"service": nil,
		})
	case kindTarget:
		e["weight"] = 100
	}
	merge(e, in)
	if _, ok := e["id"]; !ok {
		e["id"] = newUUID()
	}
	return e
}

// defaultHealthchecks is the upstream schema's default record (all checks
// off: intervals and thresholds 0).
func defaultHealthchecks() map[string]any {
	return map[string]any{
		"threshold": 0,
		"active": map[string]any{
			"type": "http", "timeout": 1, "concurrency": 10, "http_path": "/",
			"https_verify_certificate": true, "https_sni": nil, "headers": nil,
			"healthy": map[string]any{
				"interval": 0, "successes": 0, "http_statuses": []any{200, 302},
			},
			"unhealthy": map[string]any{
				"interval": 0, "tcp_failures": 0, "timeouts": 0, "http_failures": 0,
				"http_statuses": []any{429, 404, 500, 501, 502, 503, 504, 505},
			},
		},
		"passive": map[string]any{
			"type": "http",
			"healthy": map[string]any{
				"successes": 0,
				"http_statuses": []any{200, 201, 202, 203, 204, 205, 206, 207, 208, 226,
					300, 301, 302, 303, 304, 305, 306, 307, 308},
			},
			"unhealthy": map[string]any{
				"tcp_failures": 0, "timeouts": 0, "http_failures": 0,
				"http_statuses": []any{429, 500, 503},
			},
		},
	}
}

var (
	nameRe     = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)
	hostnameRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?)*$`)
	tagFilter  = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)
)

// asInt reads a JSON number that must be an integer.
func asInt(v any) (int, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := strconv.Atoi(n.String())
		return i, err == nil
	case int:
		return n, true
	case int64:
		return int(n), true
	case float64:
		return int(n), float64(int(n)) == n
	}
	return 0, false
}

func asNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// validTag is Kong's tag check: printable ASCII except ',' and '/', or UTF-8.
func validTag(t string) bool {
	if t == "" {
		return false
	}
	for _, r := range t {
		if r == ',' || r == '/' || (r < 0x80 && (r < 0x20 || r == 0x7f)) {
			return false
		}
	}
	return true
}

// validate checks an entity against the parts of Kong's schema the fake
// models.
func (st *store) validate(k kind, e entity) *apiError {
	if tags, ok := e["tags"]; ok && tags != nil {
		arr, ok := tags.([]any)
		if !ok {
			return schemaViolation("tags", "expected a set")
		}
		for _, t := range arr {
			s, ok := t.(string)
			if !ok || !validTag(s) {
				return schemaViolation("tags", fmt.Sprintf("invalid tag '%v': expected printable ascii (except `,` and `/`) or valid utf-8 sequences", t))
			}
		}
	}
	switch k {
	case kindUpstream:
		name, _ := e["name"].(string)
		if name == "" {
			return schemaViolation("name", "required field missing")
		}
		if !hostnameRe.MatchString(name) || net.ParseIP(name) != nil {
			return schemaViolation("name", "Invalid name ('"+name+"'); must be a valid hostname")
		}
		return validateHealthchecks(e["healthchecks"])
	case kindService:
		host, _ := e["host"].(string)
		if host == "" {
			return schemaViolation("host", "required field missing")
		}
		if n, ok := e["name"].(string); ok && !nameRe.MatchString(n) {
			return schemaViolation("name", "invalid value '"+n+"': it must only contain alphanumeric and '., -, _, ~' characters")
		}
		switch e["protocol"] {
		case "http", "https", "grpc", "grpcs", "tcp", "tls", "udp", "ws", "wss", "tls_passthrough":
		default:
			return schemaViolation("protocol", "expected one of: grpc, grpcs, http, https, tcp, tls, tls_passthrough, udp, ws, wss")
		}
		if p, ok := e["path"].(string); ok && !strings.HasPrefix(p, "/") {
			return schemaViolation("path", "should start with: /")
		}
		for _, f := range []string{"port", "connect_timeout", "read_timeout", "write_timeout", "retries"} {
			if _, ok := asInt(e[f]); !ok {
				return schemaViolation(f, "expected an integer")
			}
		}
	case kindRoute:
		if n, ok := e["name"].(string); ok && !nameRe.MatchString(n) {
			return schemaViolation("name", "invalid value '"+n+"': it must only contain alphanumeric and '., -, _, ~' characters")
		}
		paths, _ := e["paths"].([]any)
		if len(paths) == 0 && e["hosts"] == nil && e["methods"] == nil && e["headers"] == nil {
			return schemaViolation("@entity", "must set one of 'methods', 'hosts', 'headers', 'paths' when 'protocols' is 'http'")
		}
		for _, p := range paths {
			s, _ := p.(string)
			if !strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "~/") {
				return schemaViolation("paths", "should start with: / (fixed path) or ~/ (regex path)")
			}
		}
		if svc := e["service"]; svc != nil {
			ref, ok := svc.(map[string]any)
			if !ok {
				return schemaViolation("service", "expected a record")
			}
			var found entity
			if id, _ := ref["id"].(string); id != "" {
				found = st.ents[kindService][strings.ToLower(id)]
			} else if n, _ := ref["name"].(string); n != "" {
				found = st.find(kindService, n)
			}
			if found == nil {
				b, _ := json.Marshal(ref)
				return foreignKeyViolation("the foreign key '" + string(b) + "' does not reference an existing 'services' entity.")
			}
			e["service"] = map[string]any{"id": found["id"]}
		}
	case kindTarget:
		t, _ := e["target"].(string)
		if t == "" {
			return schemaViolation("target", "required field missing")
		}
		norm, ok := normalizeTarget(t)
		if !ok {
			return schemaViolation("target", "Invalid target ('"+t+"'); not a valid hostname or ip address")
		}
		e["target"] = norm
		w, ok := asInt(e["weight"])
		if !ok || w < 0 || w > 65535 {
			return schemaViolation("weight", "value should be between 0 and 65535")
		}
	}
	return nil
}

func validateHealthchecks(v any) *apiError {
	hc, ok := v.(map[string]any)
	if !ok {
		return schemaViolation("healthchecks", "expected a record")
	}
	for _, mode := range []string{"active", "passive"} {
		m, ok := hc[mode].(map[string]any)
		if !ok {
			return schemaViolation("healthchecks."+mode, "expected a record")
		}
		switch m["type"] {
		case "http", "https", "tcp", "grpc", "grpcs":
		default:
			return schemaViolation("healthchecks."+mode+".type", "expected one of: tcp, http, https, grpc, grpcs")
		}
		if mode == "active" {
			if p, _ := m["http_path"].(string); !strings.HasPrefix(p, "/") {
				return schemaViolation("healthchecks.active.http_path", "should start with: /")
			}
			if t, ok := asNumber(m["timeout"]); !ok || t < 0 || t > 65535 {
				return schemaViolation("healthchecks.active.timeout", "value should be between 0 and 65535")
			}
		}
		for _, state := range []string{"healthy", "unhealthy"} {
			s, ok := m[state].(map[string]any)
			if !ok {
				return schemaViolation("healthchecks."+mode+"."+state, "expected a record")
			}
			for f, val := range s {
				path := "healthchecks." + mode + "." + state + "." + f
				switch f {
				case "interval":
					if n, ok := asNumber(val); !ok || n < 0 || n > 65535 {
						return schemaViolation(path, "value should be between 0 and 65535")
					}
				case "successes", "tcp_failures", "timeouts", "http_failures":
					if n, ok := asInt(val); !ok || n < 0 || n > 255 {
						return schemaViolation(path, "value should be between 0 and 255")
					}
				case "http_statuses":
					arr, ok := val.([]any)
					if !ok {
						return schemaViolation(path, "expected an array")
					}
					for _, x := range arr {
						if n, ok := asInt(x); !ok || n < 100 || n > 999 {
							return schemaViolation(path, "value should be between 100 and 999")
						}
					}
				default:
					return schemaViolation(path, "unknown field")
				}
			}
		}
	}
	return nil
}

// normalizeTarget formats host[:port] as Kong stores it: port 8000 when
// missing, IPv6 in brackets.
func normalizeTarget(t string) (string, bool) {
	host, port, err := net.SplitHostPort(t)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(t, "["), "]"), "8000"
	}
	if host == "" {
		return "", false
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return "", false
	}
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	} else if !hostnameRe.MatchString(host) {
		return "", false
	}
	return net.JoinHostPort(host, port), true
}

// uniqueConflict returns the 409 for e when another entity holds its
// unique key.
func (st *store) uniqueConflict(k kind, e entity) *apiError {
	id := e["id"].(string)
	switch k {
	case kindTarget:
		up := e["upstream"].(map[string]any)["id"]
		for oid, o := range st.ents[kindTarget] {
			if oid != id && o["upstream"].(map[string]any)["id"] == up && o["target"] == e["target"] {
				return uniqueViolation(map[string]any{"target": e["target"], "upstream": map[string]any{"id": up}})
			}
		}
	default:
		name, ok := e["name"].(string)
		if !ok {
			return nil
		}
		for oid, o := range st.ents[k] {
			if oid != id && o["name"] == name {
				return uniqueViolation(map[string]any{"name": name})
			}
		}
	}
	return nil
}

// stripReadOnly drops fields a client may not set.
func stripReadOnly(m map[string]any) {
	delete(m, "created_at")
	delete(m, "updated_at")
}

func (s *Server) create(k kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, aerr := decodeBody(r)
		if aerr != nil {
			writeErr(w, aerr)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		e, aerr := s.insertLocked(k, body)
		if aerr != nil {
			writeErr(w, aerr)
			return
		}
		writeJSON(w, http.StatusCreated, clone(e))
	}
}

func (s *Server) insertLocked(k kind, body map[string]any) (entity, *apiError) {
	stripReadOnly(body)
	if id, ok := body["id"].(string); ok {
		if !uuidRe.MatchString(id) {
			return nil, schemaViolation("id", "expected a valid UUID")
		}
		if s.st.ents[k][strings.ToLower(id)] != nil {
			return nil, &apiError{http.StatusBadRequest, map[string]any{"code": 3, "name": "primary key violation",
				"message": "primary key violation on key '{id=\"" + id + "\"}'"}}
		}
		body["id"] = strings.ToLower(id)
	}
	e := withDefaults(k, body)
	if aerr := s.st.validate(k, e); aerr != nil {
		return nil, aerr
	}
	if aerr := s.st.uniqueConflict(k, e); aerr != nil {
		return nil, aerr
	}
	s.st.insert(k, e)
	return e, nil
}

func (s *Server) get(k kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		e := s.st.find(k, r.PathValue("key"))
		if e == nil {
			writeErr(w, notFound())
			return
		}
		writeJSON(w, http.StatusOK, clone(e))
	}
}

func (s *Server) patch(k kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, aerr := decodeBody(r)
		if aerr != nil {
			writeErr(w, aerr)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		e := s.st.find(k, r.PathValue("key"))
		if e == nil {
			writeErr(w, notFound())
			return
		}
		writeUpdate(w, s.st, k, e, body, false)
	}
}

// writeUpdate applies a PATCH (merge) or PUT (replace) to e and answers.
func writeUpdate(w http.ResponseWriter, st *store, k kind, e entity, body map[string]any, replace bool) {
	stripReadOnly(body)
	delete(body, "id")
	var next entity
	if replace {
		keep := entity{"id": e["id"], "created_at": e["created_at"]}
		if k == kindTarget {
			keep["upstream"] = e["upstream"]
		}
		if f := endpointKey(k); body[f] == nil {
			keep[f] = e[f]
		}
		merge(keep, body)
		next = withDefaults(k, keep)
	} else {
		next = clone(e)
		merge(next, body)
	}
	next["updated_at"] = time.Now().Unix()
	if aerr := st.validate(k, next); aerr != nil {
		writeErr(w, aerr)
		return
	}
	if aerr := st.uniqueConflict(k, next); aerr != nil {
		writeErr(w, aerr)
		return
	}
	st.ents[k][e["id"].(string)] = next
	writeJSON(w, http.StatusOK, clone(next))
}

// put upserts the entity named by the path: an id, or the endpoint key.
func (s *Server) put(k kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, aerr := decodeBody(r)
		if aerr != nil {
			writeErr(w, aerr)
			return
		}
		key := r.PathValue("key")
		s.mu.Lock()
		defer s.mu.Unlock()
		if e := s.st.find(k, key); e != nil {
			writeUpdate(w, s.st, k, e, body, true)
			return
		}
		if uuidRe.MatchString(key) {
			body["id"] = key
		} else {
			body[endpointKey(k)] = key
		}
		e, aerr := s.insertLocked(k, body)
		if aerr != nil {
			writeErr(w, aerr)
			return
		}
		writeJSON(w, http.StatusOK, clone(e))
	}
}

// del deletes by id or name; Kong answers 204 even when nothing matched.
func (s *Server) del(k kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		e := s.st.find(k, r.PathValue("key"))
		if e == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		id := e["id"].(string)
		switch k {
		case kindService:
			for _, rt := range s.st.ents[kindRoute] {
				if ref, ok := rt["service"].(map[string]any); ok && ref["id"] == id {
					writeErr(w, foreignKeyViolation("an existing 'routes' entity references this 'services' entity"))
					return
				}
			}
		case kindUpstream: // targets cascade with their upstream
			for tid, t := range s.st.ents[kindTarget] {
				if t["upstream"].(map[string]any)["id"] == id {
					s.st.remove(kindTarget, tid)
				}
			}
		}
		s.st.remove(k, id)
		w.WriteHeader(http.StatusNoContent)
	}
}

// tagMatcher parses ?tags= as Kong does: "a,b" means all of them, "a/b"
// any of them; other syntax is a 400.
func tagMatcher(q url.Values) (func(entity) bool, error) {
	v := q.Get("tags")
	if v == "" {
		return func(entity) bool { return true }, nil
	}
	and := !strings.Contains(v, "/")
	var parts []string
	if and {
		parts = strings.Split(v, ",")
	} else {
		if strings.Contains(v, ",") {
			return nil, errTagSyntax
		}
		parts = strings.Split(v, "/")
	}
	for _, p := range parts {
		if !tagFilter.MatchString(p) {
			return nil, errTagSyntax
		}
	}
	return func(e entity) bool {
		have := map[string]bool{}
		arr, _ := e["tags"].([]any)
		for _, t := range arr {
			if s, ok := t.(string); ok {
				have[s] = true
			}
		}
		for _, p := range parts {
			if have[p] != and {
				return !and
			}
		}
		return and
	}, nil
}

// listRoot serves GET /{entities}: ordered by id, opaque base64 offset,
// tags filter, and a "next" link that keeps the tags (kong/api/endpoints.lua).
func (s *Server) listRoot(k kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		s.mu.Lock()
		defer s.mu.Unlock()
		match, err := tagMatcher(q)
		if err != nil {
			writeErr(w, &apiError{http.StatusBadRequest, map[string]any{"code": 11, "name": "invalid options",
				"message": "invalid option (tags: invalid filter syntax)"}})
			return
		}
		var all []entity
		for _, e := range s.st.sorted(k) {
			if match(e) {
				all = append(all, e)
			}
		}
		s.writePage(w, q, all, "/"+string(k), q.Get("tags"))
	}
}

// writePage answers one page of all (already ordered) with an opaque
// offset: base64 of the JSON array holding the last id served.
func (s *Server) writePage(w http.ResponseWriter, q url.Values, all []entity, path, tags string) {
	size, aerr := pageSize(q)
	if aerr != nil {
		writeErr(w, aerr)
		return
	}
	size = min(size, s.pageLimit)
	start := 0
	if off := q.Get("offset"); off != "" {
		var last []string
		b, err := base64.StdEncoding.DecodeString(off)
		if err == nil {
			err = json.Unmarshal(b, &last)
		}
		if err != nil || len(last) != 1 {
			writeErr(w, &apiError{http.StatusBadRequest, map[string]any{"code": 7, "name": "invalid offset",
				"message": "'" + off + "' is not a valid offset: bad base64 encoding"}})
			return
		}
		start = len(all)
		for i, e := range all {
			if e["id"].(string) > last[0] {
				start = i
				break
			}
		}
	}
	end := min(start+size, len(all))
	data := make([]any, 0, end-start)
	for _, e := range all[start:end] {
		data = append(data, clone(e))
	}
	out := map[string]any{"data": data, "next": nil}
	if end < len(all) {
		b, _ := json.Marshal([]string{all[end-1]["id"].(string)})
		off := base64.StdEncoding.EncodeToString(b)
		next := path + "?offset=" + url.QueryEscape(off)
		if tags != "" {
			next += "&tags=" + tags
		}
		out["offset"], out["next"] = off, next
	}
	writeJSON(w, http.StatusOK, out)
}

// upstreamOf resolves the {key} path value to an upstream.
func (s *Server) upstreamOf(r *http.Request) entity {
	return s.st.find(kindUpstream, r.PathValue("key"))
}

// listTargets serves GET /upstreams/{u}/targets as kong/db/dao/targets.lua
// pages them: newest first, numeric offset, size clamped to the maximum,
// tags ignored (a foreign-key endpoint), "next" without size or tags.
func (s *Server) listTargets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	up := s.upstreamOf(r)
	if up == nil {
		writeErr(w, notFound())
		return
	}
	size := 100
	if v := q.Get("size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeErr(w, &apiError{http.StatusBadRequest, map[string]any{"code": 9, "name": "invalid size", "message": "size must be a number"}})
			return
		}
		size = n
	}
	size = min(size, 1000, s.pageLimit)
	offset := 0
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeErr(w, &apiError{http.StatusBadRequest, map[string]any{"code": 7, "name": "invalid offset",
				"message": "'" + v + "' is not a valid offset"}})
			return
		}
		offset = n
	}
	all := s.targetsOfLocked(up["id"].(string))
	slices.Reverse(all) // newest first
	start := min(offset, len(all))
	end := min(start+size, len(all))
	data := make([]any, 0, end-start)
	for _, e := range all[start:end] {
		data = append(data, clone(e))
	}
	out := map[string]any{"data": data, "next": nil}
	if end < len(all) {
		off := strconv.Itoa(end)
		out["offset"] = off
		out["next"] = "/upstreams/" + r.PathValue("key") + "/targets?offset=" + off
	}
	writeJSON(w, http.StatusOK, out)
}

// targetsOfLocked returns the upstream's targets oldest first.
func (s *Server) targetsOfLocked(upID string) []entity {
	var out []entity
	for _, t := range s.st.ents[kindTarget] {
		if t["upstream"].(map[string]any)["id"] == upID {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b entity) int {
		return int(s.st.ord[a["id"].(string)] - s.st.ord[b["id"].(string)])
	})
	return out
}

// findTarget finds an upstream's target by id or host:port.
func (s *Server) findTarget(upID, key string) entity {
	norm, _ := normalizeTarget(key)
	for _, t := range s.targetsOfLocked(upID) {
		if t["id"] == strings.ToLower(key) || t["target"] == key || (norm != "" && t["target"] == norm) {
			return t
		}
	}
	return nil
}

func (s *Server) createTarget(w http.ResponseWriter, r *http.Request) {
	body, aerr := decodeBody(r)
	if aerr != nil {
		writeErr(w, aerr)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	up := s.upstreamOf(r)
	if up == nil {
		writeErr(w, notFound())
		return
	}
	body["upstream"] = map[string]any{"id": up["id"]}
	e, aerr := s.insertLocked(kindTarget, body)
	if aerr != nil {
		writeErr(w, aerr)
		return
	}
	writeJSON(w, http.StatusCreated, clone(e))
}

func (s *Server) getTarget(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	up := s.upstreamOf(r)
	if up == nil {
		writeErr(w, notFound())
		return
	}
	t := s.findTarget(up["id"].(string), r.PathValue("target"))
	if t == nil {
		writeErr(w, notFound())
		return
	}
	writeJSON(w, http.StatusOK, clone(t))
}

// updateTarget serves PATCH (merge) and PUT (replace). Both answer 404 for
// a target that does not exist (for PUT: Kong/kong#12987).
func (s *Server) updateTarget(replace bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, aerr := decodeBody(r)
		if aerr != nil {
			writeErr(w, aerr)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		up := s.upstreamOf(r)
		if up == nil {
			writeErr(w, notFound())
			return
		}
		t := s.findTarget(up["id"].(string), r.PathValue("target"))
		if t == nil {
			writeErr(w, notFound())
			return
		}
		delete(body, "upstream")
		writeUpdate(w, s.st, kindTarget, t, body, replace)
	}
}

func (s *Server) deleteTarget(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	up := s.upstreamOf(r)
	if up == nil {
		writeErr(w, notFound())
		return
	}
	t := s.findTarget(up["id"].(string), r.PathValue("target"))
	if t == nil {
		writeErr(w, notFound())
		return
	}
	s.st.remove(kindTarget, t["id"].(string))
	w.WriteHeader(http.StatusNoContent)
}

// listServiceRoutes serves GET /services/{s}/routes (tags ignored, as on
// every foreign-key endpoint).
func (s *Server) listServiceRoutes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	svc := s.st.find(kindService, r.PathValue("key"))
	if svc == nil {
		writeErr(w, notFound())
		return
	}
	var all []entity
	for _, rt := range s.st.sorted(kindRoute) {
		if ref, ok := rt["service"].(map[string]any); ok && ref["id"] == svc["id"] {
			all = append(all, rt)
		}
	}
	s.writePage(w, q, all, "/services/"+r.PathValue("key")+"/routes", "")
}

func (s *Server) createServiceRoute(w http.ResponseWriter, r *http.Request) {
	body, aerr := decodeBody(r)
	if aerr != nil {
		writeErr(w, aerr)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	svc := s.st.find(kindService, r.PathValue("key"))
	if svc == nil {
		writeErr(w, notFound())
		return
	}
	body["service"] = map[string]any{"id": svc["id"]}
	e, aerr := s.insertLocked(kindRoute, body)
	if aerr != nil {
		writeErr(w, aerr)
		return
	}
	writeJSON(w, http.StatusCreated, clone(e))
}
