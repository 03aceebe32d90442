package operator_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
)

// A pool at zero under the operator wakes at the first request sent
// through a standalone `tidegpu gateway`: the gateway's activator holds
// the requests and stamps the pool's wake annotation, the operator's
// autoscaler activates the pool, and every held request is answered once
// the first instance is Ready.
func TestScaleToZeroWakesThroughTheAPIServer(t *testing.T) {
	ns := namespace(t)
	gwAddr := freeAddr(t)
	gwAdmin := freeAddr(t)
	// The operator reads the gateway's counters (held requests included)
	// for the pool's autoscaler, as a real installation does.
	startProc(t, "operator", "--kubeconfig", kubeconfig, "--state-dir", t.TempDir(), "--notice-addr", "0",
		"--metrics-bind-address", "0", "--health-probe-bind-address", freeAddr(t), "--admin-addr", "0", "--log-level", "info",
		"--gateway-metrics", "http://"+gwAdmin+"/metrics")
	startProc(t, "gateway", "--kubeconfig", kubeconfig, "--addr", gwAddr, "--admin-addr", gwAdmin, "--activator-queue", "10")
	nn := types.NamespacedName{Namespace: ns, Name: "zero"}
	tp := localPool(ns, "zero", 0)
	tp.Spec.Local = &tidev1.LocalSpec{Command: []string{binary, "sim", "--load-time", "6s"}}
	tp.Spec.Autoscaling = &tidev1.AutoscalingSpec{
		Metrics:     []tidev1.MetricSpec{{Type: tidev1.MetricConcurrency, Target: resource.MustParse("40")}},
		ScaleToZero: &tidev1.ScaleToZeroSpec{IdleWindow: &metav1.Duration{Duration: 30 * time.Second}},
	}
	createPool(t, tp)
	eventually(t, 30*time.Second, "the pool to sit at zero", func() bool {
		tp, ok := getPool(t, nn)
		return ok && tp.Status.Autoscaling != nil && tp.Status.Autoscaling.Recommender == "idle" && len(tp.Status.Instances) == 0
	})
	eventually(t, 10*time.Second, "the gateway to listen", func() bool {
		resp, err := http.Get("http://" + gwAdmin + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan string, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hello %d"}],"stream":%t,"options":{"num_predict":8}}`, i, i%2 == 0)
			req, _ := http.NewRequest(http.MethodPost, "http://"+gwAddr+"/api/chat", strings.NewReader(body))
			req.Header.Set("X-Tidegpu-Pool", ns+"/zero")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"done":true`) {
				errs <- fmt.Sprintf("%d %s", resp.StatusCode, b)
			}
		}()
	}
	// The activator holds 10 (its bound): one more is refused at once.
	eventually(t, 10*time.Second, "the gateway to hold 10 requests", func() bool { return gatewayHeld(gwAdmin, ns+"/zero") == 10 })
	req, _ := http.NewRequest(http.MethodPost, "http://"+gwAddr+"/v1/chat/completions", strings.NewReader(`{"model":"qwen2:0.5b","messages":[]}`))
	req.Header.Set("X-Tidegpu-Pool", ns+"/zero")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), `"code":"activator_queue_full"`) {
		t.Errorf("the 11th request: %d Retry-After %q %s; want 429 with Retry-After in OpenAI's error shape", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("a held request: %s", e)
	}
	t.Logf("10 requests held and answered %s after the first one (6 s model load)", time.Since(start).Round(time.Millisecond))
	tp, _ = getPool(t, nn)
	if !strings.Contains(tp.Annotations[tidev1.WakeAnnotation], "T") {
		t.Errorf("no wake annotation on the pool: %v", tp.Annotations)
	}
	eventually(t, 10*time.Second, "a Scaled event saying what woke the pool", func() bool {
		return hasEvent(t, ns, "Scaled", "waits at the gateway") || hasEvent(t, ns, "Scaled", "activation")
	})
	// Idle again: back to zero after the 30 s window, from the gateway's
	// counters read by the operator.
	idle := time.Now()
	eventually(t, 90*time.Second, "the pool to go back to zero", func() bool {
		tp, ok := getPool(t, nn)
		return ok && tp.Status.Autoscaling != nil && tp.Status.Autoscaling.DesiredReplicas == 0 && len(tp.Status.Instances) == 0
	})
	if took := time.Since(idle); took < 25*time.Second {
		t.Errorf("back to zero %s after the last answer, before the 30 s idle window", took)
	}
	t.Logf("back to zero %s after the last answer", time.Since(idle).Round(time.Second))
}

// gatewayHeld reads a gateway's activator gauge for pool from its metrics.
func gatewayHeld(admin, pool string) int {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	prefix := `tidegpu_gateway_activator_held{pool="` + pool + `"} `
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n := 0
			fmt.Sscanf(v, "%d", &n)
			return n
		}
	}
	return 0
}
