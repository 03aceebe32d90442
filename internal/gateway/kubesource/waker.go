package kubesource

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/scheme"
)

// wakeEvery bounds the annotation patches per pool: held requests arrive
// in bursts, the operator needs one wake-up.
const wakeEvery = 2 * time.Second

// Waker wakes a pool at zero for a standalone gateway's activator: the
// gateway runs as its own replicas, so it asks the operator through the
// API server, by stamping the TidePool's tidegpu.eja.dev/wake annotation
// with the time; the operator's reconciler sees the change and has the
// pool's autoscaler evaluate at once. It needs patch on tidepools.
type Waker struct {
	c      client.Client
	log    *slog.Logger
	now    func() time.Time
	mu     sync.Mutex
	recent map[string]wakeState // by "namespace/name"
}

type wakeState struct {
	at  time.Time
	can bool
}

// NewWaker returns a Waker talking to the API server of cfg.
func NewWaker(cfg *rest.Config, logger *slog.Logger) (*Waker, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, fmt.Errorf("API client for waking pools: %w", err)
	}
	return &Waker{c: c, log: logger, now: time.Now, recent: map[string]wakeState{}}, nil
}

// Wake implements gateway.Waker for pool "namespace/name": true when the
// pool autoscales and may grow, after its annotation was stamped (at most
// every wakeEvery per pool).
func (w *Waker) Wake(pool string) bool {
	ns, name, ok := strings.Cut(pool, "/")
	if !ok {
		return false
	}
	now := w.now()
	w.mu.Lock()
	st, seen := w.recent[pool]
	w.mu.Unlock()
	if seen && now.Sub(st.at) < wakeEvery {
		return st.can
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var tp tidev1.TidePool
	can := false
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &tp); err != nil {
		w.log.Warn("gateway: cannot read the pool to wake", "pool", pool, "err", err)
	} else if tp.Spec.Autoscaling != nil && tp.Spec.Maximum > 0 && tp.DeletionTimestamp.IsZero() {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, tidev1.WakeAnnotation, now.UTC().Format(time.RFC3339Nano))
		if err := w.c.Patch(ctx, &tp, client.RawPatch(types.MergePatchType, patch)); err != nil {
			w.log.Warn("gateway: cannot wake the pool", "pool", pool, "err", err)
		} else {
			can = true
			w.log.Info("gateway: woke a pool with no ready instance", "pool", pool)
		}
	}
	w.mu.Lock()
	w.recent[pool] = wakeState{at: now, can: can}
	w.mu.Unlock()
	return can
}
