package metadatatest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

func do(t *testing.T, method, url string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestAWSTokens(t *testing.T) {
	s := NewAWS(t, "i-0123456789abcdef0")
	fc := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s.SetClock(fc)
	put := func(hdr map[string]string) (int, http.Header, string) {
		return do(t, http.MethodPut, s.URL+TokenPath, hdr)
	}
	for _, ttl := range []string{"", "0", "21601", "-1", "ten"} {
		if code, _, _ := put(map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": ttl}); code != http.StatusBadRequest {
			t.Errorf("PUT token with TTL %q: %d, want 400", ttl, code)
		}
	}
	if code, _, _ := put(map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "10.0.0.1"}); code != http.StatusForbidden {
		t.Errorf("PUT token with X-Forwarded-For: %d, want 403", code)
	}
	if code, _, _ := do(t, http.MethodGet, s.URL+TokenPath, nil); code != http.StatusMethodNotAllowed {
		t.Errorf("GET token: %d, want 405", code)
	}
	code, hdr, tok := put(map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60"})
	if code != 200 || tok == "" || hdr.Get("X-aws-ec2-metadata-token-ttl-seconds") != "60" {
		t.Fatalf("PUT token: %d %q ttl %q", code, tok, hdr.Get("X-aws-ec2-metadata-token-ttl-seconds"))
	}
	if code, _, _ := put(map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "21600"}); code != 200 {
		t.Errorf("PUT token with the maximum TTL: %d", code)
	}

	get := func(path, token string) (int, string) {
		h := map[string]string{}
		if token != "" {
			h["X-aws-ec2-metadata-token"] = token
		}
		code, _, body := do(t, http.MethodGet, s.URL+path, h)
		return code, body
	}
	if code, _ := get(AWSInstanceIDPath, ""); code != http.StatusUnauthorized {
		t.Errorf("GET without token: %d, want 401", code)
	}
	if code, _ := get(AWSInstanceIDPath, "forged"); code != http.StatusUnauthorized {
		t.Errorf("GET with a forged token: %d, want 401", code)
	}
	if code, body := get(AWSInstanceIDPath, tok); code != 200 || body != "i-0123456789abcdef0" {
		t.Errorf("GET instance-id: %d %q", code, body)
	}
	fc.Step(59 * time.Second)
	if code, _ := get(AWSInstanceIDPath, tok); code != 200 {
		t.Errorf("GET at 59 s of a 60 s token: %d", code)
	}
	fc.Step(time.Second)
	if code, _ := get(AWSInstanceIDPath, tok); code != http.StatusUnauthorized {
		t.Errorf("GET with an expired token: %d, want 401", code)
	}
	if s.TokensIssued() != 2 || s.Unauthorized() != 3 {
		t.Errorf("TokensIssued %d, Unauthorized %d; want 2 and 3", s.TokensIssued(), s.Unauthorized())
	}
	for _, c := range s.Calls() {
		if c.Path == AWSInstanceIDPath && c.Status == 200 && !c.Token {
			t.Errorf("call log: %+v served without a token", c)
		}
	}
}

func TestAWSItems(t *testing.T) {
	s := NewAWS(t, "i-1")
	_, _, tok := do(t, http.MethodPut, s.URL+TokenPath, map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
	get := func(path string) (int, string) {
		code, _, body := do(t, http.MethodGet, s.URL+path, map[string]string{"X-aws-ec2-metadata-token": tok})
		return code, body
	}
	for _, p := range []string{InstanceActionPath, RebalancePath, "/latest/meta-data/nothing"} {
		if code, _ := get(p); code != http.StatusNotFound {
			t.Errorf("GET %s before anything: %d, want 404", p, code)
		}
	}
	at := time.Date(2026, 11, 30, 12, 2, 0, 0, time.FixedZone("x", 3600))
	s.Schedule("terminate", at)
	s.Rebalance(at.Add(-time.Minute))
	code, body := get(InstanceActionPath)
	var ia map[string]string
	if code != 200 || json.Unmarshal([]byte(body), &ia) != nil || ia["action"] != "terminate" || ia["time"] != "2026-11-30T11:02:00Z" {
		t.Errorf("GET instance-action: %d %q", code, body)
	}
	code, body = get(RebalancePath)
	if code != 200 || strings.TrimSpace(body) != `{"noticeTime":"2026-11-30T11:01:00Z"}` {
		t.Errorf("GET rebalance: %d %q", code, body)
	}
	s.Fail(InstanceActionPath, http.StatusServiceUnavailable, 2)
	c1, _ := get(InstanceActionPath)
	c2, _ := get(InstanceActionPath)
	c3, _ := get(InstanceActionPath)
	if c1 != 503 || c2 != 503 || c3 != 200 {
		t.Errorf("two injected failures: %d %d %d", c1, c2, c3)
	}
	s.Unschedule()
	if code, _ := get(InstanceActionPath); code != http.StatusNotFound {
		t.Errorf("GET instance-action after Unschedule: %d", code)
	}
	s.ForgetTokens()
	if code, _ := get(AWSInstanceIDPath); code != http.StatusUnauthorized {
		t.Errorf("GET after ForgetTokens: %d, want 401", code)
	}
	if n := s.CallCount(InstanceActionPath); n != 6 {
		t.Errorf("CallCount(instance-action) = %d, want 6", n)
	}
}

func TestTencentItems(t *testing.T) {
	s := NewTencent(t, "ins-3g445roi")
	code, _, body := do(t, http.MethodGet, s.URL+TencentInstanceIDPath, nil)
	if code != 200 || body != "ins-3g445roi" {
		t.Errorf("GET instance-id: %d %q", code, body)
	}
	if code, _, _ := do(t, http.MethodGet, s.URL+TerminationTimePath, nil); code != http.StatusNotFound {
		t.Errorf("GET termination-time before a reclaim: %d, want 404", code)
	}
	s.Schedule(time.Date(2018, 8, 18, 4, 5, 33, 0, time.UTC))
	code, _, body = do(t, http.MethodGet, s.URL+TerminationTimePath, nil)
	if code != 200 || body != "2018-08-18 12:05:33" {
		t.Errorf("GET termination-time: %d %q, want the documented UTC+8 form", code, body)
	}
	if code, _, _ := do(t, http.MethodPut, s.URL+TerminationTimePath, nil); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d, want 405", code)
	}
	if n := len(s.Calls()); n != 4 {
		t.Errorf("%d calls recorded, want 4", n)
	}
}
