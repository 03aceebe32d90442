// Package guard keeps the admin listeners of every role (`tidegpu up`,
// `operator`, `gateway`) closed to strangers: it refuses, at start, an
// address beyond loopback that no token guards, and it checks the bearer
// token on requests. It imports nothing of the project, so the data plane
// can use it without linking the admin API.
package guard

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// TokenEnv is the environment variable that holds the admin token.
const TokenEnv = "TIDEGPU_ADMIN_TOKEN"

// InsecureFlag is the flag that serves a public admin address without a
// token on purpose (a network policy or a sidecar guards it).
const InsecureFlag = "--insecure-admin"

// CheckExposure refuses an admin address that listens beyond loopback when
// no token guards it and insecure is false: the admin API reclaims
// instances and takes agents' notices, so anyone who can reach it can empty
// a pool. flag names the setting for the message. An address whose host is
// empty, a wildcard (0.0.0.0, ::), a name other than localhost or an IP
// that is not loopback is beyond loopback.
func CheckExposure(flag, addr, token string, insecure bool) error {
	if addr == "" || addr == "0" || strings.TrimSpace(token) != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %v (want host:port, such as 127.0.0.1:9090)", flag, addr, err)
	}
	if isLoopback(host) || insecure {
		return nil
	}
	return fmt.Errorf("%s %s listens beyond loopback without a token, so anyone who reaches it can use it: "+
		"set %s to require one (for example export %s=$(openssl rand -hex 32)), listen on 127.0.0.1, "+
		"or pass %s if something else guards the address", flag, addr, TokenEnv, TokenEnv, InsecureFlag)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// RequireToken serves next only to requests that carry token as
// "Authorization: Bearer TOKEN"; /healthz stays open for liveness probes.
// Others get 401 with a JSON {"error": ...} naming how to send it.
func RequireToken(token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tidegpu-admin"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "missing or wrong admin token: send it as \"Authorization: Bearer TOKEN\" (the value of " + TokenEnv + ")"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
