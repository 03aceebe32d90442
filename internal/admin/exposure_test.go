package admin

import (
	"strings"
	"testing"
)

func TestCheckExposure(t *testing.T) {
	for _, c := range []struct {
		addr, token string
		refused     bool
	}{
		{"127.0.0.1:9090", "", false},
		{"127.0.0.5:9090", "", false},
		{"[::1]:9090", "", false},
		{"localhost:9090", "", false},
		{"0", "", false}, // disabled (the operator's "0")
		{"", "", false},
		{"0.0.0.0:9090", "", true},
		{":9090", "", true},
		{"[::]:9090", "", true},
		{"10.0.0.7:9090", "", true},
		{"admin.example:9090", "", true},
		{"0.0.0.0:9090", "s3cret", false},
		{"0.0.0.0:9090", "  ", true}, // blank is no token
	} {
		err := CheckExposure("--admin-addr", c.addr, c.token)
		if (err != nil) != c.refused {
			t.Errorf("%q with token %q: err %v, refused want %v", c.addr, c.token, err, c.refused)
		}
		if err != nil && (!strings.Contains(err.Error(), "--admin-addr") || !strings.Contains(err.Error(), "TIDEGPU_ADMIN_TOKEN")) {
			t.Errorf("%q: the error does not name the flag and the fix: %v", c.addr, err)
		}
	}
	if err := CheckExposure("--admin-addr", "nonsense", ""); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("a malformed address: %v", err)
	}
}
