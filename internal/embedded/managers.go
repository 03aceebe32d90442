package embedded

import (
	"context"
	"errors"
	"sort"
	"sync/atomic"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/engine"
)

// managers lets the admin API and the dashboard see the pools of every
// engine of a run (one per provider: local processes, the simulated spot
// market) as one set.
type managers []*engine.Manager

// Pools lists every pool, sorted by name.
func (ms managers) Pools() []engine.PoolView {
	var out []engine.PoolView
	for _, m := range ms {
		out = append(out, m.Pools()...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Pool returns one pool.
func (ms managers) Pool(name string) (engine.PoolView, bool) {
	for _, m := range ms {
		if p, ok := m.Pool(name); ok {
			return p, true
		}
	}
	return engine.PoolView{}, false
}

func (ms managers) owner(pool string) *engine.Manager {
	for _, m := range ms {
		if _, ok := m.Pool(pool); ok {
			return m
		}
	}
	return nil
}

// Reclaim goes to the pool's engine.
func (ms managers) Reclaim(ctx context.Context, pool, id string, notice time.Duration) error {
	if m := ms.owner(pool); m != nil {
		return m.Reclaim(ctx, pool, id, notice)
	}
	return errors.Join(engine.ErrNotFound, errors.New("pool "+pool))
}

// Notice goes to the pool's engine.
func (ms managers) Notice(pool, id string, at time.Time, source string) error {
	if m := ms.owner(pool); m != nil {
		return m.Notice(pool, id, at, source)
	}
	return errors.Join(engine.ErrNotFound, errors.New("pool "+pool))
}

func isSim(pools []tidev1.TidePool, name string) bool {
	for _, p := range pools {
		if p.Name == name {
			return p.Spec.Provider == tidev1.ProviderSim
		}
	}
	return false
}

func equalSim(a, b *tidev1.SimSpec) bool {
	na, nb := int32(-1), int32(-1)
	if a.NoticeSeconds != nil {
		na = *a.NoticeSeconds
	}
	if b.NoticeSeconds != nil {
		nb = *b.NoticeSeconds
	}
	return a.TraceDir == b.TraceDir && a.Binary == b.Binary && a.Compression == b.Compression && na == nb
}

// Wake wakes a pool at zero for the gateway's activator.
func (ms managers) Wake(pool string) bool {
	m := ms.owner(pool)
	return m != nil && m.Wake(pool)
}

// lateWaker is the gateway's Waker, bound to the managers once they exist
// (the gateway starts first); until then no pool can be woken.
type lateWaker struct{ ms atomic.Pointer[managers] }

func (w *lateWaker) set(ms managers) { w.ms.Store(&ms) }

func (w *lateWaker) Wake(pool string) bool {
	ms := w.ms.Load()
	return ms != nil && ms.Wake(pool)
}
