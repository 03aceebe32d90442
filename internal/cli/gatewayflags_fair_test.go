package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway"
)

func TestFairShareFlags(t *testing.T) {
	tf, err := parseTuning(t)
	if err != nil {
		t.Fatal(err)
	}
	def, _ := tf.tuning()
	if def.BackendMaxInFlight != 0 || def.BackendQueue != gateway.DefaultBackendQueue || def.BackendQueueWait != gateway.DefaultBackendQueueWait {
		t.Fatalf("defaults: %+v", def)
	}
	tf, err = parseTuning(t, "--backend-max-inflight", "16", "--backend-queue", "50", "--backend-queue-wait", "5s")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := tf.tuning()
	var o gateway.Options
	got.Apply(&o)
	if o.BackendMaxInFlight != 16 || o.BackendQueue != 50 || o.BackendQueueWait != 5*time.Second {
		t.Fatalf("applied: %+v", o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--backend-max-inflight", "-1"}, "--backend-max-inflight -1"},
		{[]string{"--backend-queue", "0"}, "--backend-queue 0"},
		{[]string{"--backend-queue-wait", "0s"}, "--backend-queue-wait 0s"},
	} {
		if _, err := parseTuning(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}
