// Package chaos_test owns the crash-consistency test of the engine against
// the EC2 fake (issue 5, item 4): many launches and terminations with the
// controller killed at random points, then one garbage collection, after
// which no instance may be unaccounted for.
//
// Each "process" is a fresh engine.Manager over a fresh aws.Provider (fresh
// memory, the same options and the same fake EC2, reached through the real
// AWS SDK over a real socket). It is killed by cancelling its context: no
// Remove, no cleanup, like kill -9 — requests already on the wire still
// complete on the fake's side, their answers are lost.
//
// The fake follows the EC2 documentation (see the ec2test package doc for
// the URLs); the properties checked here lean on two of them:
//   - RunInstances is idempotent through ClientToken, so a retried launch
//     whose first answer was lost yields the same instance:
//     https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-idempotency.html
//   - DescribeInstances with tag:KEY and instance-state-name filters finds
//     every instance the installation owns, so a new process adopts what
//     the previous one launched:
//     https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances.html
package chaos_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net/http"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/gc"
	"github.com/tidegpu/tidegpu/internal/provider/aws"
	"github.com/tidegpu/tidegpu/internal/provider/aws/ec2test"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

const (
	cluster  = "chaos"
	region   = "us-east-1"
	maxSize  = 10
	maxWant  = 8
	numPools = 5
)

// world is what survives a kill: the fake cloud and the wanted pools (the
// CRs, in the operator's terms).
type world struct {
	t    *testing.T
	srv  *ec2test.Server
	rng  *rand.Rand
	want map[string]int32 // pool → desired replicas
	next int              // for fresh pool names
	gen  int64
}

func (w *world) spec(name string) *tidev1.TidePool {
	n := w.want[name]
	w.gen++
	return &tidev1.TidePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: w.gen},
		Spec: tidev1.TidePoolSpec{
			Provider: tidev1.ProviderAWS, Region: region, AvailabilityZone: region + "a",
			InstanceType: "g5.xlarge", ImageID: "ami-0123456789abcdef0",
			Minimum: 0, Maximum: maxSize, Replicas: &n,
		},
	}
}

func (w *world) addPool() string {
	w.next++
	name := fmt.Sprintf("chaos-%03d", w.next)
	w.want[name] = int32(w.rng.Intn(maxWant + 1))
	return name
}

func (w *world) pools() map[string]bool {
	out := make(map[string]bool, len(w.want))
	for name := range w.want {
		out[name] = true
	}
	return out
}

// process is one controller process: a provider and a manager with their
// own memory and their own connections.
type process struct {
	m      *engine.Manager
	p      *aws.Provider
	tr     *http.Transport
	cancel context.CancelFunc
	done   chan struct{}
}

func (w *world) start() *process {
	w.t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := aws.New(context.Background(), aws.Options{
		Region: region, Cluster: cluster, Endpoint: w.srv.URL,
		Credentials: &aws.StaticCredentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "not-a-real-secret"},
		RateLimit:   -1, ListCacheTTL: 20 * time.Millisecond,
		MaxAttempts: 3, BackoffBase: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		HTTPClient: &http.Client{Timeout: 10 * time.Second, Transport: tr},
		Logger:     discard,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	m, err := engine.NewManager(engine.Options{
		Provider: p, Registrar: registrar.Nop{}, Recorder: events.NewRecorder(100, nil, discard),
		Logger: discard,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	names := make([]string, 0, len(w.want))
	for name := range w.want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m.Apply(w.spec(name))
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr := &process{m: m, p: p, tr: tr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(pr.done)
		m.Run(ctx)
	}()
	return pr
}

// kill ends the process abruptly: its context goes, nothing is cleaned up.
func (pr *process) kill(t *testing.T) {
	pr.cancel()
	select {
	case <-pr.done:
	case <-time.After(20 * time.Second):
		t.Fatal("manager did not stop within 20s of its context ending")
	}
	pr.tr.CloseIdleConnections()
}

// census is the fake cloud as the test sees it.
type census struct {
	created int              // instances ever created
	gone    int              // shutting-down or terminated
	live    map[string]int32 // pool → pending or running instances
	foreign int              // live instances without our cluster's tags
}

func (w *world) census() census {
	c := census{live: map[string]int32{}}
	for _, in := range w.srv.Instances() {
		c.created++
		switch in.State {
		case ec2test.StateShuttingDown, ec2test.StateTerminated:
			c.gone++
			continue
		}
		if in.Tags[aws.TagManagedBy] != aws.ManagedByValue || in.Tags[aws.TagCluster] != cluster {
			c.foreign++
			continue
		}
		c.live[in.Tags[aws.TagPool]]++
	}
	return c
}

// missing is how many launches the wanted pools still need.
func (w *world) missing(c census) int {
	n := 0
	for name, want := range w.want {
		if d := want - c.live[name]; d > 0 {
			n += int(d)
		}
	}
	return n
}

func (w *world) converged(c census) bool {
	for name, n := range w.want {
		if c.live[name] != n {
			return false
		}
	}
	return true
}

// waitFor polls cond until it holds or d runs out; it reports whether cond
// held.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestKilledControllerLeavesNothingBehind(t *testing.T) {
	target := 1000
	if testing.Short() {
		target = 150
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	srv := ec2test.NewServer(ec2test.Options{Region: region})
	t.Cleanup(srv.Close)
	w := &world{t: t, srv: srv, rng: rand.New(rand.NewSource(seed)), want: map[string]int32{}}
	for range numPools {
		w.addPool()
	}

	var kills, deleted, drops, rounds, timeouts, orphans int
	started := time.Now()
	for rounds = 0; ; rounds++ {
		c := w.census()
		if c.created >= target {
			break
		}
		if rounds > 20*target {
			t.Fatalf("no progress: %d launches, %d terminations after %d rounds", c.created, c.gone, rounds)
		}
		if time.Since(started) > 3*time.Minute {
			t.Fatalf("too slow: %d launches, %d terminations after %d rounds in %s", c.created, c.gone, rounds, time.Since(started))
		}
		// The operator's users resize pools between processes.
		for name := range w.want {
			if w.rng.Intn(3) > 0 {
				w.want[name] = int32(w.rng.Intn(maxWant + 1))
			}
		}
		if w.rng.Intn(5) == 0 {
			srv.DropNextRunInstances(1 + w.rng.Intn(4)) // up to 3 attempts: some heal, some are lost
			drops++
		}
		pr := w.start()
		if w.rng.Intn(3) == 0 {
			// This process collects garbage as it starts, concurrently
			// with its pools' first rounds.
			done, err := gc.Collect(context.Background(), pr.p, w.pools(), time.Now(), 0)
			if err != nil {
				t.Fatalf("gc in round %d: %v", rounds, err)
			}
			orphans += len(done)
		}

		// Maybe resize again while it runs, then kill it at a random point:
		// after a short random time, after some launches, or once it has
		// converged.
		for step := w.rng.Intn(3); step >= 0; step-- {
			base := w.census().created
			switch w.rng.Intn(3) {
			case 0:
				d := time.Duration(w.rng.Intn(30)) * time.Millisecond
				time.Sleep(d) // the kill point is a time, not a condition
			case 1:
				// After k of the launches still missing.
				if missing := w.missing(w.census()); missing > 0 {
					k := 1 + w.rng.Intn(missing)
					if !waitFor(5*time.Second, func() bool { return w.census().created >= base+k }) {
						timeouts++
					}
				}
			default:
				if !waitFor(5*time.Second, func() bool { return w.converged(w.census()) }) {
					timeouts++
				}
			}
			if step > 0 {
				for name := range w.want {
					if w.rng.Intn(2) == 0 {
						w.want[name] = int32(w.rng.Intn(maxWant + 1))
						pr.m.Apply(w.spec(name))
					}
				}
			}
		}
		pr.kill(t)
		kills++

		// Sometimes a pool is deleted while no controller runs: its
		// instances become orphans for the GC. A new one takes its place.
		if w.rng.Intn(4) == 0 {
			names := make([]string, 0, len(w.want))
			for name := range w.want {
				names = append(names, name)
			}
			sort.Strings(names)
			delete(w.want, names[w.rng.Intn(len(names))])
			w.addPool()
			deleted++
		}
	}
	srv.DropNextRunInstances(0)

	// The last process runs until the pools hold their wanted sizes.
	pr := w.start()
	if !waitFor(20*time.Second, func() bool { return w.converged(w.census()) }) {
		c := w.census()
		pr.kill(t)
		t.Fatalf("final process did not converge: want %v, live %v", w.want, c.live)
	}
	before := w.census()
	collected, err := gc.Collect(context.Background(), pr.p, w.pools(), time.Now(), 0)
	if err != nil {
		t.Fatalf("gc: %v", err)
	}
	pr.kill(t)

	// Orphans the GC should have found: live instances of pools that no
	// longer exist.
	var left int32
	for name, n := range before.live {
		if !w.pools()[name] {
			left += n
		}
	}
	if int32(len(collected)) != left {
		t.Errorf("gc collected %d instances, %d orphans were live", len(collected), left)
	}

	after := w.census()
	if after.foreign != 0 {
		t.Errorf("%d live instances do not carry the cluster's tags", after.foreign)
	}
	var live int32
	for name, n := range after.live {
		live += n
		if _, ok := w.want[name]; !ok {
			t.Errorf("pool %q does not exist but has %d live instances after gc", name, n)
		}
	}
	for name, want := range w.want {
		if got := after.live[name]; got != want {
			t.Errorf("pool %s has %d live instances, want %d", name, got, want)
		}
	}
	if after.gone < target-numPools*maxWant {
		t.Errorf("%d terminations, want at least %d", after.gone, target-numPools*maxWant)
	}
	if int(live)+after.gone != after.created {
		t.Errorf("unaccounted instances: %d created, %d live, %d terminated", after.created, live, after.gone)
	}

	// Idempotency: one launch token, one instance — a retried or adopted
	// launch never created a second instance for the same slot.
	tokens := map[string]string{}
	for _, in := range srv.Instances() {
		tok := in.Tags[aws.TagLaunchToken]
		if tok == "" {
			t.Errorf("instance %s has no launch token tag", in.ID)
			continue
		}
		if other, dup := tokens[tok]; dup {
			t.Errorf("launch token %s created both %s and %s", tok, other, in.ID)
		}
		tokens[tok] = in.ID
	}
	var dropped, runs int
	for _, call := range srv.Calls() {
		if call.Action == "RunInstances" {
			runs++
			if call.Dropped {
				dropped++
			}
		}
	}

	t.Logf("%d processes killed over %d rounds in %s (%d waits for a kill point timed out); %d pools deleted; %d drop injections (%d RunInstances answers lost of %d calls)",
		kills, rounds, time.Since(started).Round(time.Millisecond), timeouts, deleted, drops, dropped, runs)
	t.Logf("launches %d, terminations %d (gc: %d orphans collected on the way, %d at the end), live at the end %d in %d pools",
		after.created, after.gone, orphans, len(collected), live, len(w.want))
}
