// Package helm tests the Helm chart in deploy/helm/tidegpu: `helm lint
// --strict` and `helm template` for every documented values combination (the
// defaults and each file in the chart's ci/), and every rendered object
// applied to a real kube-apiserver (envtest) with server-side apply as a dry
// run, so the API server's own validation and defaulting judge the output.
// helm is built from the Go module proxy by hack/helm.sh (cached).
package helm

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegpu/tidegpu/internal/cli"
	"github.com/tidegpu/tidegpu/test/testbin"
)

const namespace = "tidegpu-system"

var (
	helmBin string
	k8s     client.Client
	chart   = filepath.Join(testbin.RepoRoot(), "deploy", "helm", "tidegpu")
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("helm: skipped in -short mode")
		return 0
	}
	// Not a skip: CI must have helm, and hack/helm.sh builds it.
	cmd := exec.Command("bash", filepath.Join(testbin.RepoRoot(), "hack", "helm.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "helm: hack/helm.sh:", err)
		return 1
	}
	helmBin = strings.TrimSpace(string(out))
	assets, err := testbin.EnvtestAssets()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The chart's own CRDs (so they are checked too), and a ServiceMonitor
	// CRD fixture for the optional ServiceMonitors.
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(chart, "crds"), filepath.Join("testdata", "crds")},
		ErrorIfCRDPathMissing: true,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	fmt.Printf("envtest: kube-apiserver and etcd up in %s\n", time.Since(start).Round(time.Millisecond))
	if k8s, err = client.New(cfg, client.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// A dry run cannot place objects in a namespace it does not create for
	// real; the chart installs into an existing namespace, as helm does.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := k8s.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// combinations are the documented values sets: the defaults and each file in
// the chart's ci/ directory (helm chart-testing's convention).
func combinations(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chart, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("only %d values files in ci/: the README documents 5", len(files))
	}
	return append([]string{""}, files...)
}

func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(helmBin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// render runs helm template for one values file ("" for the defaults) and
// decodes the objects.
func render(t *testing.T, values string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "tidegpu", chart, "--namespace", namespace}
	if values != "" {
		args = append(args, "-f", values)
	}
	out := helm(t, args...)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decoding helm template output: %v\n%s", err, out)
		}
		if len(u.Object) == 0 {
			continue
		}
		objs = append(objs, u)
	}
	return objs
}

func name(values string) string {
	if values == "" {
		return "defaults"
	}
	return strings.TrimSuffix(filepath.Base(values), "-values.yaml")
}

// Every documented combination lints clean (strict) and every object it
// renders is accepted by the API server (server-side apply, dry run, strict
// field validation: an unknown or misplaced field fails).
func TestChartRendersObjectsTheAPIServerAccepts(t *testing.T) {
	for _, values := range combinations(t) {
		t.Run(name(values), func(t *testing.T) {
			args := []string{"lint", "--strict", chart, "--namespace", namespace}
			if values != "" {
				args = append(args, "-f", values)
			}
			helm(t, args...)
			objs := render(t, values)
			if len(objs) == 0 {
				t.Fatal("helm template rendered nothing")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			kinds := map[string]int{}
			for _, u := range objs {
				kinds[u.GetKind()]++
				err := k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
					client.FieldOwner("tidegpu-chart-test"), client.ForceOwnership, client.DryRunAll)
				if err != nil {
					t.Errorf("the API server refuses %s %s: %v", u.GetKind(), u.GetName(), err)
				}
			}
			t.Logf("%d objects accepted: %v", len(objs), kinds)
		})
	}
}

// container returns the named Deployment's first container.
func container(t *testing.T, objs []*unstructured.Unstructured, suffix string) (args []string, env []any, ok bool) {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() != "Deployment" || !strings.HasSuffix(u.GetName(), suffix) {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		if len(cs) == 0 {
			t.Fatalf("%s has no containers", u.GetName())
		}
		c := cs[0].(map[string]any)
		a, _, _ := unstructured.NestedStringSlice(c, "args")
		e, _, _ := unstructured.NestedSlice(c, "env")
		return a, e, true
	}
	return nil, nil, false
}

// The chart never starts an admin listener that the admin guard would
// refuse: the gateway (on the pod's address) gets the token or
// --insecure-admin; the operator is leader-elected with more than one
// replica; the notice port is served when its Service is.
func TestChartKeepsTheRolesStartable(t *testing.T) {
	for _, values := range combinations(t) {
		t.Run(name(values), func(t *testing.T) {
			objs := render(t, values)
			hasToken := func(env []any) bool {
				return slices.ContainsFunc(env, func(e any) bool { return e.(map[string]any)["name"] == "TIDEGPU_ADMIN_TOKEN" })
			}
			if args, env, ok := container(t, objs, "-gateway"); ok {
				if hasToken(env) == slices.Contains(args, "--insecure-admin") {
					t.Errorf("gateway: token %v, --insecure-admin %v: want exactly one (args %v)", hasToken(env), slices.Contains(args, "--insecure-admin"), args)
				}
			}
			args, _, ok := container(t, objs, "-operator")
			if !ok {
				t.Fatal("no operator Deployment")
			}
			for _, u := range objs {
				if u.GetKind() == "Deployment" && strings.HasSuffix(u.GetName(), "-operator") {
					if n, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); n > 1 && !slices.Contains(args, "--leader-elect") {
						t.Errorf("operator: %d replicas without --leader-elect", n)
					}
				}
				if u.GetKind() == "Service" && strings.HasSuffix(u.GetName(), "-notice") &&
					!slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--notice-addr=") }) {
					t.Errorf("a notice Service but the operator has no --notice-addr: %v", args)
				}
			}
		})
	}
}

// The chart's CRDs are the generated ones (config/crd/bases), and its
// operator rules the generated role (config/rbac/role.yaml): one source,
// copied by `make manifests`.
func TestChartCopiesTheGeneratedManifests(t *testing.T) {
	root := testbin.RepoRoot()
	pairs := map[string]string{filepath.Join(chart, "files", "operator-role.yaml"): filepath.Join(root, "config", "rbac", "role.yaml")}
	gen, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(gen) == 0 {
		t.Fatalf("no generated CRDs: %v", err)
	}
	for _, g := range gen {
		pairs[filepath.Join(chart, "crds", filepath.Base(g))] = g
	}
	copied, _ := filepath.Glob(filepath.Join(chart, "crds", "*.yaml"))
	if len(copied) != len(gen) {
		t.Errorf("the chart has %d CRDs, config/crd/bases %d: run make manifests", len(copied), len(gen))
	}
	for copy, src := range pairs {
		a, err1 := os.ReadFile(copy)
		b, err2 := os.ReadFile(src)
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s (%v, %v): run make manifests", copy, src, err1, err2)
		}
	}
}

// pendingFlags are flags the chart passes that another change adds to the
// command; until it lands the check below logs them instead of failing.
var pendingFlags = map[string]bool{}

// Every flag the chart passes to a role is one that role's command knows
// (a renamed flag would crash the pod at start).
func TestChartPassesOnlyKnownFlags(t *testing.T) {
	commands := map[string]*cobra.Command{"-operator": cli.NewOperatorCommand(), "-gateway": cli.NewGatewayCommand()}
	for _, values := range combinations(t) {
		t.Run(name(values), func(t *testing.T) {
			objs := render(t, values)
			for suffix, cmd := range commands {
				args, _, ok := container(t, objs, suffix)
				if !ok {
					continue
				}
				if len(args) == 0 || "-"+args[0] != suffix {
					t.Errorf("%s: first argument %v, want the subcommand", suffix, args)
					continue
				}
				for _, a := range args[1:] {
					flagName, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
					if !strings.HasPrefix(a, "--") {
						continue
					}
					if cmd.Flags().Lookup(flagName) == nil {
						if pendingFlags[flagName] {
							t.Logf("%s: --%s is not a flag of tidegpu %s yet (pending)", suffix, flagName, args[0])
							continue
						}
						t.Errorf("the chart passes --%s, which tidegpu %s does not know", flagName, args[0])
					}
				}
			}
		})
	}
}
