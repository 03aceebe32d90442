package kongtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// do sends one JSON request to the fake and decodes the answer.
func do(t *testing.T, s *Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func TestFakeFollowsTheDocs(t *testing.T) {
	s := New(t)
	for i := range 120 {
		tags := `"a"`
		if i%2 == 0 {
			tags = `"a","b"`
		}
		if st, m := do(t, s, "POST", "/services", fmt.Sprintf(`{"name":"s%03d","host":"h","tags":[%s]}`, i, tags)); st != 201 {
			t.Fatalf("create service: %d %v", st, m)
		}
	}
	steps := []struct {
		name, method, path, body string
		status                   int
		check                    func(map[string]any) string
	}{
		{"default page size 100", "GET", "/services", "", 200, func(m map[string]any) string {
			if n := len(m["data"].([]any)); n != 100 || m["next"] == nil || m["offset"] == nil {
				return fmt.Sprintf("%d items, next %v", n, m["next"])
			}
			return ""
		}},
		{"size above 1000", "GET", "/services?size=1001", "", 400, nil},
		{"size not a number", "GET", "/services?size=x", "", 400, nil},
		{"bad offset", "GET", "/services?offset=%25%25", "", 400, nil},
		{"tags AND keeps tags in next", "GET", "/services?tags=a,b&size=50", "", 200, func(m map[string]any) string {
			next, _ := m["next"].(string)
			if len(m["data"].([]any)) != 50 || !strings.Contains(next, "tags=a,b") {
				return fmt.Sprintf("next %q", next)
			}
			return ""
		}},
		{"tags OR", "GET", "/services?tags=b/zzz&size=1000", "", 200, func(m map[string]any) string {
			if n := len(m["data"].([]any)); n != 60 {
				return fmt.Sprintf("%d items, want 60", n)
			}
			return ""
		}},
		{"tags bad syntax", "GET", "/services?tags=a:b", "", 400, nil},
		{"unique name", "POST", "/services", `{"name":"s000","host":"h"}`, 409, func(m map[string]any) string {
			if fmt.Sprint(m["code"]) != "5" || m["name"] != "unique constraint violation" {
				return fmt.Sprint(m)
			}
			return ""
		}},
		{"missing host", "POST", "/services", `{"name":"zz"}`, 400, nil},
		{"get by name", "GET", "/services/s001", "", 200, nil},
		{"get missing", "GET", "/services/none", "", 404, func(m map[string]any) string {
			if m["message"] != "Not found" {
				return fmt.Sprint(m)
			}
			return ""
		}},
		{"upstream", "POST", "/upstreams", `{"name":"up"}`, 201, nil},
		{"target default port", "POST", "/upstreams/up/targets", `{"target":"10.0.0.1"}`, 201, func(m map[string]any) string {
			if m["target"] != "10.0.0.1:8000" || fmt.Sprint(m["weight"]) != "100" {
				return fmt.Sprint(m)
			}
			return ""
		}},
		{"target POST duplicate", "POST", "/upstreams/up/targets", `{"target":"10.0.0.1:8000","weight":5}`, 409, nil},
		{"target PATCH", "PATCH", "/upstreams/up/targets/10.0.0.1:8000", `{"weight":5}`, 200, nil},
		{"target PUT missing is 404", "PUT", "/upstreams/up/targets/10.0.0.2:80", `{"weight":5}`, 404, nil},
		{"target bad weight", "POST", "/upstreams/up/targets", `{"target":"10.0.0.3:80","weight":70000}`, 400, nil},
		{"delete upstream", "DELETE", "/upstreams/up", "", 204, nil},
		{"targets gone with it", "GET", "/upstreams/up/targets", "", 404, nil},
		{"delete missing is 204", "DELETE", "/upstreams/up", "", 204, nil},
	}
	for _, st := range steps {
		status, m := do(t, s, st.method, st.path, st.body)
		if status != st.status {
			t.Errorf("%s: status %d, want %d (%v)", st.name, status, st.status, m)
			continue
		}
		if st.check != nil {
			if msg := st.check(m); msg != "" {
				t.Errorf("%s: %s", st.name, msg)
			}
		}
	}
}

func TestFakeTargetsPageLikeKong(t *testing.T) {
	s := New(t)
	do(t, s, "POST", "/upstreams", `{"name":"up"}`)
	for i := range 5 {
		tags := `["mine"]`
		if i == 0 {
			tags = `["other"]`
		}
		do(t, s, "POST", "/upstreams/up/targets", fmt.Sprintf(`{"target":"10.0.0.%d:80","tags":%s}`, i+1, tags))
	}
	_, m := do(t, s, "GET", "/upstreams/up/targets?size=2&tags=mine", "")
	data := m["data"].([]any)
	if len(data) != 2 || data[0].(map[string]any)["target"] != "10.0.0.5:80" {
		t.Fatalf("want the 2 newest first, got %v", data)
	}
	if m["offset"] != "2" || m["next"] != "/upstreams/up/targets?offset=2" {
		t.Fatalf("numeric offset and a next link without size or tags: offset %v next %v", m["offset"], m["next"])
	}
	_, m = do(t, s, "GET", "/upstreams/up/targets?size=2&offset=4&tags=mine", "")
	data = m["data"].([]any)
	if len(data) != 1 || data[0].(map[string]any)["target"] != "10.0.0.1:80" || m["next"] != nil {
		t.Fatalf("last page: tags must be ignored on a nested list, got %v next %v", data, m["next"])
	}
}

func TestFakeFaultsAndLog(t *testing.T) {
	s := New(t)
	s.SetToken("tok")
	if st, m := do(t, s, "GET", "/upstreams", ""); st != 401 || !strings.Contains(fmt.Sprint(m["message"]), "Invalid credentials") {
		t.Fatalf("no token: %d %v", st, m)
	}
	s.SetToken("")
	s.Throttle(1)
	if st, _ := do(t, s, "GET", "/upstreams", ""); st != 429 {
		t.Fatalf("throttle: %d", st)
	}
	s.Inject(Fault{Method: "GET", PathPrefix: "/routes", Status: 502})
	if st, _ := do(t, s, "GET", "/routes", ""); st != 502 {
		t.Fatalf("fault: %d", st)
	}
	if st, _ := do(t, s, "GET", "/routes", ""); st != 502 {
		t.Fatalf("fault with Times 0 stays: %d", st)
	}
	s.ClearFaults()
	if st, _ := do(t, s, "GET", "/routes", ""); st != 200 {
		t.Fatalf("after ClearFaults: %d", st)
	}
	calls := s.Calls()
	if len(calls) != 5 || calls[0].Status != 401 || calls[1].Status != 429 || calls[4].Path != "/routes" {
		t.Fatalf("call log %+v", calls)
	}
	s.ResetCalls()
	if len(s.Calls()) != 0 {
		t.Fatalf("ResetCalls")
	}
}
