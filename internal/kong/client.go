package kong

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// TokenHeader is the header that carries the admin token when Kong's RBAC
// is on (the default name of rbac_auth_header).
const TokenHeader = "Kong-Admin-Token"

// DefaultTimeout bounds one Admin API call unless WithTimeout says otherwise.
const DefaultTimeout = 10 * time.Second

// maxBody bounds how much of an answer is read.
const maxBody = 32 << 20

// Client calls one Kong Admin API. It is safe for concurrent use.
type Client struct {
	base     string // scheme://host[:port][/prefix], no trailing slash
	display  string // base without user info, for String
	token    string
	ua       string
	hc       *http.Client
	pageSize int
}

// Option configures a Client.
type Option func(*options)

type options struct {
	token    string
	tls      *tls.Config
	timeout  time.Duration
	ua       string
	hc       *http.Client
	pageSize int
}

// WithToken sets the admin token sent as the Kong-Admin-Token header.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTLSConfig sets the TLS configuration (CA pool, client certificate for
// mTLS, server name). The client uses a clone.
func WithTLSConfig(c *tls.Config) Option { return func(o *options) { o.tls = c } }

// WithTimeout bounds each call (default 10 s); 0 keeps the default.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(o *options) { o.ua = ua } }

// WithPageSize sets the page size of list calls (1..1000, default 1000).
func WithPageSize(n int) Option { return func(o *options) { o.pageSize = n } }

// WithHTTPClient replaces the HTTP client entirely (its own transport, TLS
// and timeout); WithTLSConfig and WithTimeout are then ignored.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.hc = hc } }

// New returns a client for the Admin API at baseURL (e.g.
// http://10.0.0.5:8001, or https://kong.example/admin for a prefixed API).
func New(baseURL string, opts ...Option) (*Client, error) {
	o := options{timeout: DefaultTimeout, ua: "tidegpu", pageSize: MaxPageSize}
	for _, opt := range opts {
		opt(&o)
	}
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil {
		return nil, fmt.Errorf("kong admin URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("kong admin URL %q: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("kong admin URL %q: no host", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("kong admin URL %q: must not have a query or fragment", u.Redacted())
	}
	if o.pageSize < 1 || o.pageSize > MaxPageSize {
		return nil, fmt.Errorf("kong page size %d: must be 1..%d", o.pageSize, MaxPageSize)
	}
	if strings.ContainsAny(o.token, "\r\n") {
		return nil, errors.New("kong admin token: must not contain line breaks")
	}
	base := strings.TrimRight(u.String(), "/")
	disp := *u
	disp.User = nil
	hc := o.hc
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if o.tls != nil {
			tr.TLSClientConfig = o.tls.Clone()
		}
		tr.MaxIdleConnsPerHost = 16
		if o.timeout <= 0 {
			o.timeout = DefaultTimeout
		}
		hc = &http.Client{Transport: tr, Timeout: o.timeout}
	}
	return &Client{
		base:     base,
		display:  strings.TrimRight(disp.String(), "/"),
		token:    o.token,
		ua:       o.ua,
		hc:       hc,
		pageSize: o.pageSize,
	}, nil
}

// String names the Admin API without credentials.
func (c *Client) String() string { return "kong admin API " + c.display }

// raw performs one call and returns the body of a 2xx answer.
func (c *Client) raw(ctx context.Context, method, path string, q url.Values, in any) ([]byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("kong admin API: %s %s: encoding body: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, &TransportError{Method: method, Path: path, Err: err}
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
	if c.token != "" {
		req.Header.Set(TokenHeader, c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // drop the URL: the path is named already
		}
		return nil, &TransportError{Method: method, Path: path, Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, &TransportError{Method: method, Path: path, Err: fmt.Errorf("reading answer: %w", err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, parseAPIError(method, path, resp.StatusCode, b)
	}
	return b, nil
}

// do performs one call and decodes a 2xx answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	b, err := c.raw(ctx, method, path, nil, in)
	if err != nil {
		return err
	}
	if out == nil || len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return &TransportError{Method: method, Path: path, Err: fmt.Errorf("decoding answer: %w", err), BadAnswer: true}
	}
	return nil
}

// seg escapes one path segment (a name, id or host:port).
func seg(s string) string { return url.PathEscape(s) }
