package ec2test

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/ec2query"
)

// post sends a raw Query request as the SDK would (form POST, SigV4
// Authorization header present) and returns status and body.
func post(t *testing.T, s *Server, form url.Values) (int, []byte) {
	t.Helper()
	if form.Get("Version") == "" {
		form.Set("Version", APIVersion)
	}
	req, err := http.NewRequest(http.MethodPost, s.URL, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKID/20260601/us-east-1/ec2/aws4_request")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func errorCodeOf(t *testing.T, body []byte) string {
	t.Helper()
	c, err := ec2query.GetErrorResponseComponents(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("error envelope %s: %v", body, err)
	}
	if c.RequestID == "" {
		t.Errorf("error without RequestID: %s", body)
	}
	return c.Code
}

func TestErrorsUseTheDocumentedEnvelopeAndStatus(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	run := url.Values{"Action": {"RunInstances"}, "ImageId": {"ami-1"}, "MinCount": {"1"}, "MaxCount": {"1"}, "InstanceType": {"g5.xlarge"}, "ClientToken": {"t1"}}

	cases := []struct {
		name   string
		setup  func()
		form   url.Values
		status int
		code   string
	}{
		{"unknown action", nil, url.Values{"Action": {"Frobnicate"}}, 400, CodeInvalidAction},
		{"bad version", nil, url.Values{"Action": {"DescribeInstances"}, "Version": {"2010-01-01"}}, 400, CodeNoSuchVersion},
		{"throttled", func() { s.ThrottleNext(1) }, url.Values{"Action": {"DescribeInstances"}}, 503, CodeRequestLimitExceeded},
		{"ICE is a server error", func() { s.SetICE("", "g5.xlarge", "", "") }, run, 500, CodeInsufficientInstanceCapacity},
		{"Unsupported is a client error", func() { s.ClearICE(); s.SetICE("", "g5.xlarge", "", "Unsupported") }, run, 400, "Unsupported"},
		{"missing image", func() { s.ClearICE() }, url.Values{"Action": {"RunInstances"}, "MinCount": {"1"}, "MaxCount": {"1"}}, 400, CodeMissingParameter},
		{"page too small", nil, url.Values{"Action": {"DescribeInstances"}, "MaxResults": {"4"}}, 400, CodeInvalidParameterValue},
		{"page with ids", nil, url.Values{"Action": {"DescribeInstances"}, "MaxResults": {"5"}, "InstanceId.1": {"i-0123456789abcdef0"}}, 400, CodeInvalidParameterCombination},
		{"unknown filter", nil, url.Values{"Action": {"DescribeInstances"}, "Filter.1.Name": {"colour"}, "Filter.1.Value.1": {"red"}}, 400, CodeInvalidParameterValue},
		{"terminate unknown", nil, url.Values{"Action": {"TerminateInstances"}, "InstanceId.1": {"i-0123456789abcdef0"}}, 400, CodeInvalidInstanceIDNotFound},
		{"terminate malformed", nil, url.Values{"Action": {"TerminateInstances"}, "InstanceId.1": {"vm-1"}}, 400, CodeInvalidInstanceIDMalformed},
		{"bad page token", nil, url.Values{"Action": {"DescribeInstances"}, "MaxResults": {"5"}, "NextToken": {"!!"}}, 400, CodeInvalidParameterValue},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup()
			}
			status, body := post(t, s, c.form)
			if status != c.status || errorCodeOf(t, body) != c.code {
				t.Fatalf("status %d body %s; want %d %s", status, body, c.status, c.code)
			}
		})
	}
	// Without a signature nothing is served.
	req, _ := http.NewRequest(http.MethodPost, s.URL, strings.NewReader("Action=DescribeInstances&Version="+APIVersion))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || errorCodeOf(t, body) != CodeAuthFailure {
		t.Fatalf("unsigned: %d %s", resp.StatusCode, body)
	}
}

func TestClientTokenIdempotency(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	form := func(itype string) url.Values {
		return url.Values{"Action": {"RunInstances"}, "ImageId": {"ami-1"}, "MinCount": {"1"}, "MaxCount": {"1"}, "InstanceType": {itype}, "ClientToken": {"tok"}}
	}
	st1, b1 := post(t, s, form("g5.xlarge"))
	st2, b2 := post(t, s, form("g5.xlarge"))
	if st1 != 200 || st2 != 200 || len(s.Instances()) != 1 {
		t.Fatalf("statuses %d %d, instances %d", st1, st2, len(s.Instances()))
	}
	var r1, r2 xmlRunInstancesResponse
	if err := xml.Unmarshal(b1, &r1); err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b2, &r2); err != nil {
		t.Fatal(err)
	}
	if r1.InstancesSet[0].InstanceID != r2.InstancesSet[0].InstanceID || r1.ReservationID != r2.ReservationID || r1.RequestID == r2.RequestID {
		t.Fatalf("replay differs: %+v vs %+v", r1, r2)
	}
	if r1.XMLName.Space != Namespace {
		t.Errorf("namespace %q", r1.XMLName.Space)
	}
	st3, b3 := post(t, s, form("g6.xlarge"))
	if st3 != 400 || errorCodeOf(t, b3) != CodeIdempotentParameterMismatch || len(s.Instances()) != 1 {
		t.Fatalf("mismatch: %d %s", st3, b3)
	}
}

func TestThrottleFractionIsDeterministic(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	s.ThrottleFraction(0.5)
	var got []int
	for range 6 {
		st, _ := post(t, s, url.Values{"Action": {"DescribeInstances"}})
		got = append(got, st)
	}
	want := []int{200, 503, 200, 503, 200, 503}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statuses %v, want %v", got, want)
		}
	}
	s.ThrottleFraction(0)
	if st, _ := post(t, s, url.Values{"Action": {"DescribeInstances"}}); st != 200 {
		t.Fatalf("after reset: %d", st)
	}
}

func TestSpotPriceHistoryReturnsThePriceInEffect(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	s := NewServer(Options{})
	defer s.Close()
	s.AddSpotPrice(SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1a", Price: "0.50", Timestamp: t0.Add(-3 * time.Hour)})
	s.AddSpotPrice(SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1a", Price: "0.40", Timestamp: t0.Add(-time.Hour)})
	s.AddSpotPrice(SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1a", Price: "0.45", Timestamp: t0.Add(time.Minute)})
	s.AddSpotPrice(SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1b", Price: "0.70", Timestamp: t0.Add(-time.Hour), ProductDescription: "Windows"})
	st, body := post(t, s, url.Values{
		"Action": {"DescribeSpotPriceHistory"}, "InstanceType.1": {"g5.xlarge"},
		"ProductDescription.1": {"Linux/UNIX"}, "StartTime": {t0.Format(time.RFC3339)},
	})
	if st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	var r xmlDescribeSpotPriceHistoryResponse
	if err := xml.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	var prices []string
	for _, p := range r.SpotPriceHistorySet {
		prices = append(prices, p.AvailabilityZone+"="+p.SpotPrice)
	}
	if strings.Join(prices, ",") != "us-east-1a=0.45,us-east-1a=0.40" {
		t.Fatalf("prices %v", prices)
	}
}

func TestDescribeFiltersAndAutoAdvance(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	a := s.Put(Instance{State: StatePending, Tags: map[string]string{"team": "ml", "env": "prod"}})
	s.Put(Instance{State: StateRunning, Tags: map[string]string{"team": "web"}})
	st, body := post(t, s, url.Values{
		"Action": {"DescribeInstances"}, "Filter.1.Name": {"tag:team"}, "Filter.1.Value.1": {"m*"},
		"Filter.2.Name": {"instance-state-name"}, "Filter.2.Value.1": {"running"},
	})
	var r xmlDescribeInstancesResponse
	if err := xml.Unmarshal(body, &r); st != 200 || err != nil {
		t.Fatalf("%d %v", st, err)
	}
	if len(r.ReservationSet) != 1 || r.ReservationSet[0].InstancesSet[0].InstanceID != a {
		t.Fatalf("reservations %+v", r.ReservationSet)
	}
	if got := r.ReservationSet[0].InstancesSet[0]; got.State.Name != StateRunning || got.State.Code != 16 || got.IPAddress == "" {
		t.Errorf("pending did not become running with a public IP: %+v", got)
	}
}

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		pattern, s string
		want       bool
	}{
		{"abc", "abc", true},
		{"abc", "abd", false},
		{"a*", "abc", true},
		{"*c", "abc", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*", "", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"", "", true},
		{"", "a", false},
	}
	for _, c := range cases {
		if got := globMatch(c.pattern, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v", c.pattern, c.s, got)
		}
	}
}

// FuzzGlobMatch: filter values are matched with EC2's wildcards; a pattern
// without wildcards is plain equality and "*" matches anything.
func FuzzGlobMatch(f *testing.F) {
	f.Add("a*b?", "axxbz")
	f.Add("tidegpu", "tidegpu")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		got := globMatch(pattern, s)
		if !strings.ContainsAny(pattern, "*?") && got != (pattern == s) {
			t.Fatalf("globMatch(%q, %q) = %v", pattern, s, got)
		}
		if !globMatch("*", s) || !globMatch(s+"*", s) && !strings.ContainsAny(s, "*?") {
			t.Fatalf("star does not match %q", s)
		}
	})
}

// stateChange posts a StopInstances or StartInstances for id and returns
// the status and, on success, the one state change answered.
func stateChange(t *testing.T, s *Server, action, id string) (int, string, xmlStateChange) {
	t.Helper()
	st, body := post(t, s, url.Values{"Action": {action}, "InstanceId.1": {id}})
	if st != 200 {
		return st, errorCodeOf(t, body), xmlStateChange{}
	}
	var r struct {
		XMLName      xml.Name
		RequestID    string           `xml:"requestId"`
		InstancesSet []xmlStateChange `xml:"instancesSet>item"`
	}
	if err := xml.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	if r.XMLName.Local != action+"Response" || r.XMLName.Space != Namespace || r.RequestID == "" || len(r.InstancesSet) != 1 || r.InstancesSet[0].InstanceID != id {
		t.Fatalf("%s answer %s", action, body)
	}
	return st, "", r.InstancesSet[0]
}

func TestStopStartTransitionsAndIdempotency(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	s.SetManual(true)
	id := s.Put(Instance{})
	before, _ := s.Instance(id)

	steps := []struct {
		action, prev, cur string
		advance           bool
	}{
		{"StopInstances", StateRunning, StateStopping, false},
		{"StopInstances", StateStopping, StateStopping, true}, // repeated: no change
		{"StopInstances", StateStopped, StateStopped, false},
		{"StartInstances", StateStopped, StatePending, false},
		{"StartInstances", StatePending, StatePending, true},
		{"StartInstances", StateRunning, StateRunning, false},
	}
	for i, c := range steps {
		st, code, ch := stateChange(t, s, c.action, id)
		if st != 200 || ch.PreviousState != xmlStateOf(c.prev) || ch.CurrentState != xmlStateOf(c.cur) {
			t.Fatalf("step %d %s: %d %s %+v; want %s → %s", i, c.action, st, code, ch, c.prev, c.cur)
		}
		if c.action == "StopInstances" && c.cur == StateStopped {
			if in, _ := s.Instance(id); in.PublicIP != "" || in.PrivateIP != before.PrivateIP {
				t.Fatalf("stopped instance kept public IP or lost private IP: %+v", in)
			}
		}
		if c.advance {
			s.Advance()
		}
	}
	after, _ := s.Instance(id)
	if after.Starts != 1 || after.PublicIP == "" || after.PublicIP == before.PublicIP || after.PrivateIP != before.PrivateIP {
		t.Fatalf("after restart %+v (before %+v); want a new public IP, the same private one", after, before)
	}
}

func TestStopStartErrors(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	s.SetManual(true)
	spot := s.Put(Instance{Market: MarketSpot, SpotInstanceType: "one-time"})
	persistent := s.Put(Instance{Market: MarketSpot, SpotInstanceType: "persistent"})
	pending := s.Put(Instance{State: StatePending})
	stopping := s.Put(Instance{State: StateStopping})
	terminated := s.Put(Instance{State: StateTerminated})
	cases := []struct {
		action, id string
		status     int
		code       string
	}{
		{"StopInstances", spot, 400, CodeUnsupportedOperation},
		{"StopInstances", pending, 400, CodeIncorrectInstanceState},
		{"StopInstances", terminated, 400, CodeIncorrectInstanceState},
		{"StartInstances", stopping, 400, CodeIncorrectInstanceState},
		{"StartInstances", terminated, 400, CodeIncorrectInstanceState},
		{"StopInstances", "i-0123456789abcdef0", 400, CodeInvalidInstanceIDNotFound},
		{"StartInstances", "i-0123456789abcdef0", 400, CodeInvalidInstanceIDNotFound},
		{"StartInstances", "vm-1", 400, CodeInvalidInstanceIDMalformed},
		{"StopInstances", persistent, 200, ""},
	}
	for _, c := range cases {
		st, code, _ := stateChange(t, s, c.action, c.id)
		if st != c.status || code != c.code {
			t.Errorf("%s %s: %d %s; want %d %s", c.action, c.id, st, code, c.status, c.code)
		}
	}
	if st, body := post(t, s, url.Values{"Action": {"StopInstances"}}); st != 400 || errorCodeOf(t, body) != CodeMissingParameter {
		t.Errorf("no ids: %d %s", st, body)
	}
	// A bad id fails the whole call: the good one is left as it was.
	st, body := post(t, s, url.Values{"Action": {"StopInstances"}, "InstanceId.1": {persistent}, "InstanceId.2": {spot}})
	if st != 400 || errorCodeOf(t, body) != CodeUnsupportedOperation {
		t.Fatalf("batch: %d %s", st, body)
	}
	for id, want := range map[string]string{spot: StateRunning, pending: StatePending, stopping: StateStopping, terminated: StateTerminated} {
		if in, _ := s.Instance(id); in.State != want {
			t.Errorf("%s is %s after refused calls, want %s", id, in.State, want)
		}
	}
}
