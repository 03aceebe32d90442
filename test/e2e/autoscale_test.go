package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// spec.autoscaling on a pool: concurrency from the gateway drives the size
// up under load (clamped to maximum) and back down when the load stops, and
// every decision is recorded as an event and in status.
func TestAutoscalingFollowsConcurrency(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pool.yaml")
	pool := `apiVersion: tidegpu.eja.dev/v1
kind: TidePool
metadata:
  name: auto
spec:
  minimum: 1
  maximum: 3
  autoscaling:
    metrics:
      - type: Concurrency
        target: "2"
    behavior:
      scaleDown:
        stabilizationWindowSeconds: 0
`
	if err := os.WriteFile(file, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startUp(t, "", "-f", file)
	u.waitReady("auto", 1, 30*time.Second)
	l := startLoad(u.gateway, 12)
	took := u.waitReady("auto", 3, 60*time.Second)
	t.Logf("scaled to 3 Ready %s after the load started", took)
	p, _ := u.pool("auto")
	if a := p.Status.Autoscaling; a == nil || a.DesiredReplicas != 3 || a.Recommender == "" {
		t.Errorf("status.autoscaling = %+v, want desired 3 with its recommender", a)
	}
	l.finish()
	l.report(t)
	if n := l.failedBefore.Load(); n != 0 {
		t.Errorf("%d requests failed while scaling", n)
	}
	down := eventually(t, 60*time.Second, "the pool to scale back to 1", func() bool {
		p, ok := u.pool("auto")
		return ok && p.Status.Desired == 1 && len(u.readyIDs("auto")) == 1
	})
	t.Logf("back to 1 %s after the load stopped", down)
	if !u.hasEvent("Scaled", "") {
		t.Errorf("no Scaled event")
	}
}
