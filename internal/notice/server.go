package notice

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tidegpu/tidegpu/internal/admin"
	"github.com/tidegpu/tidegpu/internal/engine"
)

// Path is the notice route: POST with {"interruptAt": RFC 3339, "source":
// "..."} and "Authorization: Bearer POOL-TOKEN".
const Path = "POST /api/v1/namespaces/{namespace}/pools/{pool}/instances/{id}/notice"

// Handler serves only the notice route (and GET /healthz). A missing or
// wrong token answers 401 and does nothing; the token is never logged.
func Handler(tokens *Tokens, router *Router, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		ns, name, id := r.PathValue("namespace"), r.PathValue("pool"), r.PathValue("id")
		pool := ns + "/" + name
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !tokens.Verify(pool, strings.TrimSpace(tok)) {
			logger.Warn("notice refused: missing or wrong pool token", "pool", pool, "instance", id, "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="tidegpu-notice"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong notice token for pool "+pool+": send the pool's token (Secret "+name+"-notice-token) as \"Authorization: Bearer TOKEN\"")
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
		if err != nil {
			writeError(w, http.StatusBadRequest, "reading body: "+err.Error())
			return
		}
		n, err := admin.ParseNotice(body, time.Now())
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		handed, err := router.Deliver(pool, id, n.At, n.Source)
		switch {
		case errors.Is(err, engine.ErrNotFound):
			writeError(w, http.StatusNotFound, err.Error())
		case err != nil:
			writeError(w, http.StatusInternalServerError, err.Error())
		default:
			logger.Info("notice", "pool", pool, "instance", id, "interruptAt", n.At.UTC().Format(time.RFC3339), "source", n.Source, "new", handed)
			writeJSON(w, http.StatusAccepted, map[string]any{"pool": pool, "instance": id, "interruptAt": n.At, "duplicate": !handed})
		}
	})
	return mux
}

// TokenSecretName is the Secret that holds a pool's notice token (key
// TokenKey), owned by the TidePool.
func TokenSecretName(pool string) string { return pool + "-notice-token" }

// TokenKey is the key of the token in its Secret.
const TokenKey = "token"

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
