package gc_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	fakeclock "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/gc"
	"github.com/tidegpu/tidegpu/internal/provider/aws"
	"github.com/tidegpu/tidegpu/internal/provider/aws/ec2test"
)

// Against the EC2 fake through the real SDK: an instance tagged for a pool
// that no longer exists is terminated after the grace period; instances of
// live pools, of another installation and without our tags are left alone.
func TestCollectOnEC2(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	srv := ec2test.NewServer(ec2test.Options{Region: "us-east-1", Now: func() time.Time { return now }})
	t.Cleanup(srv.Close)
	p, err := aws.New(context.Background(), aws.Options{Region: "us-east-1", Cluster: "c1", Endpoint: srv.URL,
		Credentials: &aws.StaticCredentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "not-a-secret"},
		RateLimit:   -1, ListCacheTTL: -1, Clock: fakeclock.NewFakeClock(now),
		HTTPClient: &http.Client{Timeout: 10 * time.Second}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tags := func(cluster, pool string) map[string]string {
		return map[string]string{aws.TagManagedBy: aws.ManagedByValue, aws.TagCluster: cluster, aws.TagPool: pool}
	}
	old := now.Add(-time.Hour)
	live := srv.Put(ec2test.Instance{State: ec2test.StateRunning, Tags: tags("c1", "ns/live"), LaunchTime: old, InstanceType: "p3.2xlarge", Zone: "us-east-1a"})
	orphan := srv.Put(ec2test.Instance{State: ec2test.StateRunning, Tags: tags("c1", "ns/gone"), LaunchTime: old, InstanceType: "p3.2xlarge", Zone: "us-east-1a"})
	young := srv.Put(ec2test.Instance{State: ec2test.StatePending, Tags: tags("c1", "ns/gone"), LaunchTime: now.Add(-time.Minute), InstanceType: "p3.2xlarge", Zone: "us-east-1a"})
	other := srv.Put(ec2test.Instance{State: ec2test.StateRunning, Tags: tags("c2", "ns/gone"), LaunchTime: old, InstanceType: "p3.2xlarge", Zone: "us-east-1a"})
	untagged := srv.Put(ec2test.Instance{State: ec2test.StateRunning, LaunchTime: old, InstanceType: "p3.2xlarge", Zone: "us-east-1a"})

	done, err := gc.Collect(context.Background(), p, map[string]bool{"ns/live": true}, now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 || done[0].ID != orphan {
		t.Fatalf("collected %+v, want only %s", done, orphan)
	}
	for id, want := range map[string]string{live: "running", orphan: "shutting-down|terminated", young: "pending|running",
		other: "running", untagged: "running"} {
		in, ok := srv.Instance(id)
		if !ok {
			t.Fatalf("instance %s vanished", id)
		}
		if !matches(in.State, want) {
			t.Errorf("instance %s is %s, want %s", id, in.State, want)
		}
	}
}

func matches(s, alts string) bool {
	for len(alts) > 0 {
		i := 0
		for i < len(alts) && alts[i] != '|' {
			i++
		}
		if s == alts[:i] {
			return true
		}
		if i == len(alts) {
			break
		}
		alts = alts[i+1:]
	}
	return false
}
