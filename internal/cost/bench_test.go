package cost

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/market"
)

// BenchmarkBusyTransitions measures the gateway's hot path: a 0->1 and a
// 1->0 transition of requests in flight on one backend, through a Meter
// the gateway keeps.
func BenchmarkBusyTransitions(b *testing.B) {
	l := NewLedger(Options{})
	info := p3("hot", "llama")
	eff, list, err := (&Resolver{Catalog: market.DefaultCatalog()}).Prices(info.Query(), t0)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Start(info, t0, eff, list); err != nil {
		b.Fatal(err)
	}
	m := l.Meter("hot")
	at := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.BusyStart(at)
		at = at.Add(3 * time.Millisecond)
		m.BusyEnd(at)
		at = at.Add(time.Millisecond)
	}
}

// BenchmarkBusyTransitionsParallel is the same with many backends at once,
// each with its own meter (no shared lock).
func BenchmarkBusyTransitionsParallel(b *testing.B) {
	l := NewLedger(Options{})
	eff, list, err := (&Resolver{Catalog: market.DefaultCatalog()}).Prices(p3("x").Query(), t0)
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprintf("hot-%d", next.Add(1)) // one instance per goroutine
		if err := l.Start(p3(id), t0, eff, list); err != nil {
			b.Error(err)
			return
		}
		m := l.Meter(id)
		at := t0
		for pb.Next() {
			m.BusyStart(at)
			at = at.Add(3 * time.Millisecond)
			m.BusyEnd(at)
			at = at.Add(time.Millisecond)
		}
	})
}

// BenchmarkAddTokens measures recording one answer's token counts.
func BenchmarkAddTokens(b *testing.B) {
	l := NewLedger(Options{})
	info := p3("hot", "llama")
	eff, list, _ := (&Resolver{Catalog: market.DefaultCatalog()}).Prices(info.Query(), t0)
	if err := l.Start(info, t0, eff, list); err != nil {
		b.Fatal(err)
	}
	m := l.Meter("hot")
	at := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.AddTokens("llama", 120, 340, at)
		at = at.Add(time.Millisecond)
	}
}
