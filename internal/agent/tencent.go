package agent

import (
	"context"
	"fmt"
	"net/http"
)

// Tencent Cloud metadata paths
// (https://www.tencentcloud.com/document/product/213/32487 and
// https://www.tencentcloud.com/document/product/213/4934).
const (
	tencentTerminationPath = "/latest/meta-data/spot/termination-time"
	tencentInstanceIDPath  = "/latest/meta-data/instance-id"
)

// TencentOptions configure a Tencent source.
type TencentOptions struct {
	// Endpoint is the metadata service's base URL (DefaultTencentEndpoint
	// when empty).
	Endpoint string
	// Client does the requests (http.DefaultClient when nil).
	Client *http.Client
}

// Tencent reads Tencent Cloud's CVM metadata service: the spot instance's
// termination time and the instance id. The service needs no token.
type Tencent struct {
	o TencentOptions
}

var _ Source = (*Tencent)(nil)

// NewTencent returns a Tencent source.
func NewTencent(o TencentOptions) (*Tencent, error) {
	if o.Endpoint == "" {
		o.Endpoint = DefaultTencentEndpoint
	}
	ep, err := parseEndpoint(o.Endpoint)
	if err != nil {
		return nil, err
	}
	o.Endpoint = ep
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	return &Tencent{o: o}, nil
}

// Poll reads spot/termination-time: 404 while the instance is not being
// reclaimed (or is not a spot instance), else the termination time.
func (t *Tencent) Poll(ctx context.Context) (*Notice, error) {
	status, _, body, err := get(ctx, t.o.Client, http.MethodGet, t.o.Endpoint, tencentTerminationPath, nil)
	switch {
	case err != nil:
		return nil, err
	case status == http.StatusNotFound:
		return nil, nil
	case status != http.StatusOK:
		return nil, &MetadataError{Path: tencentTerminationPath, Status: status}
	}
	at, err := ParseTencentTermination(body)
	if err != nil {
		return nil, err
	}
	return &Notice{Kind: KindInterruption, Action: "terminate", At: at, Source: SourceTencent}, nil
}

// InstanceID reads the instance-id item.
func (t *Tencent) InstanceID(ctx context.Context) (string, error) {
	status, _, body, err := get(ctx, t.o.Client, http.MethodGet, t.o.Endpoint, tencentInstanceIDPath, nil)
	switch {
	case err != nil:
		return "", err
	case status == http.StatusNotFound:
		return "", fmt.Errorf("metadata %s: %w", tencentInstanceIDPath, ErrNotFound)
	case status != http.StatusOK:
		return "", &MetadataError{Path: tencentInstanceIDPath, Status: status}
	}
	return ParseInstanceID(body)
}
