package guard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheckExposure(t *testing.T) {
	for _, c := range []struct {
		addr, token string
		insecure    bool
		refused     bool
	}{
		{"127.0.0.1:9090", "", false, false},
		{"127.0.0.5:9090", "", false, false},
		{"[::1]:9090", "", false, false},
		{"localhost:9090", "", false, false},
		{"0", "", false, false}, // disabled (the operator's "0")
		{"", "", false, false},
		{"0.0.0.0:9090", "", false, true},
		{":9090", "", false, true},
		{"[::]:9090", "", false, true},
		{"10.0.0.7:9090", "", false, true},
		{"admin.example:9090", "", false, true},
		{"0.0.0.0:9090", "s3cret", false, false},
		{"0.0.0.0:9090", "  ", false, true}, // blank is no token
		{"0.0.0.0:9090", "", true, false},   // --insecure-admin
		{":9091", "", true, false},
	} {
		err := CheckExposure("--admin-addr", c.addr, c.token, c.insecure)
		if (err != nil) != c.refused {
			t.Errorf("%q with token %q insecure %v: err %v, refused want %v", c.addr, c.token, c.insecure, err, c.refused)
		}
		if err != nil {
			for _, want := range []string{"--admin-addr", "TIDEGPU_ADMIN_TOKEN", "--insecure-admin", "127.0.0.1"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q: the error does not name %s: %v", c.addr, want, err)
				}
			}
		}
	}
	if err := CheckExposure("--admin-addr", "nonsense", "", false); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("a malformed address: %v", err)
	}
}

func TestRequireToken(t *testing.T) {
	h := RequireToken("s3cret", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	for _, c := range []struct {
		path, auth string
		code       int
	}{
		{"/healthz", "", 200},
		{"/metrics", "", 401},
		{"/metrics", "Bearer wrong", 401},
		{"/metrics", "s3cret", 401},
		{"/metrics", "Bearer s3cret", 200},
		{"/api/v1/backends", "Bearer s3cret", 200},
	} {
		r := httptest.NewRequest("GET", c.path, nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code {
			t.Errorf("%s with %q: %d, want %d", c.path, c.auth, w.Code, c.code)
		}
		if w.Code == 401 && !strings.Contains(w.Body.String(), "Authorization: Bearer") {
			t.Errorf("%s: 401 body does not say how to send the token: %s", c.path, w.Body)
		}
	}
}
