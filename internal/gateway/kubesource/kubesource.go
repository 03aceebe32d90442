// Package kubesource feeds the built-in gateway from the Kubernetes API: it
// watches TidePools and makes the gateway's backends for each pool equal to
// the pool's Ready instances in status, so several `tidegpu gateway`
// replicas follow the pools without polling and without talking to the
// operator.
package kubesource

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/metrics"
	"github.com/tidegpu/tidegpu/internal/scheme"
)

// Backends returns the gateway backends of a pool: its Ready instances with
// an address. Pure.
func Backends(tp *tidev1.TidePool) []gateway.Backend {
	pool := tp.Namespace + "/" + tp.Name
	var out []gateway.Backend
	if !tp.DeletionTimestamp.IsZero() {
		return nil
	}
	// The API server checked spec.serving.metrics; a spec it let through
	// that reads as nothing known is detected instead.
	fam, off, _ := metrics.SpecFamily(tp.Spec.Serving.Metrics)
	queries := metrics.SpecQueries(tp.Spec.Serving.Metrics)
	for _, in := range tp.Status.Instances {
		if in.Phase == tidev1.PhaseReady && in.Address != "" {
			out = append(out, gateway.Backend{ID: in.ID, Pool: pool, Address: in.Address, Weight: int(in.Weight),
				Models: tp.Spec.Serving.Models, MetricsFamily: fam, NoMetrics: off, MetricsQueries: queries})
		}
	}
	return out
}

// Publish replaces one pool's backend set (gateway.Gateway.SetBackends).
type Publish func(pool string, bs []gateway.Backend)

// Run watches TidePools (in namespace, or all when empty) and publishes
// their Ready instances as they change until ctx ends. It returns once the
// first full list has been published, with the watch going on.
func Run(ctx context.Context, cfg *rest.Config, publish Publish, namespace string, logger *slog.Logger) error {
	opts := cache.Options{Scheme: scheme.New()}
	if namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	c, err := cache.New(cfg, opts)
	if err != nil {
		return fmt.Errorf("creating the TidePool watch: %w", err)
	}
	inf, err := c.GetInformer(ctx, &tidev1.TidePool{})
	if err != nil {
		return fmt.Errorf("watching TidePools: %w", err)
	}
	apply := func(obj any) {
		tp, ok := obj.(*tidev1.TidePool)
		if !ok {
			return
		}
		bs := Backends(tp)
		publish(tp.Namespace+"/"+tp.Name, bs)
		logger.Debug("gateway backends updated", "pool", tp.Namespace+"/"+tp.Name, "backends", len(bs))
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    apply,
		UpdateFunc: func(_, obj any) { apply(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if tp, ok := obj.(*tidev1.TidePool); ok {
				publish(tp.Namespace+"/"+tp.Name, nil)
			}
		},
	}); err != nil {
		return err
	}
	go func() {
		if err := c.Start(ctx); err != nil {
			logger.Error("TidePool watch stopped", "err", err)
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("TidePool watch did not sync (is the CRD installed and the kubeconfig allowed to list tidepools?)")
	}
	return nil
}
