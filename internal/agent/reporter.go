package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultReportTimeout bounds one POST of a notice to the controller.
const DefaultReportTimeout = 5 * time.Second

// ReporterOptions configure a Reporter.
type ReporterOptions struct {
	// Controller is the base URL of the controller's admin API
	// (http://host:port).
	Controller string
	// Pool and InstanceID name the instance.
	Pool, InstanceID string
	// Namespace, when set, is the TidePool's namespace: the notice goes to
	// the operator's notice endpoint,
	// /api/v1/namespaces/{namespace}/pools/{pool}/instances/{id}/notice,
	// with the pool's notice token. Empty: the admin API's route of
	// `tidegpu up`.
	Namespace string
	// Token returns the admin token, read again for every attempt so that a
	// rotated token file is picked up; nil or "" sends none.
	Token func() (string, error)
	// Client does the requests (a client without timeout is bounded by
	// DefaultReportTimeout per attempt).
	Client *http.Client
}

// Reporter tells the controller about a notice:
// POST {controller}/api/v1/[namespaces/{namespace}/]pools/{pool}/instances/{id}/notice with
// {"interruptAt": RFC 3339, "source": "..."} and "Authorization: Bearer
// TOKEN" when a token is set.
type Reporter struct {
	o   ReporterOptions
	url string
}

// NewReporter returns a Reporter.
func NewReporter(o ReporterOptions) (*Reporter, error) {
	u, err := url.Parse(o.Controller)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("controller URL %q: want http(s)://host:port of the admin API", o.Controller)
	}
	if o.Pool == "" || strings.ContainsAny(o.Pool, "/?# ") {
		return nil, fmt.Errorf("pool %q: want a pool name", o.Pool)
	}
	if o.InstanceID == "" || strings.ContainsAny(o.InstanceID, "/?# ") {
		return nil, fmt.Errorf("instance id %q: want an instance id", o.InstanceID)
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	if strings.ContainsAny(o.Namespace, "/?# ") {
		return nil, fmt.Errorf("namespace %q: want a namespace name", o.Namespace)
	}
	base := strings.TrimSuffix(u.String(), "/") + "/api/v1/"
	if o.Namespace != "" {
		base += "namespaces/" + url.PathEscape(o.Namespace) + "/"
	}
	return &Reporter{o: o, url: base + "pools/" + url.PathEscape(o.Pool) + "/instances/" + url.PathEscape(o.InstanceID) + "/notice"}, nil
}

// URL returns the notice endpoint the reporter POSTs to.
func (r *Reporter) URL() string { return r.url }

// ReportError is a notice the controller did not acknowledge.
type ReportError struct {
	// Status is the HTTP status; 0 when no answer came.
	Status int
	// Message is the controller's error message, if it sent one.
	Message string
	// Err is the transport error when no answer came.
	Err error
}

func (e *ReportError) Error() string {
	switch {
	case e.Status == 0:
		return fmt.Sprintf("reporting the notice: %v", e.Err)
	case e.Message != "":
		return fmt.Sprintf("reporting the notice: controller answered %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("reporting the notice: controller answered %d", e.Status)
}

// Unwrap returns the transport error, if any.
func (e *ReportError) Unwrap() error { return e.Err }

// Permanent says whether retrying cannot help: the controller refused the
// request itself (400). Everything else — no answer, 401 (a token being
// rotated), 404 (a controller still loading its pools), 429, 5xx — is
// retried until the deadline.
func (e *ReportError) Permanent() bool { return e.Status == http.StatusBadRequest }

// Report makes one attempt to tell the controller about n.
func (r *Reporter) Report(ctx context.Context, n Notice) error {
	body, err := json.Marshal(struct {
		InterruptAt string `json:"interruptAt"`
		Source      string `json:"source"`
	}{n.At.UTC().Format(time.RFC3339Nano), n.Source})
	if err != nil {
		return fmt.Errorf("encoding the notice: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultReportTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return &ReportError{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if r.o.Token != nil {
		tok, err := r.o.Token()
		if err != nil {
			return &ReportError{Err: fmt.Errorf("reading the admin token: %w", err)}
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := r.o.Client.Do(req)
	if err != nil {
		return &ReportError{Err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return &ReportError{Status: resp.StatusCode, Message: truncateMessage(e.Error)}
}

func truncateMessage(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
