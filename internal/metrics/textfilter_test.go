package metrics

import (
	"bytes"
	"net/url"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// simExposition is the shape of `tidegpu sim`'s /metrics: the families the
// gateway reads among others it does not.
const simExposition = `# HELP tidegpu_sim_gpu_utilization Simulated GPU utilization.
# TYPE tidegpu_sim_gpu_utilization gauge
tidegpu_sim_gpu_utilization 0.25
# HELP tidegpu_sim_info Information about the simulated backend; always 1.
# TYPE tidegpu_sim_info gauge
tidegpu_sim_info{instance_id="127.0.0.1:1"} 1
# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{model_name="m",le="0.1"} 1
vllm:e2e_request_latency_seconds_bucket{model_name="m",le="+Inf"} 2
vllm:e2e_request_latency_seconds_sum{model_name="m"} 1.5
vllm:e2e_request_latency_seconds_count{model_name="m"} 2
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 3
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 2
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.3
vllm:time_to_first_token_seconds_count{model_name="m"} 2
`

// simKept is what filterText keeps of simExposition for vLLM.
const simKept = `# HELP tidegpu_sim_gpu_utilization Simulated GPU utilization.
# TYPE tidegpu_sim_gpu_utilization gauge
tidegpu_sim_gpu_utilization 0.25
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 3
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 2
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.3
vllm:time_to_first_token_seconds_count{model_name="m"} 2
`

func TestFilterText(t *testing.T) {
	vllm := newFamilySet(wantedNames(FamilyVLLM))
	tests := []struct {
		name   string
		want   familySet
		in     string
		out    string
		bailed bool // ok false: the caller parses the whole body
	}{
		{name: "simulator exposition", want: vllm, in: simExposition, out: simKept},
		{name: "nothing wanted", want: vllm, in: "go_goroutines 3\n# TYPE go_gc gauge\ngo_gc 1\n", out: ""},
		{name: "empty", want: vllm, in: "", out: ""},
		{name: "blank lines and other comments go", want: vllm,
			in:  "\n  \n# a comment\n#\n# HELP\n# TYPE vllm:num_requests_waiting\nvllm:num_requests_waiting 1\n",
			out: "vllm:num_requests_waiting 1\n"},
		{name: "leading blanks and tabs, comment without a blank", want: vllm,
			in:  " \t#TYPE vllm:num_requests_waiting gauge\n\t vllm:num_requests_waiting 1\n",
			out: " \t#TYPE vllm:num_requests_waiting gauge\n\t vllm:num_requests_waiting 1\n"},
		{name: "a name that only starts like a wanted one", want: vllm,
			in: "vllm:num_requests_waiting_total 1\nvllm:num_requests_waitingX 2\nvllm:num_requests 3\n", out: ""},
		{name: "suffixes of a wanted gauge stay with it", want: vllm,
			in:  "vllm:num_requests_waiting_count 1\n",
			out: "vllm:num_requests_waiting_count 1\n"},
		{name: "a malformed line of another family goes", want: vllm,
			in:  "!!! 3\ngo_gc{ 1\n9lives 2\nvllm:num_requests_waiting 1\n",
			out: "vllm:num_requests_waiting 1\n"},
		{name: "a malformed line of a wanted family stays (and fails the parse)", want: vllm,
			in: "vllm:num_requests_waiting{ 2\n", out: "vllm:num_requests_waiting{ 2\n"},
		{name: "label values with escapes, hashes and braces", want: vllm,
			in:  "vllm:num_requests_waiting{model_name=\"a\\\"#b{c}\\n\"} 1\nother{x=\"vllm:num_requests_waiting\"} 2\n",
			out: "vllm:num_requests_waiting{model_name=\"a\\\"#b{c}\\n\"} 1\n"},
		{name: "last line without a newline", want: vllm,
			in:  "go_gc 1\nvllm:num_requests_waiting 1",
			out: "vllm:num_requests_waiting 1"},
		{name: "CRLF stays on the line", want: vllm,
			in:  "vllm:num_requests_waiting 1\r\ngo_gc 1\r\n",
			out: "vllm:num_requests_waiting 1\r\n"},
		{name: "quoted names", want: vllm,
			in:  "\"vllm:num_requests_waiting\" 1\n# TYPE \"vllm:num_requests_running\" gauge\n\"go.gc\" 2\n",
			out: "\"vllm:num_requests_waiting\" 1\n# TYPE \"vllm:num_requests_running\" gauge\n"},
		{name: "a quote inside a name joins its parts, as the parser reads it", want: vllm,
			in: "vllm:num_requests_\"waiting\" 1\n", out: "vllm:num_requests_\"waiting\" 1\n"},
		{name: "an escaped quote in a quoted name", want: newFamilySet([]string{"a\"b"}),
			in: "\"a\\\"b\" 1\n\"ab\" 2\n", out: "\"a\\\"b\" 1\n"},
		{name: "braces form of another family goes", want: vllm,
			in:  "{\"go.gc\",a=\"b\"} 1\n{a=\"b\",\"go.gc\"} 2\n{a=\"b\"} 3\n{} 4\nvllm:num_requests_waiting 1\n",
			out: "vllm:num_requests_waiting 1\n"},
		{name: "braces form of a wanted family: the whole body is parsed", want: vllm,
			in: "go_gc 1\n{\"vllm:num_requests_waiting\",a=\"b\"} 1\n", bailed: true},
		{name: "braces form with the name after a label", want: vllm,
			in: "{a=\"b\",vllm} 1\n", out: ""},
		{name: "a wanted name ending in _count keeps its base's summary", want: newFamilySet([]string{"x_count"}),
			in:  "# TYPE x summary\nx{quantile=\"0.5\"} 1\nx_sum 3\nx_count 2\ny 1\n",
			out: "# TYPE x summary\nx{quantile=\"0.5\"} 1\nx_sum 3\nx_count 2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := filterText([]byte("prefix:"), []byte(tt.in), tt.want)
			if ok == tt.bailed {
				t.Fatalf("ok %v, want %v", ok, !tt.bailed)
			}
			if !ok {
				if string(got) != "prefix:" {
					t.Errorf("dst %q after bailing out, want it as it was", got)
				}
				return
			}
			if string(got) != "prefix:"+tt.out {
				t.Errorf("kept\n%q\nwant\n%q", got, "prefix:"+tt.out)
			}
			// In place: the same lines.
			body := []byte(tt.in)
			inPlace, ok := filterText(body[:0], body, tt.want)
			if !ok || string(inPlace) != tt.out {
				t.Errorf("in place: %q, %v; want %q", inPlace, ok, tt.out)
			}
		})
	}
}

func TestNameToken(t *testing.T) {
	tests := []struct {
		in     string
		metric bool
		name   string
		rest   string
		ok     bool
	}{
		{in: "vllm:x{a", metric: true, name: "vllm:x", rest: "{a", ok: true},
		{in: "vllm:x{a", metric: false, name: "vllm", rest: ":x{a", ok: true},
		{in: "a1_b 2", metric: true, name: "a1_b", rest: " 2", ok: true},
		{in: "1a", metric: true, name: "", rest: "1a", ok: true},
		{in: `"a.b c" 1`, metric: true, name: "a.b c", rest: " 1", ok: true},
		{in: `"a\nb\\c\"" 1`, metric: true, name: "a\nb\\c\"", rest: " 1", ok: true},
		{in: `"a\tb" 1`, metric: true, ok: false},
		{in: "\"a\nb\" 1", metric: true, ok: false},
		{in: `"ab`, metric: true, ok: false},
		{in: "ab", metric: true, ok: false}, // the end of the input within the name
		{in: `a"b"c 1`, metric: true, name: "ab", rest: "c 1", ok: true},
	}
	for _, tt := range tests {
		name, rest, ok := nameToken([]byte(tt.in), tt.metric, nil)
		if ok != tt.ok || (ok && (string(name) != tt.name || string(rest) != tt.rest)) {
			t.Errorf("nameToken(%q, %v) = %q, %q, %v; want %q, %q, %v", tt.in, tt.metric, name, rest, ok, tt.name, tt.rest, tt.ok)
		}
	}
}

func TestBaseNameAndFamilySet(t *testing.T) {
	for in, want := range map[string]string{"a_bucket": "a", "a_sum": "a", "a_count": "a", "a_total": "a_total", "a": "a", "_count": ""} {
		if got := baseName(in); got != want {
			t.Errorf("baseName(%q) = %q, want %q", in, got, want)
		}
	}
	s := newFamilySet([]string{"h", "x_count", ""})
	for name, want := range map[string]bool{"h": true, "h_bucket": true, "h_sum": true, "h_count": true, "h_total": false,
		"x_count": true, "x": true, "x_sum": true, "x_count_count": true, "y": false, "": false} {
		if got := s.wants([]byte(name)); got != want {
			t.Errorf("wants(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestNameQuery(t *testing.T) {
	q, err := url.ParseQuery(nameQuery(FamilyVLLM))
	if err != nil {
		t.Fatal(err)
	}
	got := q["name[]"]
	want := []string{MetricGPUUtil, MetricQueueDepth, MetricRunning, MetricKVCacheUsage, MetricKVCacheUsageV0, MetricTTFT,
		MetricTTFT + "_bucket", MetricTTFT + "_sum", MetricTTFT + "_count"}
	if !slices.Equal(got, want) {
		t.Errorf("vLLM: name[] %q, want %q", got, want)
	}
	q, _ = url.ParseQuery(nameQuery(FamilyTGI))
	if got := q["name[]"]; !slices.Equal(got, []string{MetricGPUUtil, "tgi_queue_size", "tgi_batch_current_size"}) {
		t.Errorf("TGI: name[] %q", got)
	}
	// Detection asks for every family's names, each once.
	q, _ = url.ParseQuery(nameQuery(Family{}))
	got = q["name[]"]
	for _, f := range Families {
		for _, n := range f.names() {
			if !slices.Contains(got, n) {
				t.Errorf("auto: %s missing from %q", n, got)
			}
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(got)))) != len(got) {
		t.Errorf("auto: a name twice in %q", got)
	}
}

// TestParseSkipsOtherFamilies: a family the gateway does not read cannot
// break the reading of those it does, however malformed.
func TestParseSkipsOtherFamilies(t *testing.T) {
	body := "# TYPE go_gc_duration_seconds summary\ngo_gc_duration_seconds{quantile=\"x\"} 1\nweird{ 2\n" +
		"vllm:num_requests_waiting 2\n# TYPE go_gc_duration_seconds summary\n"
	m, _, err := ParseFamily([]byte(body), expfmt.NewFormat(expfmt.TypeTextPlain), Family{})
	if err != nil {
		t.Fatal(err)
	}
	if m.QueueDepth != 2 || m.Family != "vllm" {
		t.Errorf("%+v: want queue 2 of vllm", m)
	}
	if _, _, err := ParseFamily([]byte("vllm:num_requests_waiting 2x\n"), expfmt.NewFormat(expfmt.TypeTextPlain), Family{}); err == nil {
		t.Error("a malformed wanted line parsed")
	}
}

// FuzzFilterText checks the filter against expfmt's parser on the whole
// body: wherever the whole body parses, the filtered one parses too, to
// exactly the same families for every name kept (and to no family the
// whole body lacks); filtering in place keeps the same bytes; and the
// kept lines are lines of the body, in order.
func FuzzFilterText(f *testing.F) {
	for _, s := range []string{simExposition, vllmV1Exposition, sglangExposition, tgiExposition, llamacppExposition,
		"# TYPE x summary\nx{quantile=\"0.5\"} 1\nx_sum 3\nx_count 2\n",
		"# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 2\nh_sum 1\n# TYPE h_count gauge\nh_count 3\n",
		"{\"h_bucket\",le=\"1\"} 1\n\"x_count\" 1\nx\"_count\" 2\n",
		"h 1\n{a=\"b\",\"h\"} 2\n# TYPE h gauge\n",
		"# TYPE y summary\ny{quantile=\"0.5\"} 1\n{quantile=\"0.9\",\"h\"} 3\n",
	} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(2))
	}
	sets := []familySet{
		newFamilySet(wantedNames(Family{})),
		newFamilySet(wantedNames(FamilyVLLM)),
		newFamilySet([]string{"h", "x_count", "y_sum"}),
	}
	f.Fuzz(func(t *testing.T, body []byte, pick uint8) {
		want := sets[int(pick)%len(sets)]
		kept, ok := filterText(nil, body, want)
		if ok {
			assertSubsequence(t, body, kept)
			inPlace := bytes.Clone(body)
			if got, ok2 := filterText(inPlace[:0], inPlace, want); !ok2 || !bytes.Equal(got, kept) {
				t.Fatalf("in place %q, %v; appended %q", got, ok2, kept)
			}
		} else {
			kept = body
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		whole, err := p.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			return
		}
		q := expfmt.NewTextParser(model.LegacyValidation)
		part, err := q.TextToMetricFamilies(bytes.NewReader(kept))
		if err != nil {
			t.Fatalf("the whole body parses, the filtered one not: %v\nbody %q\nkept %q", err, body, kept)
		}
		for name, mf := range whole {
			if want.wants([]byte(name)) && !sameFamily(mf, part[name]) {
				t.Fatalf("family %q: whole %v, filtered %v\nbody %q\nkept %q", name, mf, part[name], body, kept)
			}
		}
		for name, mf := range part {
			if !sameFamily(mf, whole[name]) {
				t.Fatalf("family %q: filtered %v, whole %v\nbody %q\nkept %q", name, mf, whole[name], body, kept)
			}
		}
	})
}

// assertSubsequence fails unless kept is whole lines of body, in order.
func assertSubsequence(t *testing.T, body, kept []byte) {
	t.Helper()
	lines := strings.SplitAfter(string(body), "\n")
	for _, l := range strings.SplitAfter(string(kept), "\n") {
		if l == "" {
			continue
		}
		i := slices.Index(lines, l)
		if i < 0 {
			t.Fatalf("kept line %q is not a line of the body (in order)\nbody %q", l, body)
		}
		lines = lines[i+1:]
	}
}

// sameFamily reports whether two parsed families print the same in the
// text format (nil: absent).
func sameFamily(a, b *dto.MetricFamily) bool {
	if a == nil || b == nil {
		return a == b
	}
	var x, y bytes.Buffer
	_, errA := expfmt.MetricFamilyToText(&x, a)
	_, errB := expfmt.MetricFamilyToText(&y, b)
	return bytes.Equal(x.Bytes(), y.Bytes()) && (errA == nil) == (errB == nil) && a.GetType() == b.GetType()
}
