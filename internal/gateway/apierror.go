package gateway

// The gateway's own answers (no route, body too large, no backend, every
// backend failed) are written in the shape of the API the client speaks, so
// that its SDK decodes them as it decodes the backend's own errors:
//
//   - under /v1: OpenAI's error object, {"error": {"message", "type",
//     "param", "code"}} (OpenAI API reference, "Error codes" and the error
//     object the official SDKs decode), param null;
//   - elsewhere (/api/*, /ollama-chat, /): Ollama's {"error": "message"}
//     (Ollama docs/api.md, "Errors").

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// apiError is one of the gateway's own errors: the status, a machine code
// (OpenAI's "code") and the message for people.
type apiError struct {
	status int
	code   string
	msg    string
}

// The gateway's own errors.
var (
	errNoRoute    = apiError{http.StatusNotFound, "no_route", "no route: the gateway serves /, /api/*, /v1/* and */ollama-chat"}
	errMethod     = apiError{http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed"}
	errBodyUnread = apiError{http.StatusBadRequest, "unreadable_body", "cannot read request body"}
	errNoBackend  = apiError{http.StatusServiceUnavailable, "no_backend", "no ready backend"}
	errAllFailed  = apiError{http.StatusBadGateway, "all_backends_failed", "all backends failed"}
)

// bodyTooLarge is the 413 naming the limit and how to raise it.
func bodyTooLarge(limit int64) apiError {
	return apiError{http.StatusRequestEntityTooLarge, "request_too_large",
		"request body too large: the gateway accepts at most " + formatBytes(limit) + " (raise it with --max-body-size)"}
}

// openAIType is the OpenAI error type of a status.
func openAIType(status int) string {
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}

// isOpenAIPath reports whether a client path is the OpenAI API's.
func isOpenAIPath(p string) bool { return p == "/v1" || strings.HasPrefix(p, "/v1/") }

// errorBody encodes e in the shape of the API of path.
func errorBody(path string, e apiError) []byte {
	return ErrorBody(isOpenAIPath(path), openAIType(e.status), e.code, e.msg)
}

// ErrorBody is an error answer in the shape of the API a client speaks:
// OpenAI's {"error": {"message", "type", "param": null, "code"}} when
// openAI, else Ollama's {"error": "message"}. The tenant middleware answers
// with it too, so that every refusal a client gets decodes alike.
func ErrorBody(openAI bool, typ, code, msg string) []byte {
	var v any
	if openAI {
		type obj struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		}
		v = struct {
			Error obj `json:"error"`
		}{obj{Message: msg, Type: typ, Code: code}}
	} else {
		v = struct {
			Error string `json:"error"`
		}{msg}
	}
	b, _ := json.Marshal(v)
	return b
}

// fail answers the client with one of the gateway's own errors, in the
// shape of the API of the request's path.
func (g *Gateway) fail(w http.ResponseWriter, r *http.Request, start time.Time, e apiError) {
	body := errorBody(r.URL.Path, e)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if e.status == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
	g.metrics.request(noBackend, noBackend, e.status, time.Since(start))
}

// formatBytes writes n in the binary unit it is a whole multiple of
// (8Mi, 512Ki), or in bytes.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "Gi"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "Mi"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "Ki"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
