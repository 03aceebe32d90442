package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestRequestModel(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
		ok   bool
	}{
		{"ollama chat", `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}]}`, "qwen2:0.5b", true},
		{"model after nested values", `{"messages":[{"model":"inner","content":"{\"model\":\"x\"}"}],"options":{"a":[1,{"b":null}]},"model":"m"}`, "m", true},
		{"whitespace", " \n{ \"model\" :\t\"m\" } ", "m", true},
		{"escaped value", `{"model":"a\"b\u00e9"}`, "a\"bé", true},
		{"escaped key", `{"mo\u0064el":"m"}`, "m", true},
		{"the last of repeated keys", `{"model":"a","model":"b"}`, "b", true},
		{"a later non-string model wins", `{"model":"a","model":1}`, "", false},
		{"numbers, literals", `{"n":-1.5e3,"t":true,"f":false,"z":null,"model":"m"}`, "m", true},
		{"no model", `{"prompt":"model"}`, "", false},
		{"empty object", `{}`, "", false},
		{"model not a string", `{"model":["a"]}`, "", false},
		{"not an object", `["model","m"]`, "", false},
		{"not JSON", `model=m`, "", false},
		{"empty", ``, "", false},
		{"cut short", `{"model":"m"`, "", false},
		{"cut short in a string", `{"model":"m`, "", false},
		{"cut short in a nested value", `{"a":{"b":[1,2`, "", false},
		{"trailing comma", `{"model":"m",}`, "", false},
		{"missing colon", `{"model" "m"}`, "", false},
		{"unescaped control character", "{\"model\":\"a\nb\"}", "", false},
		{"key Model is another key", `{"Model":"m"}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := requestModel([]byte(tt.body))
			if got != tt.want || ok != tt.ok {
				t.Fatalf("requestModel = %q %v, want %q %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// FuzzRequestModel checks the scanner against encoding/json on every valid
// JSON object: the same "model" (last one wins, invalid UTF-8 replaced).
func FuzzRequestModel(f *testing.F) {
	for _, s := range []string{
		`{"model":"m"}`, `{"a":[{"model":"x"}],"model":"y"}`, `{"model":"\ud800"}`,
		`{"model":"a","model":2}`, `{"mo\u0064el":"é"}`, `{}`, `[]`, `{"model":"\u00e9\n"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := requestModel(body) // must not panic on anything
		if !json.Valid(body) {
			return
		}
		var doc map[string]json.RawMessage
		if json.Unmarshal(body, &doc) != nil {
			if ok {
				t.Fatalf("found %q in a valid non-object %q", got, body)
			}
			return
		}
		var want string
		wantOK := json.Unmarshal(doc["model"], &want) == nil && len(doc["model"]) > 0 && doc["model"][0] == '"'
		if !wantOK {
			want = ""
		}
		if got != want || ok != wantOK {
			t.Fatalf("body %q: got %q %v, encoding/json says %q %v", body, got, ok, want, wantOK)
		}
	})
}

func TestSameModel(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"qwen2:0.5b", "qwen2:0.5b", true},
		{"llama3", "llama3:latest", true},
		{"llama3:latest", "llama3", true},
		{"llama3", "llama3:8b", false},
		{"a", "b", false},
		{"", ":latest", true},
	} {
		if got := sameModel(tt.a, tt.b); got != tt.want {
			t.Errorf("sameModel(%q, %q) = %v", tt.a, tt.b, got)
		}
	}
}

func postModel(t *testing.T, h *harness, model string, hdr ...string) string {
	t.Helper()
	body := `{"prompt":"hi"}`
	if model != "" {
		body = fmt.Sprintf(`{"model":%q,"prompt":"hi"}`, model)
	}
	resp, _ := h.do(t, http.MethodPost, "/api/generate", body, hdr...)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp.Header.Get(BackendHeader)
}

func TestModelAwareRouting(t *testing.T) {
	a := newBackend(t, "a", echoHandler("a"))
	b := newBackend(t, "b", echoHandler("b"))
	anyM := newBackend(t, "any", echoHandler("any"))
	h := newHarness(t, Options{Policy: PolicyRoundRobin})
	ba, bb := a.backend("p"), b.backend("p")
	ba.Models = []string{"llama3:latest", "qwen2:0.5b"}
	bb.Models = []string{"mistral"}
	h.g.SetBackends("p", []Backend{ba, bb})
	h.g.SetBackends("q", []Backend{anyM.backend("q")})

	count := func(model string, n int, hdr ...string) map[string]int {
		got := map[string]int{}
		for range n {
			got[postModel(t, h, model, hdr...)]++
		}
		return got
	}
	// A backend without Models serves every model.
	if got := count("llama3", 20); got["b"] != 0 || got["a"] == 0 || got["any"] == 0 {
		t.Errorf("llama3 (= llama3:latest): %v, want a and any, never b", got)
	}
	if got := count("mistral:latest", 20); got["a"] != 0 || got["b"] == 0 || got["any"] == 0 {
		t.Errorf("mistral: %v, want b and any, never a", got)
	}
	if got := count("llama3", 10, PoolHeader, "p"); got["a"] != 10 {
		t.Errorf("llama3 in pool p: %v, want all on a", got)
	}
	if got := count("phi3", 10); got["any"] != 10 {
		t.Errorf("phi3: %v, want all on the backend serving any model", got)
	}
	// A model no backend of the pool declares: not restricted.
	if got := count("phi3", 20, PoolHeader, "p"); got["a"] == 0 || got["b"] == 0 {
		t.Errorf("undeclared model in pool p: %v, want a and b used", got)
	}
	// No model in the body: not restricted.
	if got := count("", 30); got["a"] == 0 || got["b"] == 0 || got["any"] == 0 {
		t.Errorf("no model: %v, want all three used", got)
	}
	// In pool q, whose backend declares nothing, every model goes to it.
	if got := count("llama3", 5, PoolHeader, "q"); got["any"] != 5 {
		t.Errorf("pool q: %v", got)
	}

	// When the only backend of the model drains, requests for it wait and
	// fail rather than go to a backend without the model.
	ba.Draining = true
	h.g.SetBackends("p", []Backend{ba, bb})
	resp, _ := h.do(t, http.MethodPost, "/api/generate", `{"model":"llama3","prompt":"x"}`, PoolHeader, "p")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("model's only backend draining: status %d, want 503", resp.StatusCode)
	}
	// The published models can change under the same ID.
	ba.Draining, ba.Models = false, []string{"mistral"}
	h.g.SetBackends("p", []Backend{ba, bb})
	if got := count("mistral", 20, PoolHeader, "p"); got["a"] == 0 || got["b"] == 0 {
		t.Errorf("after a now serves mistral too: %v", got)
	}
	if s := status(t, h.g, "a"); strings.Join(s.Models, ",") != "mistral" {
		t.Errorf("BackendStatus.Models = %v", s.Models)
	}
}

func TestVersionSplit(t *testing.T) {
	var set []Backend
	for i, v := range []string{"v1", "v1", "v2"} {
		id := fmt.Sprintf("%s-%d", v, i)
		b := newBackend(t, id, echoHandler(id))
		be := b.backend("p")
		be.Models, be.Version = []string{"m"}, v
		set = append(set, be)
	}
	old := newBackend(t, "v0", echoHandler("v0"))
	bo := old.backend("p")
	bo.Models, bo.Version = []string{"m"}, "v0"
	set = append(set, bo)
	h := newHarness(t, Options{})
	h.g.SetBackends("p", set)
	h.g.SetVersionSplit("m", []VersionWeight{{"v1", 90}, {"v2", 10}})

	version := func(id string) string { return strings.SplitN(id, "-", 2)[0] }
	const n = 400
	got := map[string]int{}
	for range n {
		got[version(postModel(t, h, "m"))]++
	}
	if got["v0"] != 0 {
		t.Errorf("version outside the split got %d requests", got["v0"])
	}
	if got["v2"] < n*4/100 || got["v2"] > n*17/100 {
		t.Errorf("v2 got %d of %d, want about 10%%", got["v2"], n)
	}
	// A version with no candidate gives its share away.
	for i := range set {
		if set[i].Version == "v2" {
			set[i].Draining = true
		}
	}
	h.g.SetBackends("p", set)
	for range 50 {
		if v := version(postModel(t, h, "m")); v != "v1" {
			t.Fatalf("v2 draining, request went to %s", v)
		}
	}
	// No split version available at all: the split is ignored.
	h.g.SetVersionSplit("m", []VersionWeight{{"v9", 100}})
	got = map[string]int{}
	for range 40 {
		got[version(postModel(t, h, "m"))]++
	}
	// v0 is in no split: a request there shows the split is ignored. (Not
	// that v1 is used too: with every backend idle the policy may keep
	// picking the one it found cheapest, which flaked 1 run in 6.)
	if got["v0"] == 0 || got["v0"]+got["v1"] != 40 {
		t.Errorf("split without candidates: %v, want every request answered and v0 used", got)
	}
	// Removing the split.
	h.g.SetVersionSplit("m", nil)
	if len(h.g.VersionSplits()) != 0 {
		t.Errorf("splits left: %v", h.g.VersionSplits())
	}
	// The default split applies to a model without its own.
	h.g.SetVersionSplit("", []VersionWeight{{"v0", 1}})
	for range 20 {
		if v := version(postModel(t, h, "m")); v != "v0" {
			t.Fatalf("default split v0 only, request went to %s", v)
		}
	}
}

// stringRunNaive is stringRun byte by byte, as it is specified.
func stringRunNaive(b []byte, i int) int {
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
			return i
		}
	}
	return i
}

func TestStringRun(t *testing.T) {
	for _, tt := range []struct {
		in   string
		from int
		want int
	}{
		{"", 0, 0},
		{"abc", 0, 3},
		{`abc"`, 0, 3},
		{`abcdefgh"`, 0, 8},           // past one whole word
		{`abcdefghijklmnop"x`, 0, 16}, // past two
		{`abcdefg"ijklmnop`, 0, 7},    // the last byte of the first word
		{`"abcdefgh`, 0, 0},
		{`"abcdefgh"`, 1, 9},
		{`abcdefgh\n`, 0, 8},
		{"abcdefghij\x1fklmnop", 0, 10},
		{"abcdefghij\x20klmnop", 0, 17}, // a space is plain
		{"abcdefghij\x7fklmnop", 0, 17}, // DEL is plain in JSON
		{"abcdefghijé", 0, 10},
		{"abc!#$%&'()*+,-./0123456789:;<=>?@[]^_`{|}~xyz", 0, 46},
		{`abcdefgh`, 8, 8},
		{`abcdefgh"`, 9, 9},
	} {
		if got := stringRun([]byte(tt.in), tt.from); got != tt.want {
			t.Errorf("stringRun(%q, %d) = %d, want %d", tt.in, tt.from, got, tt.want)
		}
		if got := stringRunNaive([]byte(tt.in), tt.from); got != tt.want {
			t.Errorf("the table is wrong: %q from %d is %d byte by byte, want %d", tt.in, tt.from, got, tt.want)
		}
	}
}

// FuzzStringRun: stringRun finds what a scan byte by byte finds, from
// every start.
func FuzzStringRun(f *testing.F) {
	for _, s := range []string{"", "plain text, long enough for words", `a"b`, "x\\y", "\x00\x1f\x20\x7f\x80\xff", "汉字 and ascii"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i := 0; i <= len(b); i++ {
			if got, want := stringRun(b, i), stringRunNaive(b, i); got != want {
				t.Fatalf("stringRun(%q, %d) = %d, byte by byte %d", b, i, got, want)
			}
		}
	})
}

func TestSkipString(t *testing.T) {
	for _, tt := range []struct {
		in     string
		from   int
		want   int
		wantOK bool
	}{
		{`""`, 0, 2, true},
		{`"abc"`, 0, 5, true},
		{`"abc",`, 0, 5, true},
		{`"a\"b"`, 0, 6, true},   // an escaped quote is not the end
		{`"a\\"b"`, 0, 5, true},  // an escaped backslash, then the end
		{`"a\\\"b"`, 0, 8, true}, // three backslashes: the quote is escaped
		{`"\\"`, 0, 4, true},     // the run of backslashes starts after the opening quote
		{`"\"`, 0, 0, false},     // cut short after an escaped quote
		{`"abc`, 0, 0, false},    // no closing quote
		{`"`, 0, 0, false},       // only the opening quote
		{`x"long enough to cross a vector of thirty-two bytes \" and more"y`, 1, 64, true},
		{"\"a\x01b\"", 0, 5, true}, // control characters are not looked at
		{`{"k":"v"}`, 1, 4, true},
		{`{"k":"v"}`, 5, 8, true},
	} {
		got, ok := skipString([]byte(tt.in), tt.from)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("skipString(%q, %d) = %d, %v; want %d, %v", tt.in, tt.from, got, ok, tt.want, tt.wantOK)
		}
	}
}

// FuzzSkipString: skipString ends a string where scanString does, on any
// input without control characters (which scanString rejects and
// skipString does not look at).
func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"a\\"b"`, `"\\\\\"x"`, `"é\u00e9"`, `"`, `"\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range b {
			if c < 0x20 {
				return
			}
		}
		for i, c := range b {
			if c != '"' {
				continue
			}
			end, ok := skipString(b, i)
			wantEnd, _, wantOK := scanString(b, i)
			if end != wantEnd || ok != wantOK {
				t.Fatalf("skipString(%q, %d) = %d, %v; scanString: %d, %v", b, i, end, ok, wantEnd, wantOK)
			}
		}
	})
}
