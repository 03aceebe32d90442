package operator_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/types"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/test/testbin"
)

// simTokens sums the tokens the simulators of tp generated, from their own
// counters (vllm:prompt_tokens_total and vllm:generation_tokens_total, the
// names of vLLM's metrics documentation).
func simTokens(t *testing.T, tp *tidev1.TidePool) float64 {
	t.Helper()
	var sum float64
	for _, in := range tp.Status.Instances {
		resp, err := http.Get("http://" + in.Address + "/metrics")
		if err != nil {
			t.Fatalf("scraping %s: %v", in.ID, err)
		}
		parser := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("parsing %s's metrics: %v", in.ID, err)
		}
		for _, name := range []string{"vllm:prompt_tokens_total", "vllm:generation_tokens_total"} {
			if f := fams[name]; f != nil {
				for _, m := range f.Metric {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// tokenCost is the operator's $/Mtok of a pool by basis, with the tokens.
func tokenCost(t *testing.T, admin, pool string) map[string][2]float64 {
	resp, err := http.Get("http://" + admin + "/api/v1/cost")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var rep struct {
		Pools []struct {
			Name   string `json:"name"`
			PerTok []struct {
				Basis  string  `json:"basis"`
				Value  float64 `json:"value"`
				Tokens float64 `json:"tokens"`
			} `json:"costPerMillionTokens"`
		} `json:"pools"`
	}
	if json.NewDecoder(resp.Body).Decode(&rep) != nil {
		return nil
	}
	out := map[string][2]float64{}
	for _, p := range rep.Pools {
		if p.Name == pool {
			for _, c := range p.PerTok {
				v := out[c.Basis]
				out[c.Basis] = [2]float64{v[0] + c.Value, v[1] + c.Tokens}
			}
		}
	}
	return out
}

// streamNoUsage streams a chat through gw without include_usage and
// returns how many usage chunks the client got (OpenAI API reference,
// "Create chat completion": the usage chunk comes only when asked for).
func streamNoUsage(gw string) (usageChunks int, err error) {
	resp, err := http.Post("http://"+gw+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"qwen2:0.5b","stream":true,"max_tokens":12,"messages":[{"role":"user","content":"count my tokens"}]}`))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.Equal(line, []byte("data: [DONE]")) {
			done = true
		}
		if bytes.HasPrefix(line, []byte("data: {")) && bytes.Contains(line, []byte(`"usage":{`)) {
			usageChunks++
		}
	}
	if !done {
		return usageChunks, fmt.Errorf("stream cut before [DONE]: %v", sc.Err())
	}
	return usageChunks, nil
}

// Tokens served through two `tidegpu gateway` replicas reach the
// operator's ledger exactly, and its cost report has $/Mtok on both bases,
// across a graceful restart of one replica in the middle of the traffic.
func TestGatewayReplicasReportTokensToTheOperator(t *testing.T) {
	ns := namespace(t)
	state := t.TempDir()
	// The operator is started again on fresh ports if one FreeAddr saw free
	// was taken before it listened (testbin.LostAddr): the gateways report
	// to its admin address, so it must be known before they start.
	var adminAddr string
	for try := 1; ; try++ {
		adminAddr = freeAddr(t)
		p := startProc(t, "operator", "--kubeconfig", kubeconfig, "--state-dir", state, "--metrics-bind-address", "0",
			"--health-probe-bind-address", freeAddr(t), "--admin-addr", adminAddr, "--ledger-namespace", ns)
		if try >= 3 || !testbin.LostAddr(p, adminAddr, 30*time.Second) {
			break
		}
	}
	gwAddrs := []string{freeAddr(t), freeAddr(t)}
	startGW := func(addr string) *proc {
		return startProc(t, "gateway", "--kubeconfig", kubeconfig, "--namespace", ns, "--addr", addr, "--admin-addr", "",
			"--report-usage-to", "http://"+adminAddr)
	}
	gws := []*proc{startGW(gwAddrs[0]), startGW(gwAddrs[1])}
	tp := localPool(ns, "tok", 2)
	tp.Spec.Pricing = &tidev1.PricingSpec{SpotPerHour: "3.6", OnDemandPerHour: "7.2"}
	createPool(t, tp)
	nn := types.NamespacedName{Namespace: ns, Name: "tok"}
	eventually(t, 30*time.Second, "2 Ready instances", func() bool {
		cur, ok := getPool(t, nn)
		return ok && len(readyIDs(cur)) == 2
	})
	for _, gw := range gwAddrs {
		eventually(t, 15*time.Second, "gateway "+gw+" to answer", func() bool { _, err := streamNoUsage(gw); return err == nil })
	}

	// Traffic through both replicas: OpenAI streams without include_usage
	// and Ollama chats; replica 1 restarted (SIGTERM, then again) midway.
	var mu sync.Mutex
	served, failed := map[string]int{}, 0
	send := func(gw string, i int) {
		var err error
		if i%2 == 0 {
			var n int
			if n, err = streamNoUsage(gw); err == nil && n != 0 {
				t.Errorf("a client without include_usage got %d usage chunks", n)
			}
		} else {
			var resp *http.Response
			resp, err = http.Post("http://"+gw+"/ollama-chat", "application/json",
				strings.NewReader(`{"model":"qwen2:0.5b","stream":false,"messages":[{"role":"user","content":"hi"}],"options":{"num_predict":5}}`))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed++
			return
		}
		served[gw]++
	}
	for i := range 60 {
		send(gwAddrs[i%2], i)
	}
	gws[1].Stop(syscall.SIGTERM)
	if !strings.Contains(gws[1].Out.String(), "reporting usage to") || strings.Contains(gws[1].Out.String(), "not acknowledged") {
		t.Fatalf("replica 1 did not flush its usage on SIGTERM:\n%s", gws[1].Out.String())
	}
	for i := range 20 {
		send(gwAddrs[0], i) // replica 1 is down
	}
	gws[1] = startGW(gwAddrs[1])
	eventually(t, 15*time.Second, "the restarted replica to answer", func() bool { _, err := streamNoUsage(gwAddrs[1]); return err == nil })
	for i := range 60 {
		send(gwAddrs[i%2], i)
	}
	cur, _ := getPool(t, nn)
	want := simTokens(t, cur)
	if want == 0 {
		t.Fatal("the simulators generated no tokens")
	}
	var got map[string][2]float64
	took, ok := testbin.Eventually(20*time.Second, func() bool {
		got = tokenCost(t, adminAddr, ns+"/tok")
		return got["allocation"][1] >= want && got["usage"][1] >= want && got["usage"][0] > 0
	})
	if !ok {
		t.Fatalf("after 20 s the operator's report holds %v (per basis: $/Mtok, tokens); the simulators generated %.0f tokens; served %v", got, want, served)
	}
	// Nothing counted twice: watched over two report intervals, where a
	// late duplicate would show.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		if got = tokenCost(t, adminAddr, ns+"/tok"); got["allocation"][1] > want {
			break
		}
	}
	t.Logf("served %v (failed %d while a replica restarted); simulators generated %.0f tokens; report after %s: allocation %.4f $/Mtok, usage %.4f $/Mtok over %.0f tokens",
		served, failed, want, took, got["allocation"][0], got["usage"][0], got["allocation"][1])
	if got["allocation"][1] != want || got["usage"][1] != want {
		t.Fatalf("the operator's ledger holds %v tokens; the simulators generated %.0f", got, want)
	}
	if got["allocation"][0] <= 0 || got["usage"][0] <= 0 || got["usage"][0] > got["allocation"][0] {
		t.Fatalf("$/Mtok: allocation %v, usage %v", got["allocation"][0], got["usage"][0])
	}
}
