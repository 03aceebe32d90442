package cli

import (
	"go/parser"
	"go/token"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// roleFiles are the files of this package that make up each role's command;
// restConfig (operator.go) is shared, so its client-go packages are added to
// the gateway's set by hand (kubeconfigImports).
var roleFiles = map[string][]string{
	"up":       {"up.go", "root.go"},
	"operator": {"operator.go", "root.go"},
	"gateway":  {"gateway.go", "root.go"},
}

// kubeconfigImports are the packages restConfig (in operator.go) needs; the
// gateway uses it for --kubeconfig.
var kubeconfigImports = []string{"k8s.io/client-go/rest", "k8s.io/client-go/tools/clientcmd"}

// roleImports returns the imports of a role's files, minus the root
// command's own (which names every command).
func roleImports(t *testing.T, role string) []string {
	t.Helper()
	set := map[string]bool{}
	for _, f := range roleFiles[role] {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			set[p] = true
		}
	}
	if role == "gateway" {
		for _, p := range kubeconfigImports {
			set[p] = true
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// deps runs `go list -deps` on pkgs and returns every package, and how many
// of them are outside the standard library.
func deps(t *testing.T, pkgs []string) (all []string, nonStd int) {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}"}, pkgs...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, std, _ := strings.Cut(line, " ")
		all = append(all, path)
		if std != "true" {
			nonStd++
		}
	}
	return all, nonStd
}

// The data plane must not carry the control plane: `tidegpu gateway` (its
// command's imports and everything they pull in) links neither the
// operator, the controllers, the engine, the providers nor a cloud SDK.
// Adding such an import to gateway.go, kubesource, the gateway, metrics or
// the dashboard fails here.
func TestGatewayRoleLinksNoControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	forbidden := []string{
		"github.com/tidegpu/tidegpu/internal/operator",
		"github.com/tidegpu/tidegpu/internal/controller/",
		"github.com/tidegpu/tidegpu/internal/engine",
		"github.com/tidegpu/tidegpu/internal/embedded",
		"github.com/tidegpu/tidegpu/internal/provider",
		"github.com/tidegpu/tidegpu/internal/placement",
		"github.com/tidegpu/tidegpu/internal/registrar",
		"github.com/aws/",
		"github.com/tencentcloud/",
		"sigs.k8s.io/controller-runtime/pkg/manager",
	}
	all, _ := deps(t, roleImports(t, "gateway"))
	for _, p := range all {
		for _, f := range forbidden {
			if p == f || strings.HasPrefix(p, strings.TrimSuffix(f, "/")+"/") {
				t.Errorf("tidegpu gateway links %s (forbidden: %s)", p, f)
			}
		}
	}
}

// TestRoleDependencySizes logs the size of each role's dependency set (the
// figures in docs/ARCHITECTURE.md) and checks the gateway's stays the
// smaller than the operator's. (`up` has no Kubernetes client at all, so it
// is the smallest.)
func TestRoleDependencySizes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	size := map[string][2]int{}
	for role := range roleFiles {
		all, nonStd := deps(t, roleImports(t, role))
		size[role] = [2]int{len(all), nonStd}
		t.Logf("%-8s %4d packages (%d outside the standard library)", role, len(all), nonStd)
	}
	if size["gateway"][1] >= size["operator"][1] {
		t.Errorf("gateway's dependency set (%v) is not smaller than the operator's (%v)", size["gateway"], size["operator"])
	}
}
