// Package kong is the registrar for Kong Gateway: it keeps, through Kong's
// Admin API, the upstream, service and route that front a pool (the seed's
// llama2-YiFlow-upstream, ai-YiFlow-proxy and ollama-chat by default) and
// makes the upstream's TideGPU-tagged targets equal to the pool's target
// list. Removals go first, so that a draining or vanished instance leaves
// Kong's balancer before anything else happens; the upstream's health checks
// let Kong eject a target that fails between two syncs. Targets without
// TideGPU's tags are never touched.
package kong

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	kongapi "github.com/tidegpu/tidegpu/internal/kong"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// Registrar syncs one Kong upstream with a pool. Safe for concurrent use;
// syncs are serialized.
type Registrar struct {
	cfg     Config
	client  *kongapi.Client
	hc      *kongapi.Healthchecks
	metrics *metrics

	mu        sync.Mutex
	ensured   bool
	ensuredAt time.Time
}

var _ registrar.Registrar = (*Registrar)(nil)

// New validates cfg, fills its defaults and returns a Registrar. It does not
// call Kong: the first Sync does.
func New(cfg Config) (*Registrar, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := []kongapi.Option{
		kongapi.WithTimeout(cfg.Timeout),
		kongapi.WithUserAgent(cfg.UserAgent),
		kongapi.WithPageSize(cfg.PageSize),
	}
	if cfg.Token != "" {
		opts = append(opts, kongapi.WithToken(cfg.Token))
	}
	if cfg.TLS != nil {
		opts = append(opts, kongapi.WithTLSConfig(cfg.TLS))
	}
	c, err := kongapi.New(cfg.AdminURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("kong registrar: Config.AdminURL: %w", err)
	}
	return &Registrar{
		cfg:     cfg,
		client:  c,
		hc:      healthchecks(cfg.Passive, cfg.Active),
		metrics: newMetrics(cfg.Registry),
	}, nil
}

// String names the registrar without credentials.
func (r *Registrar) String() string { return r.cfg.String() }

// tagsFor returns the tags that mark the pool's targets as ours.
func (r *Registrar) tagsFor(pool string) []string {
	pt := r.cfg.PoolTag
	if pt == "" {
		pt = TagFor("tidegpu-pool:" + pool)
	}
	return []string{ManagedTag, pt}
}

// Sync makes the upstream's targets that carry the pool's tags equal to
// targets: removals first, then additions, then weight corrections. The
// upstream, service and route are checked on the first sync, after any
// error and every EnsureInterval. An error names the failing call and its
// status; Sync may be retried at will and converges once Kong answers.
func (r *Registrar) Sync(ctx context.Context, pool string, targets []registrar.Target) (err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.cfg.Clock.Now()
	defer func() {
		r.metrics.duration.Observe(r.cfg.Clock.Since(start).Seconds())
		if err != nil {
			var invalid *InvalidTargetsError
			if !errors.As(err, &invalid) {
				r.ensured = false // look at the whole setup again next time
			}
			r.metrics.errors.WithLabelValues(reasonOf(err)).Inc()
		}
	}()
	tags := r.tagsFor(pool)
	if !r.ensured || r.cfg.Clock.Since(r.ensuredAt) >= r.cfg.EnsureInterval {
		if err := r.ensure(ctx, tags); err != nil {
			return err
		}
	}
	current, err := r.client.ListTargets(ctx, r.cfg.Upstream, kongapi.ListOptions{Tags: tags})
	if kongapi.IsNotFound(err) { // the upstream vanished behind our back
		if err := r.ensure(ctx, tags); err != nil {
			return err
		}
		current, err = r.client.ListTargets(ctx, r.cfg.Upstream, kongapi.ListOptions{Tags: tags})
	}
	if err != nil {
		return fmt.Errorf("kong registrar: listing targets of upstream %q: %w", r.cfg.Upstream, err)
	}
	plan := PlanTargets(current, targets, tags)
	if err := r.apply(ctx, plan, tags); err != nil {
		return fmt.Errorf("kong registrar: syncing targets of upstream %q: %w", r.cfg.Upstream, err)
	}
	r.metrics.targets.WithLabelValues(r.cfg.Upstream).Set(float64(plan.Want))
	if len(plan.Invalid) > 0 {
		return fmt.Errorf("kong registrar: upstream %q: %w", r.cfg.Upstream, &InvalidTargetsError{Targets: plan.Invalid})
	}
	return nil
}

// ensure creates the upstream, service and route when missing and corrects
// the fields TideGPU manages when they drifted.
func (r *Registrar) ensure(ctx context.Context, tags []string) error {
	if err := r.ensureUpstream(ctx, tags); err != nil {
		return fmt.Errorf("kong registrar: ensuring upstream %q: %w", r.cfg.Upstream, err)
	}
	svc, err := r.ensureService(ctx, tags)
	if err != nil {
		return fmt.Errorf("kong registrar: ensuring service %q: %w", r.cfg.Service, err)
	}
	if err := r.ensureRoute(ctx, svc.ID, tags); err != nil {
		return fmt.Errorf("kong registrar: ensuring route %q: %w", r.cfg.Route, err)
	}
	r.ensured, r.ensuredAt = true, r.cfg.Clock.Now()
	return nil
}

func (r *Registrar) ensureUpstream(ctx context.Context, tags []string) error {
	up, err := r.client.GetUpstream(ctx, r.cfg.Upstream)
	if kongapi.IsNotFound(err) {
		_, err = r.client.CreateUpstream(ctx, kongapi.Upstream{Name: r.cfg.Upstream, Tags: tags, Healthchecks: r.hc})
		if !kongapi.IsConflict(err) { // 409: created meanwhile by someone else; check it below
			return err
		}
		up, err = r.client.GetUpstream(ctx, r.cfg.Upstream)
	}
	if err != nil {
		return err
	}
	if healthchecksDrift(r.hc, up.Healthchecks) {
		_, err = r.client.UpdateUpstream(ctx, up.ID, kongapi.Upstream{Healthchecks: r.hc})
	}
	return err
}

// wantService is the service as TideGPU wants it.
func (r *Registrar) wantService(tags []string) kongapi.Service {
	return kongapi.Service{
		Name:           r.cfg.Service,
		Protocol:       "http",
		Host:           r.cfg.Upstream,
		Path:           r.cfg.ServicePath,
		ConnectTimeout: int(r.cfg.ConnectTimeout.Milliseconds()),
		Tags:           tags,
	}
}

func (r *Registrar) ensureService(ctx context.Context, tags []string) (*kongapi.Service, error) {
	want := r.wantService(tags)
	svc, err := r.client.GetService(ctx, r.cfg.Service)
	if kongapi.IsNotFound(err) {
		svc, err = r.client.CreateService(ctx, want)
		if !kongapi.IsConflict(err) {
			return svc, err
		}
		svc, err = r.client.GetService(ctx, r.cfg.Service)
	}
	if err != nil {
		return nil, err
	}
	if serviceDrift(want, *svc) {
		want.Name, want.Tags = "", nil // leave name and someone else's tags alone
		return r.client.UpdateService(ctx, svc.ID, want)
	}
	return svc, nil
}

func (r *Registrar) ensureRoute(ctx context.Context, serviceID string, tags []string) error {
	want := kongapi.Route{Name: r.cfg.Route, Paths: r.cfg.RoutePaths, Service: &kongapi.Ref{ID: serviceID}, Tags: tags}
	rt, err := r.client.GetRoute(ctx, r.cfg.Route)
	if kongapi.IsNotFound(err) {
		_, err = r.client.CreateRoute(ctx, want)
		if !kongapi.IsConflict(err) {
			return err
		}
		rt, err = r.client.GetRoute(ctx, r.cfg.Route)
	}
	if err != nil {
		return err
	}
	if routeDrift(want, *rt) {
		_, err = r.client.UpdateRoute(ctx, rt.ID, kongapi.Route{Paths: want.Paths, Service: want.Service})
	}
	return err
}

// apply runs the plan: all removals, then additions, then weight updates.
// A phase that hit a failure of Kong itself (unreachable, auth, 429, 5xx)
// stops the sync; a failure of one target (e.g. a foreign target holding a
// wanted address) does not keep the others from converging.
func (r *Registrar) apply(ctx context.Context, p Plan, tags []string) error {
	up := r.cfg.Upstream
	var errs []error
	phases := []struct {
		items []kongapi.Target
		do    func(context.Context, kongapi.Target) error
	}{
		{p.Deletes, func(ctx context.Context, t kongapi.Target) error {
			err := r.client.DeleteTarget(ctx, up, t.ID)
			if kongapi.IsNotFound(err) { // gone already
				return nil
			}
			return err
		}},
		{p.Creates, func(ctx context.Context, t kongapi.Target) error {
			_, err := r.client.CreateTarget(ctx, up, t)
			if kongapi.IsConflict(err) { // exists: ours (a race) or someone else's
				return r.adopt(ctx, t, tags)
			}
			return err
		}},
		{p.Updates, func(ctx context.Context, t kongapi.Target) error {
			_, err := r.client.UpdateTarget(ctx, up, t.ID, kongapi.Target{Weight: t.Weight})
			if kongapi.IsNotFound(err) { // deleted meanwhile: add it again
				_, err = r.client.CreateTarget(ctx, up, kongapi.Target{Target: t.Target, Weight: t.Weight, Tags: tags})
			}
			return err
		}},
	}
	for _, ph := range phases {
		perr := runAll(ctx, r.cfg.Parallelism, ph.items, ph.do)
		errs = append(errs, perr...)
		for _, e := range perr {
			if fatal(e) {
				return joinErrors(errs)
			}
		}
	}
	return joinErrors(errs)
}

// adopt handles a 409 on creating t: the target exists. When it carries our
// tags its weight is corrected; otherwise it belongs to someone else.
func (r *Registrar) adopt(ctx context.Context, t kongapi.Target, tags []string) error {
	cur, err := r.client.GetTarget(ctx, r.cfg.Upstream, t.Target)
	if err != nil {
		return err
	}
	if !kongapi.HasTags(cur.Tags, tags) {
		return &ForeignTargetError{Upstream: r.cfg.Upstream, Address: cur.Target, Tags: tags}
	}
	if cur.Weight != t.Weight {
		_, err = r.client.UpdateTarget(ctx, r.cfg.Upstream, cur.ID, kongapi.Target{Weight: t.Weight})
	}
	return err
}

// fatal reports whether err says Kong itself is failing, so that the rest
// of the sync is not worth trying.
func fatal(err error) bool {
	return kongapi.IsUnreachable(err) || kongapi.IsBadAnswer(err) || kongapi.IsUnauthorized(err) || kongapi.IsThrottled(err) ||
		kongapi.StatusOf(err) >= 500 || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// runAll calls fn for every item with at most par calls at once. After a
// fatal error no new call starts. It returns the errors in item order.
func runAll[T any](ctx context.Context, par int, items []T, fn func(context.Context, T) error) []error {
	if len(items) == 0 {
		return nil
	}
	errs := make([]error, len(items))
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stopped bool
	)
	next := make(chan int)
	for range min(par, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				mu.Lock()
				stop := stopped
				mu.Unlock()
				if stop { // handed over before the fatal error was seen
					continue
				}
				err := fn(ctx, items[i])
				if err != nil {
					errs[i] = err
					if fatal(err) {
						mu.Lock()
						stopped = true
						mu.Unlock()
					}
				}
			}
		}()
	}
	for i := range items {
		mu.Lock()
		stop := stopped
		mu.Unlock()
		if stop || ctx.Err() != nil {
			if !stop {
				errs[i] = ctx.Err()
			}
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// multiError joins errors on one line (a condition message) and still
// unwraps to each of them.
type multiError []error

// Error joins the first few messages with "; ".
func (m multiError) Error() string {
	const show = 3
	var b strings.Builder
	for i, e := range m {
		if i == show {
			fmt.Fprintf(&b, "; and %d more", len(m)-show)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns every error.
func (m multiError) Unwrap() []error { return m }

func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return multiError(errs)
}

// ForeignTargetError says a wanted address is already a target of the
// upstream without TideGPU's tags; TideGPU leaves it alone.
type ForeignTargetError struct {
	Upstream, Address string
	Tags              []string
}

// Error says which address is held and how to resolve it.
func (e *ForeignTargetError) Error() string {
	return fmt.Sprintf("target %s already exists in upstream %q without TideGPU's tags %v: remove it or add the tags so that TideGPU manages it",
		e.Address, e.Upstream, e.Tags)
}

// InvalidTargetsError lists wanted targets whose address Kong cannot take.
type InvalidTargetsError struct {
	Targets []InvalidTarget
}

// Error lists the skipped instances and why.
func (e *InvalidTargetsError) Error() string {
	parts := make([]string, 0, len(e.Targets))
	for _, t := range e.Targets {
		parts = append(parts, fmt.Sprintf("instance %s: %v", t.ID, t.Err))
	}
	return fmt.Sprintf("%d target(s) skipped: %s", len(e.Targets), strings.Join(parts, "; "))
}
