package cvmtest

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParseAuthorization(t *testing.T) {
	sig := strings.Repeat("ab", 32)
	cases := []struct {
		name string
		in   string
		ok   bool
	}{
		{"sdk form", "TC3-HMAC-SHA256 Credential=AKID1/2026-08-01/cvm/tc3_request, SignedHeaders=content-type;host, Signature=" + sig, true},
		{"no spaces", "TC3-HMAC-SHA256 Credential=AKID1/2026-08-01/cvm/tc3_request,SignedHeaders=content-type;host,Signature=" + sig, true},
		{"empty", "", false},
		{"other algorithm", "HmacSHA256 Credential=AKID1/2026-08-01/cvm/tc3_request, SignedHeaders=host, Signature=" + sig, false},
		{"short credential", "TC3-HMAC-SHA256 Credential=AKID1/cvm/tc3_request, SignedHeaders=host, Signature=" + sig, false},
		{"wrong terminator", "TC3-HMAC-SHA256 Credential=AKID1/2026-08-01/cvm/tc2_request, SignedHeaders=host, Signature=" + sig, false},
		{"no signed headers", "TC3-HMAC-SHA256 Credential=AKID1/2026-08-01/cvm/tc3_request, Signature=" + sig, false},
		{"short signature", "TC3-HMAC-SHA256 Credential=AKID1/2026-08-01/cvm/tc3_request, SignedHeaders=host, Signature=abc", false},
		{"non-hex signature", "TC3-HMAC-SHA256 Credential=AKID1/2026-08-01/cvm/tc3_request, SignedHeaders=host, Signature=" + strings.Repeat("zz", 32), false},
		{"bare part", "TC3-HMAC-SHA256 Credential, SignedHeaders=host, Signature=" + sig, false},
	}
	for _, c := range cases {
		a, err := parseAuthorization(c.in)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v", c.name, err)
			continue
		}
		if c.ok && (a.SecretID != "AKID1" || a.Date != "2026-08-01" || a.Service != "cvm" || a.Signature != sig) {
			t.Errorf("%s: parsed %+v", c.name, a)
		}
	}
}

// TestSignatureCoversWhatItSigns: changing the body, the host, the
// timestamp, the key or the date changes the signature; the header order
// in SignedHeaders does not.
func TestSignatureCoversWhatItSigns(t *testing.T) {
	a := authorization{SecretID: "AKID1", Date: "2026-08-01", Service: "cvm", SignedHeaders: []string{"content-type", "host"}}
	r := httptest.NewRequest("POST", "http://cvm.example/", nil)
	r.Header.Set("Content-Type", "application/json")
	base := signature("key", a, r, "1785580800", []byte(`{"Limit":1}`))
	if len(base) != 64 {
		t.Fatalf("signature %q", base)
	}
	variants := map[string]string{
		"body":      signature("key", a, r, "1785580800", []byte(`{"Limit":2}`)),
		"timestamp": signature("key", a, r, "1785580801", []byte(`{"Limit":1}`)),
		"key":       signature("key2", a, r, "1785580800", []byte(`{"Limit":1}`)),
	}
	b := a
	b.Date = "2026-08-02"
	variants["date"] = signature("key", b, r, "1785580800", []byte(`{"Limit":1}`))
	r2 := httptest.NewRequest("POST", "http://other.example/", nil)
	r2.Header.Set("Content-Type", "application/json")
	variants["host"] = signature("key", a, r2, "1785580800", []byte(`{"Limit":1}`))
	for what, sig := range variants {
		if sig == base {
			t.Errorf("changing the %s does not change the signature", what)
		}
	}
	c := a
	c.SignedHeaders = []string{"host", "content-type"}
	if signature("key", c, r, "1785580800", []byte(`{"Limit":1}`)) != base {
		t.Error("the order of SignedHeaders changes the signature")
	}
}
