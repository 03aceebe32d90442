package cvmtest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// TC3-HMAC-SHA256 ("signature v3") as documented at
// https://www.tencentcloud.com/document/product/267/37447 (same text on every
// product's "Signature v3" page):
//
//	CanonicalRequest = Method \n CanonicalURI \n CanonicalQueryString \n
//	                   CanonicalHeaders \n SignedHeaders \n hex(sha256(payload))
//	StringToSign     = "TC3-HMAC-SHA256" \n Timestamp \n Date/service/tc3_request \n
//	                   hex(sha256(CanonicalRequest))
//	SecretDate = HMAC("TC3"+SecretKey, Date); SecretService = HMAC(SecretDate, service)
//	SecretSigning = HMAC(SecretService, "tc3_request")
//	Signature = hex(HMAC(SecretSigning, StringToSign))
//	Authorization: TC3-HMAC-SHA256 Credential=SecretId/Date/service/tc3_request,
//	               SignedHeaders=content-type;host, Signature=...
//
// CanonicalURI is "/" and the query string is empty for a POST; header
// names and values are lower-cased and trimmed.

// authorization is a parsed Authorization header.
type authorization struct {
	SecretID, Date, Service string
	SignedHeaders           []string
	Signature               string
}

// parseAuthorization parses a TC3 Authorization header, refusing anything
// not of the documented form.
func parseAuthorization(h string) (authorization, error) {
	const algo = "TC3-HMAC-SHA256 "
	if !strings.HasPrefix(h, algo) {
		return authorization{}, fmt.Errorf("algorithm is not TC3-HMAC-SHA256")
	}
	var a authorization
	fields := map[string]string{}
	for _, part := range strings.Split(strings.TrimPrefix(h, algo), ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" {
			return authorization{}, fmt.Errorf("malformed part %q", part)
		}
		fields[k] = v
	}
	cred := strings.Split(fields["Credential"], "/")
	if len(cred) != 4 || cred[0] == "" || cred[3] != "tc3_request" {
		return authorization{}, fmt.Errorf("credential %q is not SecretId/Date/service/tc3_request", fields["Credential"])
	}
	a.SecretID, a.Date, a.Service = cred[0], cred[1], cred[2]
	if fields["SignedHeaders"] == "" {
		return authorization{}, fmt.Errorf("no SignedHeaders")
	}
	a.SignedHeaders = strings.Split(fields["SignedHeaders"], ";")
	a.Signature = fields["Signature"]
	if len(a.Signature) != 64 {
		return authorization{}, fmt.Errorf("signature is not 64 hex digits")
	}
	if _, err := hex.DecodeString(a.Signature); err != nil {
		return authorization{}, fmt.Errorf("signature is not hex")
	}
	return a, nil
}

// signature computes the TC3 signature of a POST request.
func signature(secretKey string, a authorization, r *http.Request, timestamp string, payload []byte) string {
	names := append([]string(nil), a.SignedHeaders...)
	sort.Strings(names)
	var ch strings.Builder
	for _, n := range names {
		v := r.Header.Get(n)
		if strings.EqualFold(n, "host") {
			v = r.Host
		}
		ch.WriteString(strings.ToLower(n) + ":" + strings.ToLower(strings.TrimSpace(v)) + "\n")
	}
	canonical := strings.Join([]string{
		r.Method, "/", "", ch.String(), strings.Join(names, ";"), sha256hex(payload),
	}, "\n")
	scope := a.Date + "/" + a.Service + "/tc3_request"
	toSign := "TC3-HMAC-SHA256\n" + timestamp + "\n" + scope + "\n" + sha256hex([]byte(canonical))
	kDate := hmacSHA256([]byte("TC3"+secretKey), a.Date)
	kService := hmacSHA256(kDate, a.Service)
	kSigning := hmacSHA256(kService, "tc3_request")
	return hex.EncodeToString(hmacSHA256(kSigning, toSign))
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}
