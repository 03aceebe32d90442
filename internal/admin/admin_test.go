package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseReclaim(t *testing.T) {
	cases := []struct {
		body    string
		want    time.Duration
		wantErr string
	}{
		{"", 0, ""},
		{`{}`, 0, ""},
		{`{"noticeSeconds": 10}`, 10 * time.Second, ""},
		{`{"noticeSeconds": 0}`, 0, ""},
		{`{"noticeSeconds": -1}`, 0, "noticeSeconds"},
		{`{"noticeSeconds": 1.5}`, 0, "whole number"},
		{`{"noticeSeconds": 3601}`, 0, "3600"},
		{`{"notice": 10}`, 0, "unknown field"},
		{`{"noticeSeconds": 1} x`, 0, "trailing"},
		{`[`, 0, "body"},
	}
	for _, tc := range cases {
		got, err := ParseReclaim([]byte(tc.body))
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseReclaim(%q) error = %v, want one mentioning %q", tc.body, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("ParseReclaim(%q): %v", tc.body, err)
		case tc.wantErr == "" && got != tc.want:
			t.Errorf("ParseReclaim(%q) = %s, want %s", tc.body, got, tc.want)
		}
	}
}

func TestParseNotice(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		body    string
		want    time.Time
		source  string
		wantErr string
	}{
		{`{"interruptAt":"2026-11-30T12:02:00Z","source":"aws-imds"}`, now.Add(2 * time.Minute), "aws-imds", ""},
		{`{"interruptAt":"2026-11-30T11:00:00Z"}`, now, "agent", ""},
		{`{}`, now, "agent", ""},
		{`{"interruptAt":"2026-12-30T11:00:00Z"}`, time.Time{}, "", "24h"},
		{`{"interruptAt":"soon"}`, time.Time{}, "", "body"},
		{`{"at":"2026-11-30T12:02:00Z"}`, time.Time{}, "", "unknown field"},
	}
	for _, tc := range cases {
		got, err := ParseNotice([]byte(tc.body), now)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseNotice(%q) error = %v, want one mentioning %q", tc.body, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("ParseNotice(%q): %v", tc.body, err)
		case tc.wantErr == "" && (!got.At.Equal(tc.want) || got.Source != tc.source):
			t.Errorf("ParseNotice(%q) = %+v, want %s from %s", tc.body, got, tc.want, tc.source)
		}
	}
}

func FuzzParseReclaim(f *testing.F) {
	f.Add([]byte(`{"noticeSeconds": 10}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseReclaim(b)
		if err == nil && (d < 0 || d > MaxNoticeSeconds*time.Second) {
			t.Fatalf("accepted %s", d)
		}
	})
}

func FuzzParseNotice(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Add([]byte(`{"interruptAt":"2026-11-30T12:02:00Z","source":"aws-imds"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseNotice(b, now)
		if err == nil && (n.At.Before(now) || n.At.Sub(now) > 24*time.Hour || n.Source == "") {
			t.Fatalf("accepted %+v", n)
		}
	})
}

func TestRefuseCrossSite(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := refuseCrossSite(ok)
	cases := []struct {
		name, method, ct, site, body string
		want                         int
	}{
		{"GET passes", http.MethodGet, "", "cross-site", "", http.StatusNoContent},
		{"JSON POST from curl", http.MethodPost, "application/json", "", `{}`, http.StatusNoContent},
		{"JSON POST from the dashboard", http.MethodPost, "application/json", "same-origin", `{}`, http.StatusNoContent},
		{"empty POST", http.MethodPost, "", "", "", http.StatusNoContent},
		{"form POST", http.MethodPost, "application/x-www-form-urlencoded", "", `noticeSeconds=0`, http.StatusUnsupportedMediaType},
		{"text POST", http.MethodPost, "text/plain", "", `{"noticeSeconds":0}`, http.StatusUnsupportedMediaType},
		{"cross-site POST", http.MethodPost, "application/json", "cross-site", `{}`, http.StatusForbidden},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(tc.method, "/api/v1/pools/p/instances/i/reclaim", strings.NewReader(tc.body))
		if tc.ct != "" {
			r.Header.Set("Content-Type", tc.ct)
		}
		if tc.site != "" {
			r.Header.Set("Sec-Fetch-Site", tc.site)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, w.Code, tc.want)
		}
	}
}
