// Package bootstrap renders the user data (cloud-init) of a cloud instance
// from its pool's spec.bootstrap: it installs and starts `tidegpu agent`
// with the operator's notice URL and the pool's notice token, and the
// inference server (Ollama with a model to pull, or vLLM with its
// arguments), which opens its serving port only once the model is there
// (vLLM binds it after loading the model; Ollama is moved from loopback to
// it after the pull and then loads the model from local disk), so that the
// pool's readiness probe passes when the instance can answer.
//
// The notice token is written by cloud-init's write_files to a root-only
// file and read by the agent from there; no command line and no script
// output carries it, so it stays out of cloud-init's logs. The rendered
// bytes go only to the provider's launch call, never to a log, an event or
// status. Each cloud's size limit is checked here, with an error naming
// spec.bootstrap.
package bootstrap

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
)

// Clouds whose user data this package renders.
const (
	CloudAWS     = tidev1.ProviderAWS
	CloudTencent = tidev1.ProviderTencent
)

// Size limits of user data.
const (
	// MaxAWS: "User data is limited to 16 KB, in raw form, before it is
	// base64-encoded"
	// (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-add-user-data.html).
	MaxAWS = 16 * 1024
	// MaxTencentBase64: CVM RunInstances' UserData is "Base64-encoded
	// custom data of up to 16 KB"
	// (the RunInstancesRequest.UserData field of Tencent Cloud's Go SDK,
	// cvm/v20170312); we read the limit as applying to the encoded form,
	// the stricter reading.
	MaxTencentBase64 = 16 * 1024
)

// Paths on the instance.
const (
	TokenFile   = "/etc/tidegpu/notice-token"
	AgentBinary = "/usr/local/bin/tidegpu"
	ServeScript = "/usr/local/lib/tidegpu/serve.sh"
)

// DefaultPorts of the inference servers when spec.serving.port is unset.
const (
	DefaultOllamaPort = 11434
	DefaultVLLMPort   = 8000
)

// ErrNoNoticeURL is returned when a template needs the notice URL and the
// operator has none.
var ErrNoNoticeURL = errors.New("the operator has no --notice-url: set it to the URL instances reach the notice Service at (such as https://tidegpu-notice.example.com:9443)")

// Input is what one pool's user data is made of.
type Input struct {
	// Cloud is CloudAWS or CloudTencent.
	Cloud string
	// Namespace and Pool name the TidePool.
	Namespace, Pool string
	// Spec is the pool's spec (bootstrap and serving).
	Spec *tidev1.TidePoolSpec
	// NoticeURL is the base URL of the operator's notice endpoint as
	// instances reach it.
	NoticeURL string
	// Token is the pool's notice token.
	Token string
}

// Render returns the raw (not base64-encoded) user data for in, or nil
// when the spec has no bootstrap.
func Render(in Input) ([]byte, error) {
	b := in.Spec.Bootstrap
	if b == nil {
		return nil, nil
	}
	var out []byte
	switch b.Template {
	case tidev1.BootstrapNone:
		out = []byte(b.UserData)
	case tidev1.BootstrapOllama, tidev1.BootstrapVLLM:
		var err error
		if out, err = renderTemplate(in); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("spec.bootstrap.template %q: use ollama, vllm or none", b.Template)
	}
	if err := CheckSize(in.Cloud, len(out)); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckSize checks n raw bytes of user data against the cloud's limit.
func CheckSize(cloud string, n int) error {
	switch cloud {
	case CloudAWS:
		if n > MaxAWS {
			return fmt.Errorf("spec.bootstrap: the user data is %d bytes, over EC2's %d-byte limit (raw, before base64): shorten spec.bootstrap.userData or args, or bake more into the image", n, MaxAWS)
		}
	case CloudTencent:
		if enc := (n + 2) / 3 * 4; enc > MaxTencentBase64 {
			return fmt.Errorf("spec.bootstrap: the user data is %d bytes (%d base64-encoded), over CVM's %d-byte limit: shorten spec.bootstrap.userData or args, or bake more into the image", n, enc, MaxTencentBase64)
		}
	default:
		return fmt.Errorf("spec.bootstrap: provider %q takes no user data: use it with aws or tencent", cloud)
	}
	return nil
}

// cloudConfig is the part of cloud-init's #cloud-config format we write
// (https://cloudinit.readthedocs.io/en/latest/reference/modules.html).
type cloudConfig struct {
	WriteFiles []writeFile `json:"write_files"`
	RunCmd     [][]string  `json:"runcmd"`
}

type writeFile struct {
	Path        string `json:"path"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
	Content     string `json:"content"`
}

func renderTemplate(in Input) ([]byte, error) {
	b := in.Spec.Bootstrap
	if in.NoticeURL == "" {
		return nil, fmt.Errorf("spec.bootstrap: %w", ErrNoNoticeURL)
	}
	if u, err := url.Parse(in.NoticeURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--notice-url %q: want http(s)://host:port", in.NoticeURL)
	}
	if in.Token == "" {
		return nil, errors.New("spec.bootstrap: the pool has no notice token yet")
	}
	if b.Model == "" {
		return nil, errors.New("spec.bootstrap.model: required with templates ollama and vllm")
	}
	cloud := map[string]string{CloudAWS: "aws", CloudTencent: "tencent"}[in.Cloud]
	if cloud == "" {
		return nil, CheckSize(in.Cloud, 0)
	}
	port := int(in.Spec.Serving.Port)
	if port <= 0 {
		port = map[string]int{tidev1.BootstrapOllama: DefaultOllamaPort, tidev1.BootstrapVLLM: DefaultVLLMPort}[b.Template]
	}
	agentArgs := []string{AgentBinary, "agent", "--cloud", cloud, "--controller", in.NoticeURL,
		"--namespace", in.Namespace, "--pool", in.Pool, "--token-file", TokenFile}
	if in.Cloud == CloudAWS {
		agentArgs = append(agentArgs, "--rebalance", "drain")
	}
	cc := cloudConfig{
		WriteFiles: []writeFile{
			{Path: TokenFile, Permissions: "0600", Owner: "root:root", Content: in.Token + "\n"},
			{Path: "/etc/systemd/system/tidegpu-agent.service", Permissions: "0644", Owner: "root:root", Content: unit(
				"TideGPU agent: reports spot interruption notices", "network-online.target", systemdExec(agentArgs), "")},
		},
	}
	var run [][]string
	if b.AgentURL != "" {
		run = append(run, []string{"sh", "-c", installAgent(b.AgentURL, b.AgentSHA256)})
	}
	run = append(run, []string{"systemctl", "daemon-reload"}, []string{"systemctl", "enable", "--now", "tidegpu-agent.service"})
	switch b.Template {
	case tidev1.BootstrapOllama:
		cc.WriteFiles = append(cc.WriteFiles, writeFile{Path: ServeScript, Permissions: "0755", Owner: "root:root", Content: ollamaScript(b.Model, port)})
	case tidev1.BootstrapVLLM:
		args := append([]string{"/usr/bin/env", "vllm", "serve", b.Model, "--host", "0.0.0.0", "--port", strconv.Itoa(port)}, b.Args...)
		cc.WriteFiles = append(cc.WriteFiles,
			writeFile{Path: "/etc/systemd/system/tidegpu-vllm.service", Permissions: "0644", Owner: "root:root",
				Content: unit("vLLM OpenAI server for "+b.Model, "network-online.target", systemdExec(args), "")},
			writeFile{Path: ServeScript, Permissions: "0755", Owner: "root:root", Content: vllmScript()})
	}
	run = append(run, []string{ServeScript})
	cc.RunCmd = run
	y, err := yaml.Marshal(cc)
	if err != nil {
		return nil, fmt.Errorf("rendering spec.bootstrap: %w", err)
	}
	return append([]byte("#cloud-config\n"), y...), nil
}

// unit is a systemd service unit.
func unit(desc, after, execStart, extra string) string {
	return "[Unit]\nDescription=" + desc + "\nWants=" + after + "\nAfter=" + after + "\n\n[Service]\nExecStart=" + execStart +
		"\n" + extra + "Restart=always\nRestartSec=2\n\n[Install]\nWantedBy=multi-user.target\n"
}

// systemdExec quotes argv for ExecStart (systemd's own quoting: double
// quotes, backslash escapes, % doubled, $ doubled).
func systemdExec(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "$", "$$")
		if a != "" && !strings.ContainsAny(a, " \t\"'\\%$;") {
			q[i] = a
			continue
		}
		q[i] = `"` + r.Replace(a) + `"`
	}
	return strings.Join(q, " ")
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func installAgent(u, sum string) string {
	tmp := AgentBinary + ".download"
	s := "set -eu; curl -fsSL --retry 5 -o " + tmp + " " + shellQuote(u) + "; "
	if sum != "" {
		s += "echo " + shellQuote(sum+"  "+tmp) + " | sha256sum -c -; "
	}
	return s + "chmod 0755 " + tmp + "; mv " + tmp + " " + AgentBinary
}

// ollamaScript installs Ollama if the image lacks it, pulls and loads the
// model on loopback, then serves on the pool's port: the port answers
// (and the readiness probe passes) only once the model is on disk and
// loaded. Ollama's environment variables:
// https://github.com/ollama/ollama/blob/main/docs/faq.md.
func ollamaScript(model string, port int) string {
	m := shellQuote(model)
	return `#!/bin/sh
# Rendered by the TideGPU operator (spec.bootstrap.template: ollama).
set -eu
if ! command -v ollama >/dev/null 2>&1; then
  curl -fsSL https://ollama.com/install.sh | sh
fi
mkdir -p /etc/systemd/system/ollama.service.d
# 1. loopback only while the model is pulled and loaded
printf '[Service]\nEnvironment=OLLAMA_HOST=127.0.0.1:11434\nEnvironment=OLLAMA_KEEP_ALIVE=-1\n' > /etc/systemd/system/ollama.service.d/tidegpu.conf
systemctl daemon-reload
systemctl enable ollama.service
systemctl restart ollama.service
until curl -fsS http://127.0.0.1:11434/api/version >/dev/null 2>&1; do sleep 1; done
OLLAMA_HOST=127.0.0.1:11434 ollama pull ` + m + `
# 2. serve on the pool's port, then load the model (from local disk)
printf '[Service]\nEnvironment=OLLAMA_HOST=0.0.0.0:` + strconv.Itoa(port) + `\nEnvironment=OLLAMA_KEEP_ALIVE=-1\n' > /etc/systemd/system/ollama.service.d/tidegpu.conf
systemctl daemon-reload
systemctl restart ollama.service
until curl -fsS http://127.0.0.1:` + strconv.Itoa(port) + `/api/version >/dev/null 2>&1; do sleep 1; done
curl -fsS http://127.0.0.1:` + strconv.Itoa(port) + `/api/generate -d '{"model":"'` + m + `'","keep_alive":-1}' >/dev/null
`
}

// vllmScript starts the vLLM unit; vLLM's server binds its port after the
// model is loaded, so /health answers only then.
func vllmScript() string {
	return `#!/bin/sh
# Rendered by the TideGPU operator (spec.bootstrap.template: vllm).
set -eu
if ! command -v vllm >/dev/null 2>&1; then
  python3 -m pip install --no-input vllm
fi
systemctl daemon-reload
systemctl enable --now tidegpu-vllm.service
`
}
