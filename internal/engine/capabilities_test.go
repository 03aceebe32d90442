package engine

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakeclock "k8s.io/utils/clock/testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/local"
	"github.com/tidegpu/tidegpu/internal/provider/metered"
)

// Behind metered.Wrap (the operator always wraps), a pool with
// spec.placement on a provider without offerings (the local one) launches
// its instances as an unplaced pool does: the decorator does not claim the
// offerings its provider lacks. It used to, and such a pool launched
// nothing.
func TestPlacedPoolOnMeteredLocalProviderLaunches(t *testing.T) {
	clk := fakeclock.NewFakeClock(t0)
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	lp, err := local.New(local.Options{StateDir: t.TempDir(), StopGrace: time.Second, Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := lp.Close(ctx); err != nil {
			t.Errorf("closing the local provider: %v", err)
		}
	})
	prov := metered.Wrap(lp, metered.NewMetrics(nil))
	if _, ok := provider.As[provider.OfferingSource](prov); ok {
		t.Fatal("the metered local provider reports offerings; the local provider has none")
	}
	spec := tidev1.TidePoolSpec{Provider: tidev1.ProviderLocal, Minimum: 2, Maximum: 2,
		InstanceChargeType: tidev1.ChargeSpot,
		Local:              &tidev1.LocalSpec{Command: []string{"sleep", "30"}},
		Placement:          &tidev1.PlacementSpec{Strategy: "LowestPrice"}}
	drv, err := NewDriver(Options{Provider: prov, Registrar: &gateway{inFlight: -1},
		Recorder: events.NewRecorder(100, clk, discard), Clock: clk, Logger: discard},
		&tidev1.TidePool{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1}, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	drv.Round(context.Background())

	insts, err := lp.List(context.Background(), "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 2 {
		t.Fatalf("the local provider runs %d instances of the pool, want 2", len(insts))
	}
	if got := drv.Status().Instances; len(got) != 2 {
		t.Errorf("the pool's status shows %d instances, want 2", len(got))
	}
}
