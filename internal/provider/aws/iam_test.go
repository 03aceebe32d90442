package aws

import (
	"slices"
	"strings"
	"testing"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/aws/ec2test"
)

// Every EC2 action the provider can make, driven through the fake, is in
// IAMActions, and IAMActions holds nothing more (but the implied ones).
func TestIAMActionsAreWhatTheProviderCalls(t *testing.T) {
	e := newEnv(t, nil)
	ctx := ctxT(t)
	e.srv.AddSpotPrice(ec2test.SpotPrice{InstanceType: "g5.xlarge", Zone: "us-east-1a", Price: "0.401200", Timestamp: t0.Add(-time.Hour)})
	spot, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: testSpec(), Token: "iam-1"})
	if err != nil {
		t.Fatal(err)
	}
	od := testSpec()
	od.InstanceChargeType = tidev1.ChargeOnDemand
	standby, err := e.p.Launch(ctx, provider.LaunchRequest{Pool: "chat", Spec: od, Token: "iam-2", Market: provider.MarketOnDemand})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.List(ctx, "chat"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Offerings(ctx, testSpec()); err != nil {
		t.Fatal(err)
	}
	e.srv.Advance()
	if err := e.p.Stop(ctx, standby.ID); err != nil {
		t.Fatal(err)
	}
	e.srv.Advance()
	if _, err := e.p.Start(ctx, standby.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Terminate(ctx, spot.ID); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range e.srv.Calls() {
		seen["ec2:"+c.Action] = true
	}
	for _, a := range ImpliedIAMActions {
		seen[a] = true
	}
	var got []string
	for a := range seen {
		got = append(got, a)
	}
	slices.Sort(got)
	want := slices.Clone(IAMActions)
	slices.Sort(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("actions called (plus implied) %v, IAMActions %v: keep IAMActions and deploy/iam/aws-policy.json (go test ./test/iam -update) in step", got, want)
	}
}
