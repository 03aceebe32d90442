package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Source is a cloud's metadata service as the agent sees it.
type Source interface {
	// Poll returns the most urgent notice now present, or nil when there is
	// none. It may return a notice together with an error when one of
	// several items could not be read.
	Poll(ctx context.Context) (*Notice, error)
	// InstanceID returns the id of the instance the agent runs on.
	InstanceID(ctx context.Context) (string, error)
}

// Default metadata endpoints.
const (
	// DefaultAWSEndpoint is the IPv4 address of EC2's instance metadata
	// service.
	DefaultAWSEndpoint = "http://169.254.169.254"
	// DefaultTencentEndpoint is Tencent Cloud's metadata service.
	DefaultTencentEndpoint = "http://metadata.tencentyun.com"
)

// DefaultMetadataTimeout bounds one request to a metadata service; the
// service is local to the host and answers in milliseconds.
const DefaultMetadataTimeout = 2 * time.Second

// maxMetadataBody bounds what is read of a metadata answer.
const maxMetadataBody = 64 << 10

// MetadataError is an unexpected answer of a metadata service.
type MetadataError struct {
	// Path is the metadata path asked for.
	Path string
	// Status is the HTTP status; 0 when no answer came.
	Status int
	// Err is the transport error when no answer came.
	Err error
}

func (e *MetadataError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("metadata %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("metadata %s: unexpected status %d", e.Path, e.Status)
}

// Unwrap returns the transport error, if any.
func (e *MetadataError) Unwrap() error { return e.Err }

// ErrNotFound is a 404 from a metadata service for an item that must be
// there (instance-id): not on this cloud, or not a spot instance.
var ErrNotFound = errors.New("not found")

// parseEndpoint checks a metadata endpoint: http(s)://host[:port], no path.
func parseEndpoint(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("metadata endpoint %q: %v", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", fmt.Errorf("metadata endpoint %q: want http://host[:port]", s)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// get does one metadata request and reads the answer (bounded).
func get(ctx context.Context, client *http.Client, method, base, path string, header http.Header) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultMetadataTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return 0, nil, nil, &MetadataError{Path: path, Err: err}
	}
	for k, v := range header {
		for _, x := range v {
			req.Header.Add(k, x)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, &MetadataError{Path: path, Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBody))
	if err != nil {
		return 0, nil, nil, &MetadataError{Path: path, Err: fmt.Errorf("reading the answer: %w", err)}
	}
	return resp.StatusCode, resp.Header, body, nil
}

// Cloud names a metadata service.
type Cloud string

// Clouds the agent knows.
const (
	CloudAWS     Cloud = "aws"
	CloudTencent Cloud = "tencent"
)

// Detect finds which metadata service answers: AWS IMDSv2 (a session token
// is issued) at awsEndpoint, else Tencent (an instance-id is served) at
// tencentEndpoint. It errors when neither answers.
func Detect(ctx context.Context, client *http.Client, awsEndpoint, tencentEndpoint string) (Cloud, error) {
	if client == nil {
		client = http.DefaultClient
	}
	var errs []error
	status, hdr, body, err := get(ctx, client, http.MethodPut, awsEndpoint, awsTokenPath, http.Header{awsTTLHeader: {"10"}})
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("aws at %s: %w", awsEndpoint, err))
	case status == http.StatusOK && len(body) > 0 && hdr.Get(awsTTLHeader) != "":
		return CloudAWS, nil
	default:
		errs = append(errs, fmt.Errorf("aws at %s: PUT %s answered %d", awsEndpoint, awsTokenPath, status))
	}
	status, _, body, err = get(ctx, client, http.MethodGet, tencentEndpoint, tencentInstanceIDPath, nil)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("tencent at %s: %w", tencentEndpoint, err))
	case status == http.StatusOK:
		if _, perr := ParseInstanceID(body); perr == nil {
			return CloudTencent, nil
		}
		errs = append(errs, fmt.Errorf("tencent at %s: instance-id is not an instance id", tencentEndpoint))
	default:
		errs = append(errs, fmt.Errorf("tencent at %s: GET %s answered %d", tencentEndpoint, tencentInstanceIDPath, status))
	}
	return "", fmt.Errorf("no metadata service found: %w", errors.Join(errs...))
}
