package bootstrap

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// placeholderToken stands for a pool's notice token in the golden files.
const placeholderToken = "PLACEHOLDER-NOTICE-TOKEN"

func spec(b *tidev1.BootstrapSpec, port int32) *tidev1.TidePoolSpec {
	return &tidev1.TidePoolSpec{Bootstrap: b, Serving: tidev1.ServingSpec{Port: port}}
}

// The rendered user data of each template on each cloud, byte for byte.
func TestRenderGolden(t *testing.T) {
	cases := []struct {
		name  string
		cloud string
		spec  *tidev1.TidePoolSpec
	}{
		{"aws-ollama", CloudAWS, spec(&tidev1.BootstrapSpec{Template: tidev1.BootstrapOllama, Model: "qwen2:0.5b"}, 8080)},
		{"tencent-ollama", CloudTencent, spec(&tidev1.BootstrapSpec{Template: tidev1.BootstrapOllama, Model: "qwen2:0.5b"}, 0)},
		{"aws-vllm", CloudAWS, spec(&tidev1.BootstrapSpec{Template: tidev1.BootstrapVLLM, Model: "Qwen/Qwen2.5-0.5B-Instruct",
			Args:     []string{"--max-model-len", "4096", "--served-model-name", "qwen 2.5"},
			AgentURL: "https://downloads.example.com/tidegpu-linux-amd64", AgentSHA256: strings.Repeat("ab", 32)}, 8000)},
		{"tencent-vllm", CloudTencent, spec(&tidev1.BootstrapSpec{Template: tidev1.BootstrapVLLM, Model: "Qwen/Qwen2.5-0.5B-Instruct"}, 0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Render(Input{Cloud: c.cloud, Namespace: "llm", Pool: "chat", Spec: c.spec,
				NoticeURL: "https://tidegpu-notice.example.com:9443", Token: placeholderToken})
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", c.name+".yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/bootstrap -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered user data differs from %s (go test -update to accept):\n%s", golden, got)
			}
			// It is cloud-config YAML; the token is only in the root-only file.
			if !bytes.HasPrefix(got, []byte("#cloud-config\n")) {
				t.Error("no #cloud-config header")
			}
			var cc cloudConfig
			if err := yaml.UnmarshalStrict(got, &cc); err != nil {
				t.Fatalf("not the cloud-config we write: %v", err)
			}
			for _, f := range cc.WriteFiles {
				if strings.Contains(f.Content, placeholderToken) != (f.Path == TokenFile) {
					t.Errorf("%s: the token must be in %s only", f.Path, TokenFile)
				}
				if f.Path == TokenFile && f.Permissions != "0600" {
					t.Errorf("%s has permissions %s, want 0600", TokenFile, f.Permissions)
				}
			}
			for _, cmd := range cc.RunCmd {
				if strings.Contains(strings.Join(cmd, " "), placeholderToken) {
					t.Errorf("runcmd %v carries the token (cloud-init logs commands)", cmd)
				}
			}
		})
	}
}

func TestRenderRefuses(t *testing.T) {
	ollama := &tidev1.BootstrapSpec{Template: tidev1.BootstrapOllama, Model: "qwen2"}
	big := strings.Repeat("x", MaxAWS+1)
	cases := []struct {
		name string
		in   Input
		want string
	}{
		{"no notice url", Input{Cloud: CloudAWS, Spec: spec(ollama, 0), Token: "t"}, "--notice-url"},
		{"bad notice url", Input{Cloud: CloudAWS, Spec: spec(ollama, 0), Token: "t", NoticeURL: "tidegpu:9443"}, "--notice-url"},
		{"no token", Input{Cloud: CloudAWS, Spec: spec(ollama, 0), NoticeURL: "https://n:9443"}, "notice token"},
		{"local provider", Input{Cloud: "local", Spec: spec(ollama, 0), Token: "t", NoticeURL: "https://n:9443"}, "aws or tencent"},
		{"aws over 16 KB", Input{Cloud: CloudAWS, Spec: spec(&tidev1.BootstrapSpec{Template: tidev1.BootstrapNone, UserData: big}, 0)}, "16384-byte limit"},
		{"tencent over 16 KB base64", Input{Cloud: CloudTencent, Spec: spec(&tidev1.BootstrapSpec{Template: tidev1.BootstrapNone, UserData: strings.Repeat("x", 12289)}, 0)}, "base64-encoded"},
		{"vllm args over 16 KB", Input{Cloud: CloudAWS, NoticeURL: "https://n:9443", Token: "t", Spec: spec(&tidev1.BootstrapSpec{Template: tidev1.BootstrapVLLM, Model: "m",
			Args: []string{big}}, 0)}, "spec.bootstrap"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Render(c.in)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestSizeLimitsAtTheEdge(t *testing.T) {
	if err := CheckSize(CloudAWS, MaxAWS); err != nil {
		t.Errorf("exactly 16 KB refused on AWS: %v", err)
	}
	if err := CheckSize(CloudTencent, 12288); err != nil { // 16384 bytes in base64
		t.Errorf("12288 raw bytes (16384 in base64) refused on Tencent: %v", err)
	}
	if err := CheckSize(CloudTencent, 12289); err == nil {
		t.Error("12289 raw bytes accepted on Tencent")
	}
}

func TestNoBootstrapNoUserData(t *testing.T) {
	got, err := Render(Input{Cloud: CloudAWS, Spec: &tidev1.TidePoolSpec{}})
	if err != nil || got != nil {
		t.Fatalf("Render without spec.bootstrap = %q, %v; want nil, nil", got, err)
	}
}

func TestSystemdExecQuotes(t *testing.T) {
	for in, want := range map[string]string{"plain": "plain", "a b": `"a b"`, `50%`: `"50%%"`, `$HOME`: `"$$HOME"`, `"q"`: `"\"q\""`, "": `""`} {
		if got := systemdExec([]string{in}); got != want {
			t.Errorf("systemdExec(%q) = %s, want %s", in, got, want)
		}
	}
}
