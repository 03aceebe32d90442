package tencent

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/provider/tencent/cvmtest"
)

// TestFakeStopStartAnswers sends StopInstances and StartInstances straight
// through the SDK client, past Stop's and Start's own checks, to pin the
// fake's documented answers: the wrong state is
// UnsupportedOperation.InstanceState<STATE> (neither call is idempotent on
// the API), STOP_CHARGING needs pay-as-you-go, parameters are checked, and
// DescribeInstances reports StopChargingMode.
func TestFakeStopStartAnswers(t *testing.T) {
	f := cvmtest.NewServer("ap-singapore")
	defer f.Close()
	p, err := New(Options{Region: "ap-singapore", SecretID: cvmtest.TestSecretID, SecretKey: cvmtest.TestSecretKey,
		Endpoint: f.URL, Cluster: "test", RateLimit: 1000, Burst: 1000, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	add := func(charge, state string) string {
		return f.AddInstance(cvmtest.Instance{Zone: "ap-singapore-1", InstanceType: "S5.MEDIUM2", ChargeType: charge, State: state,
			Tags: map[string]string{TagManagedBy: ManagedByValue, TagCluster: "test", TagPool: "chat"}})
	}
	stopped, running, spot := add("POSTPAID_BY_HOUR", "STOPPED"), add("POSTPAID_BY_HOUR", "RUNNING"), add("SPOTPAID", "RUNNING")
	cases := []struct {
		name, action string
		params       any
		code         string
	}{
		{"stop stopped", "StopInstances", stopParams{InstanceIds: []string{stopped}, StoppedMode: stoppedModeNoCharges}, "UnsupportedOperation.InstanceStateStopped"},
		{"start running", "StartInstances", startParams{InstanceIds: []string{running}}, "UnsupportedOperation.InstanceStateRunning"},
		{"spot without charges", "StopInstances", stopParams{InstanceIds: []string{spot}, StoppedMode: stoppedModeNoCharges}, codeStopChargingNotOK},
		{"bad mode", "StopInstances", stopParams{InstanceIds: []string{running}, StoppedMode: "HALF_CHARGING"}, "InvalidParameterValue"},
		{"bad type", "StopInstances", stopParams{InstanceIds: []string{running}, StopType: "GENTLE"}, "InvalidParameterValue"},
		{"no ids", "StartInstances", startParams{}, "MissingParameter"},
		{"unknown", "StartInstances", startParams{InstanceIds: []string{"ins-deadbeef"}}, codeNotFound},
		{"malformed", "StopInstances", stopParams{InstanceIds: []string{"i-1"}}, "InvalidInstanceId.Malformed"},
		// One refusing instance refuses the batch.
		{"batch", "StopInstances", stopParams{InstanceIds: []string{running, stopped}}, "UnsupportedOperation.InstanceStateStopped"},
	}
	for _, c := range cases {
		if _, err := p.api.call(ctx, c.action, c.params); apiCode(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	if fi, _ := f.Instance(running); fi.State != "RUNNING" {
		t.Fatalf("refused batch changed the running instance to %s", fi.State)
	}
	// Spot with the default KEEP_CHARGING is not among the refusals the
	// StopInstances error list names, so the fake stops it (Stop never
	// asks: a spot instance is not a standby).
	if _, err := p.api.call(ctx, "StopInstances", stopParams{InstanceIds: []string{spot}}); err != nil {
		t.Fatalf("spot, keep charging: %v", err)
	}
	f.SetStoppedAfter(0)
	if _, err := p.api.call(ctx, "StopInstances", stopParams{InstanceIds: []string{running}, StoppedMode: stoppedModeNoCharges}); err != nil {
		t.Fatal(err)
	}
	body, err := p.api.call(ctx, "DescribeInstances", describeParams{InstanceIds: []string{running, spot}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Response struct {
			InstanceSet []struct {
				InstanceId, InstanceState, StopChargingMode string
			}
		}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, in := range r.Response.InstanceSet {
		got[in.InstanceId] = in.InstanceState + "/" + in.StopChargingMode
	}
	if got[running] != "STOPPED/STOP_CHARGING" || got[spot] != "STOPPED/KEEP_CHARGING" {
		t.Fatalf("described %v", got)
	}
}
