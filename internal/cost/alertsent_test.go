package cost

import (
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// Delivered alerts survive a snapshot and a restore, are merged with the
// ones marked since the start, and are forgotten after two months.
func TestAlertMarksSurviveRestore(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 20, 0, 0, 0, 0, time.UTC))
	l := NewLedger(Options{Clock: clk})
	l.MarkAlert("tenant/a/2026-03/50", clk.Now())
	l.MarkAlert("tenant/a/2026-03/50", clk.Now().Add(time.Hour)) // twice: one mark
	l.MarkAlert("tenant/b/2026-01/100", time.Date(2026, 1, 25, 0, 0, 0, 0, time.UTC))
	snap, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// The restarted process marked one alert before it restored.
	r := NewLedger(Options{Clock: clk})
	r.MarkAlert("tenant/c/2026-03/80", clk.Now())
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	got := r.SentAlerts()
	for _, k := range []string{"tenant/a/2026-03/50", "tenant/b/2026-01/100", "tenant/c/2026-03/80"} {
		if !got[k] {
			t.Errorf("%s not marked after the restore: %v", k, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("%d marks, want 3: %v", len(got), got)
	}
	// Two months on, b's January mark is gone from the snapshot.
	clk.Step(10 * 24 * time.Hour)
	if _, err := r.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if r.SentAlerts()["tenant/b/2026-01/100"] {
		t.Errorf("a mark of over 62 days kept")
	}
}

func TestAlertMarksRestoreChecks(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{`{"version":1,"takenAt":"2026-03-02T00:00:00Z","alerts":[{"key":"","at":"2026-03-01T00:00:00Z"}]}`, "alert 0 key is empty"},
		{`{"version":1,"takenAt":"2026-03-02T00:00:00Z","alerts":[{"key":"` + strings.Repeat("k", 300) + `","at":"2026-03-01T00:00:00Z"}]}`, "longer than"},
		{`{"version":1,"takenAt":"2026-03-02T00:00:00Z","alerts":[{"key":"k","at":"0001-01-01T00:00:00Z"}]}`, "out of range"},
	} {
		err := NewLedger(Options{}).Restore([]byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Restore(%.60s…) = %v, want an error with %q", tc.data, err, tc.want)
		}
	}
}
