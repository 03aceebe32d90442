package kong

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"
)

// maxMessage bounds the message kept from an error body.
const maxMessage = 512

// APIError is a non-2xx answer of the Admin API.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Message is Kong's "message" field, or the start of the body when it
	// is not Kong's JSON error shape.
	Message string
	// Name is Kong's error name ("unique constraint violation",
	// "schema violation", ...) when given.
	Name string
	// Method and Path name the call (the path without the base URL).
	Method, Path string
}

// Error names the call and the status; for 401/403 it says to check the
// admin token.
func (e *APIError) Error() string {
	op := strings.TrimSpace(e.Method + " " + e.Path)
	msg := e.Message
	if msg == "" {
		msg = e.Name
	}
	if e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden {
		return fmt.Sprintf("kong admin API: %s: authentication failed (HTTP %d): check the Kong admin token: %s",
			op, e.Status, msg)
	}
	return fmt.Sprintf("kong admin API: %s: HTTP %d %s: %s", op, e.Status, http.StatusText(e.Status), msg)
}

// TransportError says the Admin API could not be reached (connection
// refused, timeout, TLS failure) or gave an answer that is not the Admin
// API's (BadAnswer: e.g. HTML from a proxy, a broken list page).
type TransportError struct {
	Method, Path string
	Err          error
	BadAnswer    bool
}

// Error names the call and the cause.
func (e *TransportError) Error() string {
	if e.BadAnswer {
		return fmt.Sprintf("kong admin API: %s %s: bad answer: %v", e.Method, e.Path, e.Err)
	}
	return fmt.Sprintf("kong admin API unreachable: %s %s: %v", e.Method, e.Path, e.Err)
}

// Unwrap returns the cause.
func (e *TransportError) Unwrap() error { return e.Err }

// StatusOf returns the HTTP status of an *APIError in err's chain, or 0.
func StatusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// hasStatus reports whether any *APIError in err's tree (joined errors
// included) has a status for which match is true.
func hasStatus(err error, match func(int) bool) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *APIError:
		if match(e.Status) {
			return true
		}
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			if hasStatus(inner, match) {
				return true
			}
		}
		return false
	}
	return hasStatus(errors.Unwrap(err), match)
}

// IsNotFound reports whether err is or wraps a 404 answer.
func IsNotFound(err error) bool {
	return hasStatus(err, func(s int) bool { return s == http.StatusNotFound })
}

// IsConflict reports whether err is or wraps a 409 answer (unique violation).
func IsConflict(err error) bool {
	return hasStatus(err, func(s int) bool { return s == http.StatusConflict })
}

// IsUnauthorized reports whether err is or wraps a 401 or 403 answer: the
// admin token is missing, wrong or lacks the permission.
func IsUnauthorized(err error) bool {
	return hasStatus(err, func(s int) bool { return s == http.StatusUnauthorized || s == http.StatusForbidden })
}

// IsThrottled reports whether err is or wraps a 429 answer.
func IsThrottled(err error) bool {
	return hasStatus(err, func(s int) bool { return s == http.StatusTooManyRequests })
}

// IsUnreachable reports whether err is or wraps a *TransportError for a
// call that got no answer.
func IsUnreachable(err error) bool {
	var te *TransportError
	return errors.As(err, &te) && !te.BadAnswer
}

// IsBadAnswer reports whether err is or wraps a *TransportError for an
// answer that could not be read as the Admin API's.
func IsBadAnswer(err error) bool {
	var te *TransportError
	return errors.As(err, &te) && te.BadAnswer
}

// kongError is the JSON shape of Kong's error bodies, e.g.
// {"code":5,"name":"unique constraint violation","message":"UNIQUE violation detected on '{name=\"x\"}'","fields":{"name":"x"}}.
type kongError struct {
	Message json.RawMessage `json:"message"`
	Name    string          `json:"name"`
}

// parseAPIError builds the error for a non-2xx answer from its body.
func parseAPIError(method, path string, status int, body []byte) *APIError {
	e := &APIError{Status: status, Method: method, Path: path}
	var ke kongError
	if json.Unmarshal(body, &ke) == nil {
		e.Name = ke.Name
		var s string
		if json.Unmarshal(ke.Message, &s) == nil {
			e.Message = s
		} else if len(ke.Message) > 0 && string(ke.Message) != "null" {
			e.Message = string(ke.Message)
		}
	} else {
		e.Message = strings.TrimSpace(string(body))
	}
	e.Message = truncate(e.Message, maxMessage)
	if e.Message == "" && e.Name == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
