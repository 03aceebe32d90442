package local

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// templateVars are the values an instance's command template and
// environment see.
type templateVars struct {
	Port       int
	Host       string
	InstanceID string
	Pool       string
}

// address is host:port of the instance's inference server.
func (v templateVars) address() string {
	return net.JoinHostPort(v.Host, strconv.Itoa(v.Port))
}

// renderCommand turns spec.local.command into an argv: each argument is a
// text/template over v. An empty template means selfExe's built-in simulator,
// [selfExe, "sim"].
func renderCommand(tmpl []string, selfExe string, v templateVars) ([]string, error) {
	if len(tmpl) == 0 {
		if selfExe == "" {
			return nil, errors.New("spec.local.command is empty and the tidegpu binary is unknown")
		}
		return []string{selfExe, "sim"}, nil
	}
	argv := make([]string, 0, len(tmpl))
	for i, arg := range tmpl {
		if !strings.Contains(arg, "{{") {
			argv = append(argv, arg)
			continue
		}
		t, err := template.New("arg").Option("missingkey=error").Parse(arg)
		if err != nil {
			return nil, fmt.Errorf("spec.local.command[%d] %q: %w", i, arg, err)
		}
		var b strings.Builder
		if err := t.Execute(&b, v); err != nil {
			return nil, fmt.Errorf("spec.local.command[%d] %q: %w (known: {{.Port}} {{.Host}} {{.InstanceID}} {{.Pool}})", i, arg, err)
		}
		argv = append(argv, b.String())
	}
	if argv[0] == "" {
		return nil, fmt.Errorf("spec.local.command[0] %q renders to an empty program name", tmpl[0])
	}
	return argv, nil
}

// buildEnv returns base, then extra (spec.local.env), then the instance's own
// variables (TIDEGPU_PORT, TIDEGPU_HOST, TIDEGPU_INSTANCE_ID, TIDEGPU_POOL,
// OLLAMA_HOST) and its ownership tags (TIDEGPU_LOCAL_STATE_DIR,
// TIDEGPU_LOCAL_LAUNCHED_AT, TIDEGPU_LOCAL_MARKET,
// TIDEGPU_LOCAL_INSTANCE_TYPE; see envEntry, which reads them back). A later
// entry replaces an earlier one of the same name in place, so the result has
// each name once and the instance's own variables always win: a spec, or an
// inherited environment, can never forge or drop the ownership marker.
// Entries of extra must be NAME=VALUE.
func buildEnv(base, extra []string, v templateVars, tags ownerTags) ([]string, error) {
	out := make([]string, 0, len(base)+len(extra)+9)
	index := make(map[string]int, len(base)+len(extra)+9)
	set := func(kv string) {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			// Not NAME=VALUE (only possible in base): pass it through.
			out = append(out, kv)
			return
		}
		if i, dup := index[name]; dup {
			out[i] = kv
			return
		}
		index[name] = len(out)
		out = append(out, kv)
	}
	for _, kv := range base {
		set(kv)
	}
	for i, kv := range extra {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsRune(name, 0) || strings.ContainsRune(kv, 0) {
			return nil, fmt.Errorf("spec.local.env[%d] %q: want NAME=VALUE", i, kv)
		}
		set(kv)
	}
	port := strconv.Itoa(v.Port)
	set("TIDEGPU_PORT=" + port)
	set("TIDEGPU_HOST=" + v.Host)
	set("TIDEGPU_INSTANCE_ID=" + v.InstanceID)
	set("TIDEGPU_POOL=" + v.Pool)
	set("OLLAMA_HOST=" + v.address())
	set(envStateDir + "=" + tags.StateDir)
	set(envLaunchedAt + "=" + tags.LaunchedAt.Format(time.RFC3339Nano))
	set(envMarket + "=" + string(tags.Market))
	set(envInstanceType + "=" + tags.InstanceType)
	return out, nil
}
