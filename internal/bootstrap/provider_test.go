package bootstrap_test

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/bootstrap"
	"github.com/tidegpu/tidegpu/internal/notice"
	"github.com/tidegpu/tidegpu/internal/provider"
	awsprov "github.com/tidegpu/tidegpu/internal/provider/aws"
	"github.com/tidegpu/tidegpu/internal/provider/aws/ec2test"
)

// A launch of a pool with spec.bootstrap through the decorator reaches
// EC2's RunInstances (the fake, through the real SDK) with the rendered
// user data; without the pool's token it is refused before EC2 is asked.
func TestWrapCarriesUserDataToRunInstances(t *testing.T) {
	srv := ec2test.NewServer(ec2test.Options{Region: "us-east-1"})
	defer srv.Close()
	p, err := awsprov.New(context.Background(), awsprov.Options{Region: "us-east-1", Cluster: "c", Endpoint: srv.URL, RateLimit: -1,
		Credentials: &awsprov.StaticCredentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "not-a-real-secret"},
		HTTPClient:  &http.Client{Timeout: 10 * time.Second}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tokens := notice.NewTokens()
	w := bootstrap.Wrap(p, bootstrap.CloudAWS, "https://notice.example:9443", tokens.Token)
	if _, ok := provider.As[provider.Stopper](w); !ok {
		t.Error("the decorator hides the provider's Stopper")
	}
	spec := &tidev1.TidePoolSpec{Provider: tidev1.ProviderAWS, Region: "us-east-1", AvailabilityZone: "us-east-1a", InstanceType: "g5.xlarge",
		ImageID: "ami-0abc", InstanceChargeType: tidev1.ChargeSpot, Bootstrap: &tidev1.BootstrapSpec{Template: tidev1.BootstrapOllama, Model: "qwen2"}}
	ctx := context.Background()
	_, err = w.Launch(ctx, provider.LaunchRequest{Pool: "llm/chat", Spec: spec, Token: "t-1"})
	if err == nil || !strings.Contains(err.Error(), "notice token") {
		t.Fatalf("launch without the pool's token: %v, want an error naming the notice token", err)
	}
	if n := srv.CallCount("RunInstances"); n != 0 {
		t.Fatalf("EC2 asked %d times without a token", n)
	}
	tok := notice.NewToken()
	tokens.Set("llm/chat", tok)
	if _, err := w.Launch(ctx, provider.LaunchRequest{Pool: "llm/chat", Spec: spec, Token: "t-2"}); err != nil {
		t.Fatal(err)
	}
	var ud []byte
	for _, c := range srv.Calls() {
		if c.Action == "RunInstances" {
			ud, _ = base64.StdEncoding.DecodeString(c.Params.Get("UserData"))
		}
	}
	for _, want := range []string{"#cloud-config", tok, "--namespace llm --pool chat", "--controller https://notice.example:9443"} {
		if !strings.Contains(string(ud), want) {
			t.Errorf("user data lacks %q:\n%s", want, ud)
		}
	}
}
