package gateway

// CORS at the gateway. A browser page on another origin that calls the
// gateway with fetch sends a preflight (OPTIONS with Origin and
// Access-Control-Request-Method) before any request that is not "simple"
// (a JSON body, an Authorization header); backends such as vLLM answer it
// 405. With Options.CORS the gateway answers preflights itself, without a
// backend, and adds the Access-Control-* headers to every answer (its own
// errors included); the backends' own Access-Control-* headers are dropped
// so that a client never sees two policies. Without Options.CORS every
// request, OPTIONS included, goes to a backend as it came. The protocol is
// the Fetch standard's (https://fetch.spec.whatwg.org/#http-cors-protocol),
// implemented by github.com/rs/cors.

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/rs/cors"
)

// CORS configures the gateway's answers to cross-origin requests.
type CORS struct {
	// AllowedOrigins are the origins (scheme://host[:port]) allowed to
	// call the gateway, or "*" for any; required. An entry may hold one
	// "*" wildcard (https://*.example.com).
	AllowedOrigins []string
	// AllowedMethods a preflight may ask for. Empty means
	// DefaultCORSMethods.
	AllowedMethods []string
	// AllowedHeaders a preflight may ask for, or "*" for any. Empty means
	// DefaultCORSHeaders.
	AllowedHeaders []string
	// ExposedHeaders are the response headers a page may read beyond the
	// CORS-safelisted ones. Empty means BackendHeader.
	ExposedHeaders []string
	// MaxAge is how long a browser may cache a preflight's answer; 0 sends
	// no Access-Control-Max-Age (the browser's default, 5 s in Chromium).
	MaxAge time.Duration
	// AllowCredentials lets pages send cookies and HTTP authentication;
	// not with the origin "*".
	AllowCredentials bool
}

// Defaults of CORS.
var (
	DefaultCORSMethods = []string{http.MethodGet, http.MethodPost, http.MethodHead}
	DefaultCORSHeaders = []string{"Accept", "Authorization", "Content-Type", PoolHeader}
)

// Validate checks c, naming the field at fault and the fix.
func (c *CORS) Validate() error { return c.validate("") }

// validate checks c; field names are prefixed with prefix.
func (c *CORS) validate(prefix string) error {
	var errs []error
	if len(c.AllowedOrigins) == 0 {
		errs = append(errs, fmt.Errorf("%sAllowedOrigins: required: give the origins allowed to call the gateway (https://app.example.com) or *", prefix))
	}
	for _, o := range c.AllowedOrigins {
		if o == "*" {
			if c.AllowCredentials {
				errs = append(errs, fmt.Errorf("%sAllowCredentials: not with the origin * (browsers refuse it): list the origins", prefix))
			}
			continue
		}
		scheme, host, ok := strings.Cut(o, "://")
		if !ok || (scheme != "http" && scheme != "https") || host == "" || strings.ContainsAny(host, "/?#") || strings.Count(o, "*") > 1 {
			errs = append(errs, fmt.Errorf("%sAllowedOrigins: %q is not an origin: want scheme://host[:port] with no path, such as https://app.example.com, or *", prefix, o))
		}
	}
	for _, m := range c.AllowedMethods {
		if m == "" || strings.ContainsAny(m, " \t,") || strings.ToUpper(m) != m {
			errs = append(errs, fmt.Errorf("%sAllowedMethods: %q is not a method name: want upper case, such as POST", prefix, m))
		}
	}
	for _, lists := range [][]string{c.AllowedHeaders, c.ExposedHeaders} {
		for _, h := range lists {
			if h != "*" && (h == "" || textproto.TrimString(h) != h || strings.ContainsAny(h, " \t,:")) {
				errs = append(errs, fmt.Errorf("%sAllowedHeaders/ExposedHeaders: %q is not a header name", prefix, h))
			}
		}
	}
	if c.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("%sMaxAge: must not be negative, got %v", prefix, c.MaxAge))
	}
	return errors.Join(errs...)
}

// newCORS builds the handler of c (validated).
func newCORS(c *CORS) *cors.Cors {
	o := cors.Options{
		AllowedOrigins:   c.AllowedOrigins,
		AllowedMethods:   c.AllowedMethods,
		AllowedHeaders:   c.AllowedHeaders,
		ExposedHeaders:   c.ExposedHeaders,
		AllowCredentials: c.AllowCredentials,
		// A whole number of seconds, at least 1 when set.
		MaxAge:               int((c.MaxAge + time.Second - 1) / time.Second),
		OptionsSuccessStatus: http.StatusNoContent,
	}
	if len(o.AllowedMethods) == 0 {
		o.AllowedMethods = DefaultCORSMethods
	}
	if len(o.AllowedHeaders) == 0 {
		o.AllowedHeaders = DefaultCORSHeaders
	}
	if len(o.ExposedHeaders) == 0 {
		o.ExposedHeaders = []string{BackendHeader}
	}
	return cors.New(o)
}

// isPreflight reports whether r is a CORS preflight.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
}

// isCORSHeader reports whether a response header (canonical) is one the
// gateway sets itself when it handles CORS.
func isCORSHeader(k string) bool { return strings.HasPrefix(k, "Access-Control-") }
