package tencent_test

import (
	"slices"
	"strings"
	"testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
	"github.com/tidegpu/tidegpu/internal/provider/tencent"
)

// Every CVM action the provider can make, driven through the fake, is in
// CAMActions, and CAMActions holds nothing more.
func TestCAMActionsAreWhatTheProviderCalls(t *testing.T) {
	f := newFake(t)
	f.SetPrice(zone, gpu, "SPOTPAID", 0.31)
	f.SetPrice(zone, gpu, "POSTPAID_BY_HOUR", 1.56)
	l := newLister(t, f, nil)
	spot, err := l.p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: poolSpec(nil), Token: "cam-1"})
	if err != nil {
		t.Fatal(err)
	}
	od := poolSpec(func(s *tidev1.TidePoolSpec) { s.InstanceChargeType = tidev1.ChargeOnDemand })
	warm, err := l.p.Launch(ctx(t), provider.LaunchRequest{Pool: "chat", Spec: od, Token: "cam-2"})
	if err != nil {
		t.Fatal(err)
	}
	l.list("chat")
	l.list("chat") // running
	if _, err := l.p.Offerings(ctx(t), poolSpec(nil)); err != nil {
		t.Fatal(err)
	}
	if err := l.p.Stop(ctx(t), warm.ID); err != nil {
		t.Fatal(err)
	}
	l.list("chat")
	l.list("chat") // stopped
	if _, err := l.p.Start(ctx(t), warm.ID); err != nil {
		t.Fatal(err)
	}
	if err := l.p.Terminate(ctx(t), spot.ID); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range f.Calls() {
		seen["cvm:"+c.Action] = true
	}
	var got []string
	for a := range seen {
		got = append(got, a)
	}
	slices.Sort(got)
	want := slices.Clone(tencent.CAMActions)
	slices.Sort(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("actions called %v, CAMActions %v: keep CAMActions and deploy/iam/tencent-cam-policy.json (go test ./test/iam -update) in step", got, want)
	}
}
