package kong

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseListPage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		items   int
		offset  string
		wantErr string
	}{
		{"last page", `{"data":[{"id":"a"},{"id":"b"}],"next":null}`, 2, "", ""},
		{"offset field", `{"data":[{"id":"a"}],"offset":"WyJhIl0=","next":"/services?offset=WyJhIl0%3D"}`, 1, "WyJhIl0=", ""},
		{"offset from next only", `{"data":[{"id":"a"}],"next":"/upstreams/u/targets?offset=100"}`, 1, "100", ""},
		{"absolute next", `{"data":[],"next":"http://localhost:8001/routes?offset=abc&tags=x"}`, 0, "abc", ""},
		{"numeric offset", `{"data":[{"id":"a"}],"offset":100}`, 1, "100", ""},
		{"empty data object", `{"data":{},"next":null}`, 0, "", ""},
		{"null data", `{"data":null}`, 0, "", ""},
		{"no data", `{}`, 0, "", ""},
		{"next without offset", `{"data":[],"next":"/services?size=2"}`, 0, "", "has no offset"},
		{"data object with keys", `{"data":{"a":1}}`, 0, "", "not a list"},
		{"data string", `{"data":"x"}`, 0, "", "not a list"},
		{"item not object", `{"data":[1]}`, 0, "", "not an object"},
		{"offset bool", `{"data":[],"offset":true}`, 0, "", "offset"},
		{"not json", `<html>`, 0, "", "decoding"},
		{"array body", `[{"id":"a"}]`, 0, "", "decoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseListPage([]byte(tc.body))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error with %q, got %v (%+v)", tc.wantErr, err, p)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(p.Items) != tc.items || p.Offset != tc.offset {
				t.Fatalf("got %d items, offset %q; want %d, %q", len(p.Items), p.Offset, tc.items, tc.offset)
			}
		})
	}
}

func TestParseAPIError(t *testing.T) {
	long := strings.Repeat("é", 400)
	for _, tc := range []struct {
		name          string
		status        int
		body          string
		msg, errName  string
		errorHas      []string
		errorHasNot   []string
		unauth, confl bool
	}{
		{name: "unique", status: 409, body: `{"code":5,"name":"unique constraint violation","message":"UNIQUE violation detected on '{name=\"x\"}'"}`,
			msg: `UNIQUE violation detected on '{name="x"}'`, errName: "unique constraint violation", confl: true,
			errorHas: []string{"HTTP 409 Conflict", "POST /upstreams"}},
		{name: "not json", status: 502, body: "<html>bad gateway</html>", msg: "<html>bad gateway</html>",
			errorHas: []string{"HTTP 502 Bad Gateway"}},
		{name: "empty body", status: 503, body: "", msg: "Service Unavailable"},
		{name: "401", status: 401, body: `{"message":"Invalid credentials. Token or User credentials required"}`,
			msg: "Invalid credentials. Token or User credentials required", unauth: true,
			errorHas: []string{"authentication failed (HTTP 401)", "check the Kong admin token"}},
		{name: "403", status: 403, body: `{"message":"Forbidden"}`, msg: "Forbidden", unauth: true,
			errorHas: []string{"authentication failed (HTTP 403)"}},
		{name: "message object", status: 400, body: `{"message":{"name":"required"},"name":"schema violation"}`,
			msg: `{"name":"required"}`, errName: "schema violation"},
		{name: "long message truncated", status: 500, body: `{"message":"` + long + `"}`,
			errorHasNot: []string{long}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := parseAPIError("POST", "/upstreams", tc.status, []byte(tc.body))
			if tc.msg != "" && e.Message != tc.msg {
				t.Errorf("message %q, want %q", e.Message, tc.msg)
			}
			if len(e.Message) > maxMessage+len("…") {
				t.Errorf("message not bounded: %d bytes", len(e.Message))
			}
			if e.Name != tc.errName {
				t.Errorf("name %q, want %q", e.Name, tc.errName)
			}
			var err error = fmt.Errorf("wrapped: %w", e)
			if IsUnauthorized(err) != tc.unauth || IsConflict(err) != tc.confl || StatusOf(err) != tc.status {
				t.Errorf("helpers: unauth %v conflict %v status %d", IsUnauthorized(err), IsConflict(err), StatusOf(err))
			}
			for _, s := range tc.errorHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			for _, s := range tc.errorHasNot {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error contains %q", s)
				}
			}
		})
	}
}

func TestErrorHelpersOnOtherErrors(t *testing.T) {
	te := &TransportError{Method: "GET", Path: "/x", Err: errors.New("dial tcp: connection refused")}
	err := fmt.Errorf("syncing: %w", te)
	if !IsUnreachable(err) || IsNotFound(err) || StatusOf(err) != 0 {
		t.Fatalf("transport error classified wrong")
	}
	if IsUnreachable(errors.New("x")) || IsUnauthorized(nil) || IsBadAnswer(err) {
		t.Fatalf("plain errors classified wrong")
	}
	bad := fmt.Errorf("x: %w", &TransportError{Method: "GET", Path: "/x", Err: errors.New("not json"), BadAnswer: true})
	if !IsBadAnswer(bad) || IsUnreachable(bad) || !strings.Contains(bad.Error(), "bad answer") || strings.Contains(bad.Error(), "unreachable") {
		t.Fatalf("bad answer classified wrong: %v", bad)
	}
}

func TestHasTagsAndFilterable(t *testing.T) {
	for _, tc := range []struct {
		have, want []string
		ok         bool
	}{
		{nil, nil, true},
		{[]string{"a"}, nil, true},
		{[]string{"a", "b"}, []string{"b", "a"}, true},
		{[]string{"a"}, []string{"a", "b"}, false},
		{nil, []string{"a"}, false},
	} {
		if got := HasTags(tc.have, tc.want); got != tc.ok {
			t.Errorf("HasTags(%v, %v) = %v", tc.have, tc.want, got)
		}
	}
	for _, tc := range []struct {
		tags []string
		ok   bool
	}{
		{[]string{"tidegpu-managed", "tidegpu-pool~ns~p.1_x"}, true},
		{[]string{"a:b"}, false},
		{[]string{"a/b"}, false},
		{[]string{""}, false},
		{nil, true},
	} {
		if got := Filterable(tc.tags); got != tc.ok {
			t.Errorf("Filterable(%v) = %v", tc.tags, got)
		}
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc…"},
		{"ééé", 3, "é…"}, // never cuts inside a rune
		{"", 0, ""},
	} {
		if got := truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// FuzzParseListPage feeds the list parser arbitrary answers: it must never
// panic, and whatever it accepts must be a list of JSON objects.
func FuzzParseListPage(f *testing.F) {
	for _, s := range []string{
		`{"data":[{"id":"a"}],"next":null}`,
		`{"data":[],"offset":"WyJhIl0=","next":"/services?offset=WyJhIl0%3D"}`,
		`{"data":{},"next":"/upstreams/u/targets?offset=100"}`,
		`{"data":[{"id":"a"}],"offset":100}`,
		`{"next":"%zz"}`,
		`{"data":[1,2]}`,
		``, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ParseListPage(body)
		if err != nil {
			return
		}
		for i, it := range p.Items {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(it, &m); err != nil {
				t.Fatalf("accepted item %d that is not an object: %q", i, it)
			}
		}
	})
}
