// Package operator_test runs `tidegpu operator` and `tidegpu gateway
// --kubeconfig` as real processes against a real kube-apiserver and etcd
// (envtest), with local-provider pools whose instances are real processes.
package operator_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	tidev1alpha1 "github.com/tidegpu/tidegpu/api/v1alpha1"
	"github.com/tidegpu/tidegpu/internal/kong/kongtest"
	"github.com/tidegpu/tidegpu/internal/operator"
	"github.com/tidegpu/tidegpu/test/testbin"
)

var (
	binary     string
	kubeconfig string
	k8s        client.Client
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("operator tests: skipped in -short mode")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets, err := testbin.EnvtestAssets()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin, cleanup, err := testbin.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	binary = bin
	env, cfg, took, err := testbin.StartAPIServer(assets)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	fmt.Printf("envtest: kube-apiserver and etcd up in %s\n", took.Round(time.Millisecond))
	user, err := env.AddUser(envtest.User{Name: "tidegpu-test", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kc, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, _ := os.MkdirTemp("", "tidegpu-kubeconfig")
	defer os.RemoveAll(dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	k8s, err = client.New(cfg, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// proc is a tidegpu process run by a test.
type proc = testbin.Proc

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	return testbin.Start(t, binary, args...)
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string { return freeAddr(t) }

func freeAddr(t *testing.T) string { return testbin.FreeAddr(t) }

// startOperator runs `tidegpu operator` with its local instances' state in
// stateDir.
func startOperator(t *testing.T, stateDir string) *proc {
	return startProc(t, "operator", "--kubeconfig", kubeconfig, "--state-dir", stateDir, "--notice-addr", "0",
		"--metrics-bind-address", "0", "--health-probe-bind-address", freeAddr(t), "--admin-addr", "0", "--log-level", "info")
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	d, ok := testbin.Eventually(timeout, cond)
	if !ok {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
	return d
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tp-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func localPool(ns, name string, min int32) *tidev1.TidePool {
	return &tidev1.TidePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: tidev1.TidePoolSpec{Provider: tidev1.ProviderLocal, Minimum: min, Maximum: min + 2,
			Serving: tidev1.ServingSpec{ReadinessPath: "/healthz"}},
	}
}

// createPool creates tp and, at the end of the test (before its operator
// stops), deletes it and waits until the finalizer has terminated its
// instances, so no test leaves processes or pools for the next.
func createPool(t *testing.T, tp *tidev1.TidePool) {
	t.Helper()
	if err := k8s.Create(context.Background(), tp); err != nil {
		t.Fatal(err)
	}
	nn := types.NamespacedName{Namespace: tp.Namespace, Name: tp.Name}
	t.Cleanup(func() {
		var cur tidev1.TidePool
		if err := k8s.Get(context.Background(), nn, &cur); err != nil {
			return
		}
		_ = k8s.Delete(context.Background(), &cur)
		if _, ok := testbin.Eventually(30*time.Second, func() bool { _, ok := getPool(t, nn); return !ok }); !ok {
			t.Errorf("pool %s not finalized within 30s", nn)
		}
	})
}

func getPool(t *testing.T, nn types.NamespacedName) (*tidev1.TidePool, bool) {
	var tp tidev1.TidePool
	if err := k8s.Get(context.Background(), nn, &tp); err != nil {
		if !apierrors.IsNotFound(err) {
			t.Logf("get %s: %v", nn, err)
		}
		return nil, false
	}
	return &tp, true
}

func readyIDs(tp *tidev1.TidePool) []string {
	var ids []string
	for _, in := range tp.Status.Instances {
		if in.Phase == tidev1.PhaseReady {
			ids = append(ids, in.ID)
		}
	}
	return ids
}

func statePIDs(t *testing.T, dir string) map[string]int {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return map[string]int{}
	}
	var st struct {
		Instances []struct {
			ID  string `json:"id"`
			PID int    `json:"pid"`
		} `json:"instances"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("state.json: %v", err)
	}
	out := map[string]int{}
	for _, in := range st.Instances {
		out[in.ID] = in.PID
	}
	return out
}

func hasEvent(t *testing.T, ns, reason, note string) bool {
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return false
	}
	for _, e := range list.Items {
		if e.Reason == reason && strings.Contains(e.Note, note) {
			return true
		}
	}
	return false
}

// Invalid TidePools are refused by the API server with a message that says
// what is wrong.
func TestInvalidTidePoolsRefused(t *testing.T) {
	ns := namespace(t)
	secret := "hunter2"
	cases := []struct {
		name   string
		mutate func(*tidev1.TidePool)
		want   string
	}{
		{"minimum above maximum", func(p *tidev1.TidePool) { p.Spec.Minimum, p.Spec.Maximum = 3, 2 }, "spec.minimum must be <= spec.maximum"},
		{"inline secretKey", func(p *tidev1.TidePool) { p.Spec.SecretKey = &secret }, "credentialsSecretRef"},
		{"unknown charge type", func(p *tidev1.TidePool) { p.Spec.InstanceChargeType = "PREPAID" }, `spec.instanceChargeType: Unsupported value: "PREPAID"`},
		{"unknown provider", func(p *tidev1.TidePool) { p.Spec.Provider = "gcp" }, "spec.provider"},
		{"negative minimum", func(p *tidev1.TidePool) { p.Spec.Minimum = -1 }, "spec.minimum"},
		{"sim without spec.sim", func(p *tidev1.TidePool) { p.Spec.Provider = tidev1.ProviderSim }, "spec.sim: required for provider sim"},
		{"instance type twice", func(p *tidev1.TidePool) {
			p.Spec.Placement = &tidev1.PlacementSpec{InstanceTypes: []string{"g5.xlarge", "g6.xlarge", "g5.xlarge"}}
		}, `spec.placement.instanceTypes[2]: Duplicate value: "g5.xlarge"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tp := localPool(ns, strings.ReplaceAll(tc.name, " ", "-"), 1)
			tc.mutate(tp)
			err := k8s.Create(context.Background(), tp)
			if err == nil {
				t.Fatal("the API server accepted an invalid TidePool")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the refusal echoes the secret: %q", err)
			}
		})
	}
	// The provider cannot change under a running pool.
	tp := localPool(ns, "immutable", 0)
	if err := k8s.Create(context.Background(), tp); err != nil {
		t.Fatal(err)
	}
	tp.Spec.Provider = tidev1.ProviderAWS
	if err := k8s.Update(context.Background(), tp); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("changing spec.provider: got %v, want an immutability error", err)
	}
	// No operator ran, so no finalizer: it goes at once and leaves nothing
	// for the next test's operator.
	if err := k8s.Delete(context.Background(), tp); err != nil {
		t.Error(err)
	}
}

// The seed's sample manifest, credentials moved into a Secret, is accepted;
// with no cloud reachable the pool reports a clear condition and the
// operator keeps running.
func TestSeedManifestAcceptedWithClearCondition(t *testing.T) {
	ns := namespace(t)
	op := startOperator(t, t.TempDir())
	sample, err := os.ReadFile(filepath.Join(testbin.RepoRoot(), "config", "samples", "tidepool_seed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	for _, doc := range strings.Split(string(sample), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		var obj client.Object
		switch head.Kind {
		case "Secret":
			obj = &corev1.Secret{}
		case "TidePool":
			obj = &tidev1.TidePool{}
		default:
			t.Fatalf("unexpected kind %q in the sample", head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatal(err)
		}
		obj.SetNamespace(ns)
		if tp, ok := obj.(*tidev1.TidePool); ok {
			// Keep the test on this machine: the cloud's address is a
			// closed loopback port, so "no cloud reachable" without any
			// traffic leaving the machine.
			tp.Spec.Endpoint = "http://" + closedAddr(t)
		}
		objs = append(objs, obj)
	}
	for _, o := range objs {
		if err := k8s.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T from the seed sample: %v", o, err)
		}
	}
	nn := types.NamespacedName{Namespace: ns, Name: "tidepool-sample"}
	// No cloud is reachable from here: the pool must say so in its Ready
	// condition (why it is not ready), not crash.
	var cond *metav1.Condition
	eventually(t, 90*time.Second, "a Ready=False condition saying why on the seed pool", func() bool {
		tp, ok := getPool(t, nn)
		if !ok {
			return false
		}
		cond = meta.FindStatusCondition(tp.Status.Conditions, "Ready")
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "ProviderUnreachable"
	})
	t.Logf("seed pool condition: %s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
	if !strings.Contains(cond.Message, "tencent") {
		t.Errorf("the condition does not name the provider: %+v", cond)
	}
	tp, _ := getPool(t, nn)
	if tp.Spec.Provider != tidev1.ProviderTencent {
		t.Errorf("provider defaulted to %q, want tencent (the seed's meaning)", tp.Spec.Provider)
	}
	if !op.Running() {
		t.Fatal("the operator exited")
	}
	if strings.Contains(op.Out.String(), "panic") {
		t.Errorf("the operator panicked:\n%s", op.Out.String())
	}
}

// A local TidePool of 2: Ready within 30 s; kill -9 of an instance is
// replaced with status and events updated while the standalone gateway
// answers 200 throughout; delete removes every instance and target.
func TestLocalPoolLifecycleWithStandaloneGateway(t *testing.T) {
	ns := namespace(t)
	state := t.TempDir()
	startOperator(t, state)
	gwAddr := freeAddr(t)
	startProc(t, "gateway", "--kubeconfig", kubeconfig, "--addr", gwAddr, "--admin-addr", freeAddr(t))
	nn := types.NamespacedName{Namespace: ns, Name: "chat"}
	createPool(t, localPool(ns, "chat", 2))
	took := eventually(t, 30*time.Second, "2 Ready instances in status", func() bool {
		tp, ok := getPool(t, nn)
		return ok && tp.Status.Ready == 2 && len(readyIDs(tp)) == 2
	})
	t.Logf("2 instances Ready in status %s after apply", took)

	gw := "http://" + gwAddr
	chat := func() (int, string) {
		resp, err := http.Post(gw+"/ollama-chat", "application/json",
			strings.NewReader(`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"写一首诗"}],"stream":false}`))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	eventually(t, 10*time.Second, "the standalone gateway to answer 200", func() bool { c, _ := chat(); return c == 200 })

	// Requests throughout the kill.
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if c, body := chat(); c == 200 {
				ok.Add(1)
			} else {
				failed.Add(1)
				t.Logf("gateway answered %d: %s", c, body)
			}
		}
	}()
	tp, _ := getPool(t, nn)
	before := readyIDs(tp)
	victim := before[0]
	pid := statePIDs(t, state)[victim]
	if pid == 0 {
		t.Fatalf("no pid for %s in the state file", victim)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	healed := eventually(t, 15*time.Second, "status back to 2 Ready without the victim", func() bool {
		tp, ok := getPool(t, nn)
		ids := readyIDs(tp)
		return ok && len(ids) == 2 && !slices.Contains(ids, victim)
	})
	eventually(t, 10*time.Second, "an InstanceLost event for the victim", func() bool { return hasEvent(t, ns, "InstanceLost", victim) })
	n := ok.Load()
	eventually(t, 10*time.Second, "more answers after the replacement", func() bool { return ok.Load() > n+20 })
	close(stop)
	<-done
	t.Logf("kill -9 of %s: status healed in %s; gateway answered %d x 200, %d failures", victim, healed, ok.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Errorf("the standalone gateway failed %d requests during the replacement", failed.Load())
	}

	// Delete: every instance process gone, the object gone, no target left.
	tp, _ = getPool(t, nn)
	pids := statePIDs(t, state)
	if err := k8s.Delete(context.Background(), tp); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the TidePool to be deleted (finalizer done)", func() bool { _, ok := getPool(t, nn); return !ok })
	// The finalizer has signalled every instance; their processes end
	// within their stop grace (they were seen to exit 150 ms after the
	// object went on a loaded machine).
	if _, gone := testbin.Eventually(10*time.Second, func() bool {
		for _, pid := range pids {
			if testbin.Alive(pid) {
				return false
			}
		}
		return len(testbin.PIDsWithEnv("TIDEGPU_POOL="+ns+"/chat")) == 0
	}); !gone {
		for id, pid := range pids {
			if testbin.Alive(pid) {
				t.Errorf("instance %s (pid %d) survives the delete", id, pid)
			}
		}
		t.Errorf("processes of the deleted pool still run: %v", testbin.PIDsWithEnv("TIDEGPU_POOL="+ns+"/chat"))
	}
	eventually(t, 10*time.Second, "the gateway to drop the pool's targets", func() bool {
		c, _ := chat()
		return c == http.StatusServiceUnavailable
	})
}

// The operator killed -9 while launching, then restarted: no instance
// launched twice, none leaked.
func TestOperatorKilledDuringLaunchRestarts(t *testing.T) {
	ns := namespace(t)
	state := t.TempDir()
	op := startOperator(t, state)
	nn := types.NamespacedName{Namespace: ns, Name: "burst"}
	createPool(t, localPool(ns, "burst", 3))
	eventually(t, 30*time.Second, "the first launch", func() bool {
		return len(testbin.PIDsWithEnv("TIDEGPU_POOL="+ns+"/burst")) >= 1
	})
	op.Stop(syscall.SIGKILL)
	launchedBefore := len(testbin.PIDsWithEnv("TIDEGPU_POOL=" + ns + "/burst"))

	startOperator(t, state)
	eventually(t, 30*time.Second, "3 Ready after the restart", func() bool {
		tp, ok := getPool(t, nn)
		return ok && tp.Status.Ready == 3 && len(readyIDs(tp)) == 3
	})
	running := testbin.PIDsWithEnv("TIDEGPU_POOL=" + ns + "/burst")
	t.Logf("killed with %d instance processes running; after restart %d run", launchedBefore, len(running))
	if len(running) != 3 {
		t.Errorf("%d instance processes run for a pool of 3: launched twice or leaked", len(running))
	}
	if got := len(statePIDs(t, state)); got != 3 {
		t.Errorf("state lists %d instances, want 3", got)
	}
	tp, _ := getPool(t, nn)
	if err := k8s.Delete(context.Background(), tp); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the pool's processes to be gone", func() bool {
		return len(testbin.PIDsWithEnv("TIDEGPU_POOL="+ns+"/burst")) == 0
	})
	// The second operator stops first at cleanup (cleanups run last in,
	// first out): the finalizer must be done while it runs.
	eventually(t, 30*time.Second, "the TidePool to be deleted (finalizer done)", func() bool { _, ok := getPool(t, nn); return !ok })
}

// The operator keeps a Kong's targets equal to a pool's Ready instances,
// with the admin token read from a Secret, and removes them on delete.
func TestOperatorKeepsKongTargets(t *testing.T) {
	k := kongtest.New(t)
	k.SetToken("op-s3cret")
	ns := namespace(t)
	startOperator(t, t.TempDir())
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kong-admin"},
		StringData: map[string]string{"token": "op-s3cret"}}
	if err := k8s.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	tp := localPool(ns, "kong", 2)
	tp.Spec.Kong = &tidev1.KongSpec{AdminURL: k.URL, TokenSecretRef: &tidev1.SecretKeyReference{Name: "kong-admin", Key: "token"}}
	createPool(t, tp)
	nn := types.NamespacedName{Namespace: ns, Name: "kong"}
	targets := func() []string {
		var out []string
		for _, t := range k.Targets("llama2-YiFlow-upstream") {
			out = append(out, t.Target)
		}
		slices.Sort(out)
		return out
	}
	t.Cleanup(func() {
		if t.Failed() {
			tp, _ := getPool(t, nn)
			if tp != nil {
				t.Logf("conditions: %+v", tp.Status.Conditions)
			}
			for _, c := range k.Calls() {
				t.Logf("kong call: %s %s %v -> %d", c.Method, c.Path, c.Query, c.Status)
			}
		}
	})
	took := eventually(t, 30*time.Second, "Kong's targets to equal the 2 Ready instances", func() bool {
		tp, ok := getPool(t, nn)
		if !ok || tp.Status.Ready != 2 {
			return false
		}
		var want []string
		for _, in := range tp.Status.Instances {
			if in.Phase == tidev1.PhaseReady {
				want = append(want, in.Address)
			}
		}
		slices.Sort(want)
		return slices.Equal(targets(), want)
	})
	t.Logf("Kong in step with the pool %s after apply", took)
	tp, _ = getPool(t, nn)
	if c := meta.FindStatusCondition(tp.Status.Conditions, tidev1.ConditionGatewaySynced); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("GatewaySynced not True: %+v", c)
	}
	if err := k8s.Delete(context.Background(), tp); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "Kong's targets to be removed on delete", func() bool { return len(targets()) == 0 })
}

// `kubectl apply -k config/default` renders and the API server accepts every
// object of it (server-side dry run).
func TestInstallManifestsApply(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A server-side dry run cannot place objects in a namespace that the
	// same dry run "creates": make the namespace for real first.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tidegpu-system"}}
	if err := k8s.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig, "apply", "-k", filepath.Join(testbin.RepoRoot(), "config", "default"), "--dry-run=server")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply -k config/default --dry-run=server: %v\n%s", err, out)
	}
	for _, want := range []string{"deployment.apps/tidegpu-operator", "deployment.apps/tidegpu-gateway", "customresourcedefinition.apiextensions.k8s.io/tidepools.tidegpu.eja.dev", "clusterrole.rbac.authorization.k8s.io/tidegpu-operator"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("apply output lacks %s:\n%s", want, out)
		}
	}
}

// An AIBalancer on a pool: weights computed from the instances' own
// metrics (scraped), written to status, and applied to the pool (its
// instances carry them, so gateways and Kong get them).
func TestAIBalancerWeighsThePool(t *testing.T) {
	ns := namespace(t)
	startOperator(t, t.TempDir())
	createPool(t, localPool(ns, "chat", 2))
	ab := &tidev1alpha1.AIBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chat-balancer"},
		Spec: tidev1alpha1.AIBalancerSpec{
			Model:    tidev1alpha1.ModelSpec{Name: "qwen2:0.5b", Version: "v1"},
			Strategy: tidev1alpha1.StrategySpec{Type: tidev1alpha1.StrategyLeastLoad, MinWeight: 10},
			PoolRef:  &tidev1alpha1.PoolReference{Name: "chat"},
		}}
	if err := k8s.Create(context.Background(), ab); err != nil {
		t.Fatal(err)
	}
	nn := types.NamespacedName{Namespace: ns, Name: "chat-balancer"}
	took := eventually(t, 30*time.Second, "weights for 2 backends from fresh metrics", func() bool {
		if err := k8s.Get(context.Background(), nn, ab); err != nil {
			return false
		}
		c := meta.FindStatusCondition(ab.Status.Conditions, "MetricsAvailable")
		return ab.Status.CurrentReplicas == 2 && len(ab.Status.CurrentWeights) == 2 && c != nil && c.Status == metav1.ConditionTrue
	})
	t.Logf("weights %+v after %s", ab.Status.CurrentWeights, took)
	want := map[string]int32{}
	for _, w := range ab.Status.CurrentWeights {
		if w.Weight < 10 || w.Weight > 100 {
			t.Errorf("weight %d of %s outside [10, 100]", w.Weight, w.PodName)
		}
		want[w.PodName] = w.Weight
	}
	eventually(t, 10*time.Second, "the pool's instances to carry the weights", func() bool {
		tp, ok := getPool(t, types.NamespacedName{Namespace: ns, Name: "chat"})
		if !ok {
			return false
		}
		n := 0
		for _, in := range tp.Status.Instances {
			if w, ok := want[in.ID]; ok && in.Weight == w {
				n++
			}
		}
		return n == 2
	})
}

// The operator prices its pools and keeps the cost ledger in a ConfigMap:
// spend is reported on its admin API and goes on after a restart.
func TestOperatorCostSurvivesRestart(t *testing.T) {
	ns := namespace(t)
	state := t.TempDir()
	adminAddr := freeAddr(t)
	start := func() *proc {
		return startProc(t, "operator", "--kubeconfig", kubeconfig, "--state-dir", state, "--notice-addr", "0", "--metrics-bind-address", "0",
			"--health-probe-bind-address", freeAddr(t), "--admin-addr", adminAddr, "--ledger-namespace", ns)
	}
	op := start()
	tp := localPool(ns, "priced", 2)
	tp.Spec.Pricing = &tidev1.PricingSpec{SpotPerHour: "3.6", OnDemandPerHour: "7.2"}
	createPool(t, tp)
	spend := func() float64 {
		resp, err := http.Get("http://" + adminAddr + "/api/v1/cost")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var rep struct {
			Pools []struct {
				Name  string  `json:"name"`
				Spend float64 `json:"spend"`
			} `json:"pools"`
		}
		if json.NewDecoder(resp.Body).Decode(&rep) != nil {
			return -1
		}
		for _, p := range rep.Pools {
			if p.Name == ns+"/priced" {
				return p.Spend
			}
		}
		return 0
	}
	eventually(t, 30*time.Second, "spend on the operator's admin API", func() bool { return spend() > 0.001 })
	before := spend()
	op.Stop(syscall.SIGTERM)
	var cm corev1.ConfigMap
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "tidegpu-cost-ledger"}, &cm); err != nil {
		t.Fatalf("no ledger ConfigMap after the operator stopped: %v", err)
	}
	start()
	var after float64
	eventually(t, 30*time.Second, "spend reported again after the restart", func() bool { after = spend(); return after > 0 })
	t.Logf("spend %.6f before the restart, %.6f after", before, after)
	if after < before {
		t.Errorf("spend went back from %.6f to %.6f across the restart", before, after)
	}
	// Delete while this (second) operator runs: its finalizer cleans up.
	nn := types.NamespacedName{Namespace: ns, Name: "priced"}
	if cur, ok := getPool(t, nn); ok {
		if err := k8s.Delete(context.Background(), cur); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "the pool to be finalized", func() bool { _, ok := getPool(t, nn); return !ok })
}

// An AIBalancer with spec.autoscaling drives a Deployment through its scale
// subresource from the backends' signals: idle backends (concurrency 0)
// bring it down to the minimum, and the decision is in status.
func TestAIBalancerScalesADeployment(t *testing.T) {
	ns := namespace(t)
	startOperator(t, t.TempDir())
	createPool(t, localPool(ns, "chat", 2))
	labels := map[string]string{"app": "llm"}
	three := int32(3)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"},
		Spec: appsv1.DeploymentSpec{Replicas: &three, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "llm", Image: "tidegpu:latest"}}}}}}
	if err := k8s.Create(context.Background(), dep); err != nil {
		t.Fatal(err)
	}
	zero := int32(0)
	ab := &tidev1alpha1.AIBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scaler"},
		Spec: tidev1alpha1.AIBalancerSpec{
			Model:          tidev1alpha1.ModelSpec{Name: "qwen2:0.5b"},
			Strategy:       tidev1alpha1.StrategySpec{Type: tidev1alpha1.StrategyLeastLoad, MinWeight: 10},
			Scale:          &tidev1alpha1.ScaleSpec{MinReplicas: 1, MaxReplicas: 5},
			PoolRef:        &tidev1alpha1.PoolReference{Name: "chat"},
			ScaleTargetRef: &tidev1alpha1.ScaleTargetReference{Kind: "Deployment", Name: "llm"},
			Autoscaling: &tidev1.AutoscalingSpec{
				Metrics:  []tidev1.MetricSpec{{Type: tidev1.MetricConcurrency, Target: resource.MustParse("4")}},
				Behavior: &tidev1.Behavior{ScaleDown: &tidev1.ScalingRules{StabilizationWindowSeconds: &zero}},
			},
		}}
	if err := k8s.Create(context.Background(), ab); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 30*time.Second, "the Deployment scaled to 1", func() bool {
		var d appsv1.Deployment
		return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "llm"}, &d) == nil &&
			d.Spec.Replicas != nil && *d.Spec.Replicas == 1
	})
	// The scale is written before the status of the same reconcile.
	eventually(t, 10*time.Second, "status.autoscaling to record the decision", func() bool {
		return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "scaler"}, ab) == nil &&
			ab.Status.Autoscaling != nil && ab.Status.Autoscaling.DesiredReplicas == 1
	})
	t.Logf("scaled 3 → 1 after %s: %+v", took, ab.Status.Autoscaling)
	if a := ab.Status.Autoscaling; a == nil || a.DesiredReplicas != 1 || a.Recommender == "" {
		t.Errorf("status.autoscaling = %+v, want desired 1 with its recommender", a)
	}
	// spec.autoscaling without a target is refused.
	bad := ab.DeepCopy()
	bad.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "bad"}
	bad.Spec.ScaleTargetRef = nil
	if err := k8s.Create(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "scaleTargetRef") {
		t.Errorf("AIBalancer with autoscaling but no target: %v, want a refusal naming spec.scaleTargetRef", err)
	}
}

// A sim-provider pool under the operator: spread over the trace's zones on
// spot, preempted with notice when a zone's capacity drops, refilled in the
// zone that has capacity, and stopped (every process) on delete.
func TestSimPoolUnderTheOperator(t *testing.T) {
	ns := namespace(t)
	state := t.TempDir()
	startOperator(t, state)
	// 300x: one 5-minute trace step per second. us-east-1a holds 1 spot
	// instance for 8 steps, then none; us-east-1b always 4.
	steps := 1200
	a, b := make([]int, steps), make([]int, steps)
	for i := range steps {
		b[i] = 4
		if i < 8 {
			a[i] = 1
		}
	}
	dir := testbin.WriteTrace(t, map[string][]int{"us-east-1a": a, "us-east-1b": b})
	notice := int32(60)
	tp := &tidev1.TidePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "spot"},
		Spec: tidev1.TidePoolSpec{Provider: tidev1.ProviderSim, InstanceType: "p3.2xlarge", Minimum: 2, Maximum: 2,
			Serving:   tidev1.ServingSpec{ReadinessPath: "/healthz"},
			Placement: &tidev1.PlacementSpec{},
			Sim:       &tidev1.SimSpec{TraceDir: dir, Compression: 300, NoticeSeconds: &notice}},
	}
	createPool(t, tp)
	nn := types.NamespacedName{Namespace: ns, Name: "spot"}
	zonesOf := func(tp *tidev1.TidePool) map[string]int {
		out := map[string]int{}
		for _, in := range tp.Status.Instances {
			if in.Phase == tidev1.PhaseReady {
				out[in.Zone+"/"+in.Market]++
			}
		}
		return out
	}
	took := eventually(t, 30*time.Second, "2 Ready spot instances", func() bool {
		tp, ok := getPool(t, nn)
		return ok && tp.Status.Ready == 2 && tp.Status.Spot == 2
	})
	t.Logf("2 spot instances Ready %s after apply", took)
	// us-east-1a runs dry after 8 s: its instance is noticed and replaced in
	// us-east-1b.
	var lastZones map[string]int
	eventually(t, 30*time.Second, "both Ready instances in us-east-1b after us-east-1a ran dry", func() bool {
		tp, ok := getPool(t, nn)
		if !ok {
			return false
		}
		lastZones = zonesOf(tp)
		return lastZones["us-east-1b/spot"] == 2 && len(lastZones) == 1
	})
	eventually(t, 10*time.Second, "a ReclaimNotice event for the instance in us-east-1a", func() bool { return hasEvent(t, ns, "ReclaimNotice", "") })
	pids := testbin.PIDsWithEnv("TIDEGPU_POOL=" + ns + "/spot")
	if len(pids) < 2 {
		t.Fatalf("%d instance processes for the sim pool, want >= 2", len(pids))
	}
	cur, _ := getPool(t, nn)
	if err := k8s.Delete(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the TidePool to be deleted (finalizer done)", func() bool { _, ok := getPool(t, nn); return !ok })
	eventually(t, 10*time.Second, "every instance process of the pool to end", func() bool {
		return len(testbin.PIDsWithEnv("TIDEGPU_POOL="+ns+"/spot")) == 0
	})
}
