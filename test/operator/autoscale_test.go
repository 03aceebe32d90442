package operator_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/engine"
)

// TestOperatorAutoscalesOnGatewayConcurrency: under `tidegpu operator`, a
// pool with spec.autoscaling on concurrency reads the signals of two
// standalone gateway replicas (`tidegpu gateway --kubeconfig`, read
// through their own /metrics with --gateway-metrics): 12 clients through
// the two replicas scale it 1 → 3 (the maximum), and it scales back to 1
// when they stop, each decision in status.autoscaling and a Scaled event.
func TestOperatorAutoscalesOnGatewayConcurrency(t *testing.T) {
	ns := namespace(t)
	gwA, gwB := freeAddr(t), freeAddr(t)
	adminA, adminB := freeAddr(t), freeAddr(t)
	startProc(t, "operator", "--kubeconfig", kubeconfig, "--state-dir", t.TempDir(),
		"--metrics-bind-address", "0", "--health-probe-bind-address", freeAddr(t), "--admin-addr", "0", "--log-level", "info",
		"--gateway-metrics", "http://"+adminA+"/metrics,http://"+adminB+"/metrics")
	startProc(t, "gateway", "--kubeconfig", kubeconfig, "--addr", gwA, "--admin-addr", adminA)
	startProc(t, "gateway", "--kubeconfig", kubeconfig, "--addr", gwB, "--admin-addr", adminB)

	tp := localPool(ns, "auto", 1)
	tp.Spec.Maximum = 3
	zero := int32(0)
	tp.Spec.Autoscaling = &tidev1.AutoscalingSpec{
		Metrics:  []tidev1.MetricSpec{{Type: tidev1.MetricConcurrency, Target: resource.MustParse("2")}},
		Behavior: &tidev1.Behavior{ScaleDown: &tidev1.ScalingRules{StabilizationWindowSeconds: &zero}},
	}
	createPool(t, tp)
	nn := types.NamespacedName{Namespace: ns, Name: "auto"}
	eventually(t, 30*time.Second, "1 Ready instance", func() bool {
		p, ok := getPool(t, nn)
		return ok && len(readyIDs(p)) == 1
	})
	for _, gw := range []string{gwA, gwB} {
		eventually(t, 10*time.Second, "gateway "+gw+" to answer 200", func() bool { return chatOnce(context.Background(), gw) == http.StatusOK })
	}
	eventually(t, 20*time.Second, "the BalancingSignals condition from the gateway replicas", func() bool {
		p, ok := getPool(t, nn)
		c := meta.FindStatusCondition(p.Status.Conditions, engine.ConditionBalancingSignals)
		return ok && c != nil && strings.Contains(c.Message, "2 gateway replicas")
	})

	// 12 clients, 6 through each replica, each with one request in flight
	// at any time: concurrency 12 over a target of 2 per instance wants 6,
	// clamped to the maximum, 3.
	ctx, cancel := context.WithCancel(context.Background())
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range 12 {
		gw := gwA
		if i%2 == 1 {
			gw = gwB
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				switch code := chatOnce(ctx, gw); {
				case code == http.StatusOK:
					ok.Add(1)
				case ctx.Err() == nil:
					failed.Add(1)
				}
			}
		})
	}
	stop := func() { cancel(); wg.Wait() }
	defer stop()
	up := eventually(t, 60*time.Second, "3 Ready instances under load", func() bool {
		p, ok := getPool(t, nn)
		return ok && len(readyIDs(p)) == 3
	})
	p, _ := getPool(t, nn)
	a := p.Status.Autoscaling
	if a == nil || a.DesiredReplicas != 3 || a.Metric != "concurrency" || a.Recommender == "" {
		t.Errorf("status.autoscaling %+v; want desired 3 from concurrency", a)
	}
	t.Logf("1 → 3 Ready %s after the load started; status.autoscaling %+v", up, a)
	stop()
	if failed.Load() != 0 {
		t.Errorf("%d of %d requests failed while scaling up", failed.Load(), ok.Load()+failed.Load())
	}

	down := eventually(t, 60*time.Second, "back to 1 instance after the load", func() bool {
		p, ok := getPool(t, nn)
		return ok && p.Status.Autoscaling != nil && p.Status.Autoscaling.DesiredReplicas == 1 && len(readyIDs(p)) == 1 && len(p.Status.Instances) == 1
	})
	p, _ = getPool(t, nn)
	t.Logf("3 → 1 %s after the load stopped; status.autoscaling %+v", down, p.Status.Autoscaling)
	eventually(t, 10*time.Second, "Scaled events up and down", func() bool {
		return hasEvent(t, ns, "Scaled", "→ 3 instances") && hasEvent(t, ns, "Scaled", "→ 1 instances")
	})
}

// chatOnce sends one chat through the gateway at addr and returns the
// status code (0 if none).
func chatOnce(ctx context.Context, addr string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/ollama-chat",
		strings.NewReader(`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"stream":false}`))
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
