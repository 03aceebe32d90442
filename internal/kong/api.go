package kong

import (
	"context"
	"errors"
)

var errEmptyKey = errors.New("kong admin API: empty name or id")

// The entity methods below follow the Admin API reference
// (https://docs.konghq.com/gateway/api/admin-oss/latest/): GET/PATCH/DELETE
// on /{entities}/{name_or_id}, POST and paginated GET on /{entities}.

// GetUpstream returns the upstream with that name or id.
func (c *Client) GetUpstream(ctx context.Context, nameOrID string) (*Upstream, error) {
	if nameOrID == "" {
		return nil, errEmptyKey
	}
	return call[Upstream](ctx, c, "GET", "/upstreams/"+seg(nameOrID), nil)
}

// CreateUpstream creates an upstream (409 when the name is taken).
func (c *Client) CreateUpstream(ctx context.Context, u Upstream) (*Upstream, error) {
	return call[Upstream](ctx, c, "POST", "/upstreams", u)
}

// UpdateUpstream changes the fields set in u (PATCH).
func (c *Client) UpdateUpstream(ctx context.Context, nameOrID string, u Upstream) (*Upstream, error) {
	if nameOrID == "" {
		return nil, errEmptyKey
	}
	return call[Upstream](ctx, c, "PATCH", "/upstreams/"+seg(nameOrID), u)
}

// DeleteUpstream deletes an upstream and, with it, its targets.
func (c *Client) DeleteUpstream(ctx context.Context, nameOrID string) error {
	if nameOrID == "" {
		return errEmptyKey
	}
	return c.do(ctx, "DELETE", "/upstreams/"+seg(nameOrID), nil, nil)
}

// ListUpstreams returns every upstream carrying opts.Tags.
func (c *Client) ListUpstreams(ctx context.Context, opts ListOptions) ([]Upstream, error) {
	return list(ctx, c, "/upstreams", false, opts, func(u *Upstream) []string { return u.Tags })
}

// GetService returns the service with that name or id.
func (c *Client) GetService(ctx context.Context, nameOrID string) (*Service, error) {
	if nameOrID == "" {
		return nil, errEmptyKey
	}
	return call[Service](ctx, c, "GET", "/services/"+seg(nameOrID), nil)
}

// CreateService creates a service (409 when the name is taken).
func (c *Client) CreateService(ctx context.Context, s Service) (*Service, error) {
	return call[Service](ctx, c, "POST", "/services", s)
}

// UpdateService changes the fields set in s (PATCH).
func (c *Client) UpdateService(ctx context.Context, nameOrID string, s Service) (*Service, error) {
	if nameOrID == "" {
		return nil, errEmptyKey
	}
	return call[Service](ctx, c, "PATCH", "/services/"+seg(nameOrID), s)
}

// DeleteService deletes a service (400 while routes still reference it).
func (c *Client) DeleteService(ctx context.Context, nameOrID string) error {
	if nameOrID == "" {
		return errEmptyKey
	}
	return c.do(ctx, "DELETE", "/services/"+seg(nameOrID), nil, nil)
}

// ListServices returns every service carrying opts.Tags.
func (c *Client) ListServices(ctx context.Context, opts ListOptions) ([]Service, error) {
	return list(ctx, c, "/services", false, opts, func(s *Service) []string { return s.Tags })
}

// GetRoute returns the route with that name or id.
func (c *Client) GetRoute(ctx context.Context, nameOrID string) (*Route, error) {
	if nameOrID == "" {
		return nil, errEmptyKey
	}
	return call[Route](ctx, c, "GET", "/routes/"+seg(nameOrID), nil)
}

// CreateRoute creates a route; r.Service names its service by id.
func (c *Client) CreateRoute(ctx context.Context, r Route) (*Route, error) {
	return call[Route](ctx, c, "POST", "/routes", r)
}

// UpdateRoute changes the fields set in r (PATCH).
func (c *Client) UpdateRoute(ctx context.Context, nameOrID string, r Route) (*Route, error) {
	if nameOrID == "" {
		return nil, errEmptyKey
	}
	return call[Route](ctx, c, "PATCH", "/routes/"+seg(nameOrID), r)
}

// DeleteRoute deletes a route.
func (c *Client) DeleteRoute(ctx context.Context, nameOrID string) error {
	if nameOrID == "" {
		return errEmptyKey
	}
	return c.do(ctx, "DELETE", "/routes/"+seg(nameOrID), nil, nil)
}

// ListRoutes returns every route carrying opts.Tags.
func (c *Client) ListRoutes(ctx context.Context, opts ListOptions) ([]Route, error) {
	return list(ctx, c, "/routes", false, opts, func(r *Route) []string { return r.Tags })
}

// targetsPath is /upstreams/{upstream}/targets.
func targetsPath(upstream string) string { return "/upstreams/" + seg(upstream) + "/targets" }

// ListTargets returns every target of the upstream carrying opts.Tags. Kong
// ignores ?tags= on this nested list, so the filter is applied here; the
// pagination offset is re-sent with our own size, since Kong's "next" link
// for nested lists drops it.
func (c *Client) ListTargets(ctx context.Context, upstream string, opts ListOptions) ([]Target, error) {
	if upstream == "" {
		return nil, errEmptyKey
	}
	return list(ctx, c, targetsPath(upstream), true, opts, func(t *Target) []string { return t.Tags })
}

// GetTarget returns the upstream's target with that id or host:port.
func (c *Client) GetTarget(ctx context.Context, upstream, idOrTarget string) (*Target, error) {
	if upstream == "" || idOrTarget == "" {
		return nil, errEmptyKey
	}
	return call[Target](ctx, c, "GET", targetsPath(upstream)+"/"+seg(idOrTarget), nil)
}

// CreateTarget adds a target with POST. Since Kong 3.0 a target that exists
// already answers 409; use UpdateTarget for it.
func (c *Client) CreateTarget(ctx context.Context, upstream string, t Target) (*Target, error) {
	if upstream == "" {
		return nil, errEmptyKey
	}
	return call[Target](ctx, c, "POST", targetsPath(upstream), t)
}

// UpdateTarget changes an existing target with PATCH (weight, tags).
func (c *Client) UpdateTarget(ctx context.Context, upstream, idOrTarget string, t Target) (*Target, error) {
	if upstream == "" || idOrTarget == "" {
		return nil, errEmptyKey
	}
	return call[Target](ctx, c, "PATCH", targetsPath(upstream)+"/"+seg(idOrTarget), t)
}

// DeleteTarget removes a target from the upstream's balancer.
func (c *Client) DeleteTarget(ctx context.Context, upstream, idOrTarget string) error {
	if upstream == "" || idOrTarget == "" {
		return errEmptyKey
	}
	return c.do(ctx, "DELETE", targetsPath(upstream)+"/"+seg(idOrTarget), nil, nil)
}

// call performs one call and decodes its answer into a new T.
func call[T any](ctx context.Context, c *Client, method, path string, in any) (*T, error) {
	var v T
	if err := c.do(ctx, method, path, in, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
