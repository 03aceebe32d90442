package bootstrap

import (
	"context"
	"fmt"
	"strings"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// Provider decorates a cloud provider: each launch of a pool with
// spec.bootstrap carries the rendered user data. Its optional
// capabilities are those of the wrapped provider (provider.As through
// Unwrap).
type Provider struct {
	inner     provider.Provider
	cloud     string
	noticeURL string
	token     func(pool string) (string, bool)
}

var (
	_ provider.Provider  = (*Provider)(nil)
	_ provider.Unwrapper = (*Provider)(nil)
)

// Wrap decorates p (an aws or tencent provider; cloud is its name).
// noticeURL is the operator's notice endpoint as instances reach it;
// token returns a pool's notice token (pool keys are namespace/name).
func Wrap(p provider.Provider, cloud, noticeURL string, token func(pool string) (string, bool)) *Provider {
	return &Provider{inner: p, cloud: cloud, noticeURL: noticeURL, token: token}
}

// Name is the wrapped provider's.
func (p *Provider) Name() string { return p.inner.Name() }

// Unwrap returns the decorated provider.
func (p *Provider) Unwrap() provider.Provider { return p.inner }

// Launch renders the pool's user data and launches with it.
func (p *Provider) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	if req.Spec != nil && req.Spec.Bootstrap != nil && len(req.UserData) == 0 {
		ns, name, ok := strings.Cut(req.Pool, "/")
		if !ok {
			ns, name = "", req.Pool
		}
		tok, _ := p.token(req.Pool)
		ud, err := Render(Input{Cloud: p.cloud, Namespace: ns, Pool: name, Spec: req.Spec, NoticeURL: p.noticeURL, Token: tok})
		if err != nil {
			return provider.Instance{}, fmt.Errorf("launching for pool %q: %w", req.Pool, err)
		}
		req.UserData = ud
	}
	return p.inner.Launch(ctx, req)
}

// Terminate passes on.
func (p *Provider) Terminate(ctx context.Context, id string) error { return p.inner.Terminate(ctx, id) }

// List passes on.
func (p *Provider) List(ctx context.Context, pool string) ([]provider.Instance, error) {
	return p.inner.List(ctx, pool)
}
