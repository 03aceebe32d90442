package gc

import (
	"reflect"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/provider"
)

func TestOrphans(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	in := func(id, pool string, age time.Duration, st provider.State) provider.Instance {
		return provider.Instance{ID: id, Pool: pool, LaunchedAt: now.Add(-age), State: st}
	}
	insts := []provider.Instance{
		in("a", "ns/live", time.Hour, provider.StateRunning),     // claimed
		in("b", "ns/gone", time.Hour, provider.StateRunning),     // orphan
		in("c", "ns/gone", time.Minute, provider.StatePending),   // orphan but young: wait
		in("d", "ns/gone", time.Hour, provider.StateTerminating), // already going
		in("e", "", time.Hour, provider.StateRunning),            // owned by no pool
	}
	got := Orphans(insts, map[string]bool{"ns/live": true}, now, 5*time.Minute)
	var ids []string
	for _, o := range got {
		ids = append(ids, o.ID)
	}
	if want := []string{"b", "e"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("orphans = %v, want %v", ids, want)
	}
	if got := Orphans(insts, map[string]bool{"ns/live": true, "ns/gone": true, "": true}, now, 0); len(got) != 0 {
		t.Errorf("claimed instances collected: %v", got)
	}
}
