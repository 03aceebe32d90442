package agent

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseInstanceAction(t *testing.T) {
	tests := []struct {
		body       string
		wantAction string
		wantAt     string
		wantErr    string
	}{
		{`{"action": "terminate", "time": "2017-09-18T08:22:00Z"}`, "terminate", "2017-09-18T08:22:00Z", ""},
		{`{"action": "stop", "time": "2026-11-30T12:02:00Z"}`, "stop", "2026-11-30T12:02:00Z", ""},
		{`{"action": "hibernate", "time": "2026-11-30T12:02:00Z"}` + "\n", "hibernate", "2026-11-30T12:02:00Z", ""},
		{`{"action":"terminate","time":"2026-11-30T20:02:00+08:00"}`, "terminate", "2026-11-30T12:02:00Z", ""},
		{`{"action":"terminate","time":"2026-11-30T12:02:00Z","extra":1}`, "terminate", "2026-11-30T12:02:00Z", ""},
		{`{"action":"terminate"}`, "", "", "time"},
		{`{"time":"2026-11-30T12:02:00Z"}`, "", "", "action"},
		{`{"action":"Terminate!","time":"2026-11-30T12:02:00Z"}`, "", "", "action"},
		{`{"action":"terminate","time":"2026-11-30 12:02:00"}`, "", "", "time"},
		{`{"action":"terminate","time":"2026-11-30T12:02:00Z"} {}`, "", "", "trailing"},
		{`<html>404 - Not Found</html>`, "", "", "spot/instance-action"},
		{``, "", "", "spot/instance-action"},
		{`[]`, "", "", "spot/instance-action"},
	}
	for _, tt := range tests {
		action, at, err := ParseInstanceAction([]byte(tt.body))
		if tt.wantErr != "" {
			var pe *ParseError
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &pe) {
				t.Errorf("ParseInstanceAction(%q) error = %v, want a ParseError mentioning %q", tt.body, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseInstanceAction(%q): %v", tt.body, err)
			continue
		}
		want, _ := time.Parse(time.RFC3339, tt.wantAt)
		if action != tt.wantAction || !at.Equal(want) || at.Location() != time.UTC {
			t.Errorf("ParseInstanceAction(%q) = %q, %v; want %q, %v UTC", tt.body, action, at, tt.wantAction, want)
		}
	}
}

func TestParseRebalance(t *testing.T) {
	tests := []struct {
		body    string
		want    string
		wantErr string
	}{
		{`{"noticeTime": "2020-10-27T08:22:00Z"}`, "2020-10-27T08:22:00Z", ""},
		{`{"noticeTime":"2026-01-02T03:04:05.5Z"}`, "2026-01-02T03:04:05.5Z", ""},
		{`{}`, "", "noticeTime"},
		{`{"noticeTime": 12}`, "", "rebalance"},
		{`{"noticeTime":"yesterday"}`, "", "noticeTime"},
		{`not json`, "", "rebalance"},
	}
	for _, tt := range tests {
		at, err := ParseRebalance([]byte(tt.body))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseRebalance(%q) error = %v, want one mentioning %q", tt.body, err, tt.wantErr)
			}
			continue
		}
		want, _ := time.Parse(time.RFC3339, tt.want)
		if err != nil || !at.Equal(want) {
			t.Errorf("ParseRebalance(%q) = %v, %v; want %v", tt.body, at, err, want)
		}
	}
}

func TestParseTencentTermination(t *testing.T) {
	tests := []struct {
		body    string
		want    string // RFC 3339
		wantErr bool
	}{
		// The documented example, in UTC+8.
		{"2018-08-18 12:05:33", "2018-08-18T04:05:33Z", false},
		{"2026-11-30 20:02:00\n", "2026-11-30T12:02:00Z", false},
		{"  2026-01-01 07:59:59  ", "2025-12-31T23:59:59Z", false},
		{"2026-11-30T12:02:00Z", "2026-11-30T12:02:00Z", false},
		{"2026-11-30T20:02:00+08:00", "2026-11-30T12:02:00Z", false},
		{"", "", true},
		{"2026-11-30", "", true},
		{"2026-13-30 20:02:00", "", true},
		{"<html>404</html>", "", true},
		{strings.Repeat("9", 100), "", true},
	}
	for _, tt := range tests {
		at, err := ParseTencentTermination([]byte(tt.body))
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseTencentTermination(%q) = %v, want an error", tt.body, at)
			}
			continue
		}
		want, _ := time.Parse(time.RFC3339, tt.want)
		if err != nil || !at.Equal(want) {
			t.Errorf("ParseTencentTermination(%q) = %v, %v; want %v", tt.body, at, err, want)
		}
	}
}

func TestParseInstanceID(t *testing.T) {
	tests := []struct {
		body, want string
		wantErr    bool
	}{
		{"i-0123456789abcdef0", "i-0123456789abcdef0", false},
		{"ins-3g445roi\n", "ins-3g445roi", false},
		{"", "", true},
		{"i-1 i-2", "", true},
		{"../admin", "", true},
		{"ïd", "", true},
		{strings.Repeat("a", 129), "", true},
	}
	for _, tt := range tests {
		got, err := ParseInstanceID([]byte(tt.body))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseInstanceID(%q) = %q, %v; want %q (error %t)", tt.body, got, err, tt.want, tt.wantErr)
		}
	}
}

func FuzzParseInstanceAction(f *testing.F) {
	f.Add([]byte(`{"action": "terminate", "time": "2017-09-18T08:22:00Z"}`))
	f.Add([]byte(`{"action": "hibernate", "time": "2017-09-18T08:22:00+01:00"}`))
	f.Add([]byte(`{"action": "", "time": ""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		action, at, err := ParseInstanceAction(b)
		if err != nil {
			if action != "" || !at.IsZero() {
				t.Fatalf("error %v with a result %q %v", err, action, at)
			}
			return
		}
		if !isWord(action) || at.IsZero() || at.Location() != time.UTC {
			t.Fatalf("ParseInstanceAction(%q) = %q, %v", b, action, at)
		}
	})
}

func FuzzParseRebalance(f *testing.F) {
	f.Add([]byte(`{"noticeTime": "2020-10-27T08:22:00Z"}`))
	f.Add([]byte(`{"noticeTime": null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		at, err := ParseRebalance(b)
		if err == nil && (at.IsZero() || at.Location() != time.UTC) {
			t.Fatalf("ParseRebalance(%q) = %v without error", b, at)
		}
	})
}

func FuzzParseTencentTermination(f *testing.F) {
	f.Add([]byte("2018-08-18 12:05:33"))
	f.Add([]byte("2026-11-30T12:02:00Z"))
	f.Add([]byte("0000-01-01 00:00:00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		at, err := ParseTencentTermination(b)
		if err != nil {
			if !at.IsZero() {
				t.Fatalf("error %v with a result %v", err, at)
			}
			return
		}
		if at.Location() != time.UTC {
			t.Fatalf("ParseTencentTermination(%q) = %v, not in UTC", b, at)
		}
		// Written back in the documented form, it reads as the same second.
		again, err := ParseTencentTermination([]byte(at.In(tencentZone).Format(TencentTimeLayout)))
		if y := at.In(tencentZone).Year(); y >= 0 && y <= 9999 && (err != nil || !again.Equal(at.Truncate(time.Second))) {
			t.Fatalf("ParseTencentTermination(%q) = %v, but its UTC+8 form reads as %v, %v", b, at, again, err)
		}
	})
}

func FuzzParseInstanceID(f *testing.F) {
	f.Add([]byte("i-0123456789abcdef0"))
	f.Add([]byte("ins-3g445roi"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := ParseInstanceID(b)
		if err != nil {
			return
		}
		if id == "" || strings.ContainsAny(id, " /\t\r\n") || len(id) > 128 {
			t.Fatalf("ParseInstanceID(%q) = %q", b, id)
		}
	})
}
