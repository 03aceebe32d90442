// Package iam_test checks the cloud policies in deploy/iam against the
// lists of API actions the code calls (aws.IAMActions,
// awsqueue.IAMActions, tencent.CAMActions), which the provider tests in
// turn check against the calls the EC2, SQS and CVM fakes record. Run
// with -update to regenerate the files from the lists.
package iam_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	awsprov "github.com/tidegpu/tidegpu/internal/provider/aws"
	"github.com/tidegpu/tidegpu/internal/provider/aws/awsqueue"
	"github.com/tidegpu/tidegpu/internal/provider/tencent"
	"github.com/tidegpu/tidegpu/test/testbin"
)

var update = flag.Bool("update", false, "rewrite deploy/iam from the code's action lists")

type awsStatement struct {
	Sid       string         `json:"Sid"`
	Effect    string         `json:"Effect"`
	Action    []string       `json:"Action"`
	Resource  string         `json:"Resource"`
	Condition map[string]any `json:"Condition,omitempty"`
}

type awsPolicy struct {
	Version   string         `json:"Version"`
	Statement []awsStatement `json:"Statement"`
}

// awsPolicyFor groups the actions: reads on every resource; launches
// (RunInstances with its tags) on every resource; stop, start and
// terminate only on instances tagged as managed by TideGPU; the queue
// only on the interruption queue.
func awsPolicyFor(ec2, sqs []string) awsPolicy {
	var read, launch, own []string
	for _, a := range ec2 {
		switch {
		case strings.HasPrefix(a, "ec2:Describe"):
			read = append(read, a)
		case a == "ec2:RunInstances" || a == "ec2:CreateTags":
			launch = append(launch, a)
		default:
			own = append(own, a)
		}
	}
	for _, s := range [][]string{read, launch, own} {
		slices.Sort(s)
	}
	q := slices.Sorted(slices.Values(sqs))
	return awsPolicy{Version: "2012-10-17", Statement: []awsStatement{
		{Sid: "TideGPUDescribe", Effect: "Allow", Action: read, Resource: "*"},
		{Sid: "TideGPULaunch", Effect: "Allow", Action: launch, Resource: "*"},
		{Sid: "TideGPUOwnInstances", Effect: "Allow", Action: own, Resource: "*",
			Condition: map[string]any{"StringEquals": map[string]string{"aws:ResourceTag/" + awsprov.TagManagedBy: awsprov.ManagedByValue}}},
		{Sid: "TideGPUInterruptionQueue", Effect: "Allow", Action: q, Resource: "arn:aws:sqs:*:*:tidegpu-interruptions"},
	}}
}

type camStatement struct {
	Effect   string   `json:"effect"`
	Action   []string `json:"action"`
	Resource []string `json:"resource"`
}

type camPolicy struct {
	Version   string         `json:"version"`
	Statement []camStatement `json:"statement"`
}

func camPolicyFor(cvm []string) camPolicy {
	return camPolicy{Version: "2.0", Statement: []camStatement{{Effect: "allow", Action: slices.Sorted(slices.Values(cvm)), Resource: []string{"*"}}}}
}

func golden(t *testing.T, name string, v any) {
	t.Helper()
	want, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	path := filepath.Join(testbin.RepoRoot(), "deploy", "iam", name)
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./test/iam -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not the policy the code's action lists make (go test ./test/iam -update):\n%s", path, want)
	}
}

func TestAWSPolicyIsWhatTheCodeCalls(t *testing.T) {
	p := awsPolicyFor(awsprov.IAMActions, awsqueue.IAMActions)
	var all []string
	for _, s := range p.Statement {
		all = append(all, s.Action...)
	}
	slices.Sort(all)
	want := slices.Sorted(slices.Values(append(slices.Clone(awsprov.IAMActions), awsqueue.IAMActions...)))
	if !slices.Equal(all, want) {
		t.Fatalf("the policy's actions %v, the code's %v", all, want)
	}
	golden(t, "aws-policy.json", p)
}

func TestTencentPolicyIsWhatTheCodeCalls(t *testing.T) {
	golden(t, "tencent-cam-policy.json", camPolicyFor(tencent.CAMActions))
}
