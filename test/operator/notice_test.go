package operator_test

// The notice path in a cluster, end to end: `tidegpu operator` with an AWS
// pool on the EC2 fake (ec2test, the Query protocol), the SQS fake
// (sqstest, the JSON protocol) as the EventBridge interruption queue, and
// `tidegpu gateway --kubeconfig` under steady load. Each fake instance is
// served by a real `tidegpu sim` process on its own loopback address (the
// fake hands out 127.0.0.x as private IPs). Event shapes: see
// internal/provider/aws/awsqueue's tests for the EC2 User Guide pages.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/agent/metadatatest"
	"github.com/tidegpu/tidegpu/internal/provider/aws/ec2test"
	"github.com/tidegpu/tidegpu/internal/provider/aws/sqstest"
)

// backends starts a `tidegpu sim` for every running instance of the EC2
// fake and stops it when the instance leaves running: the fake's
// instances serve as real processes would.
type backends struct {
	t    *testing.T
	srv  *ec2test.Server
	port int
	mu   sync.Mutex
	proc map[string]*proc
}

func (b *backends) run(ctx context.Context) {
	for ctx.Err() == nil {
		for _, in := range b.srv.Instances() {
			b.mu.Lock()
			p, has := b.proc[in.ID]
			switch {
			case in.State == ec2test.StateRunning && !has:
				b.proc[in.ID] = startProc(b.t, "sim", "--addr", net.JoinHostPort(in.PrivateIP, fmt.Sprint(b.port)))
			case has && in.State != ec2test.StateRunning && p.Running():
				go p.Stop(9) // the cloud takes the machine: SIGKILL
			}
			b.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// loadGen sends chat requests through the gateway until stopped.
type loadGen struct {
	ok, failed atomic.Int64
	stop, done chan struct{}
}

// loadClients is how many clients send at once.
const loadClients = 4

func startLoad(t *testing.T, gw string) *loadGen {
	l := &loadGen{stop: make(chan struct{}), done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(loadClients)
	for range loadClients {
		go l.client(t, gw, &wg)
	}
	go func() { wg.Wait(); close(l.done) }()
	return l
}

func (l *loadGen) client(t *testing.T, gw string, wg *sync.WaitGroup) {
	defer wg.Done()
	func() {
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			resp, err := http.Post(gw+"/ollama-chat", "application/json",
				strings.NewReader(`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"stream":false}`))
			if err != nil {
				l.failed.Add(1)
				t.Logf("gateway: %v", err)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				l.ok.Add(1)
			} else {
				l.failed.Add(1)
				t.Logf("gateway answered %d: %s", resp.StatusCode, b)
			}
		}
	}()
}

// more waits until n more requests have been answered.
func (l *loadGen) more(t *testing.T, n int64) {
	t.Helper()
	base := l.ok.Load()
	eventually(t, 30*time.Second, fmt.Sprintf("%d more answers through the gateway", n), func() bool { return l.ok.Load() >= base+n })
}

func (l *loadGen) end() { close(l.stop); <-l.done }

func instancePhase(tp *tidev1.TidePool, id string) string {
	for _, in := range tp.Status.Instances {
		if in.ID == id {
			return in.Phase
		}
	}
	return ""
}

func TestSpotInterruptionThroughQueueAndAgent(t *testing.T) {
	const region = "us-east-1"
	ec2 := ec2test.NewServer(ec2test.Options{Region: region, PrivateIP: func(n int) string { return fmt.Sprintf("127.0.0.%d", 20+n) }})
	// Cleanups run last to first: the fakes outlive the operator, which
	// deletes the pool (and terminates its instances) at the end.
	t.Cleanup(ec2.Close)
	queue := sqstest.NewServer(sqstest.Options{})
	t.Cleanup(queue.Close)
	port := 18000 + os.Getpid()%1000
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	bk := &backends{t: t, srv: ec2, port: port, proc: map[string]*proc{}}
	go bk.run(ctx)

	// The SQS client's credentials and region come from the SDK's default
	// chain, here the environment.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
	t.Setenv("AWS_REGION", region)
	noticeAddr := freeAddr(t)
	op := startProc(t, "operator", "--kubeconfig", kubeconfig, "--state-dir", t.TempDir(),
		"--metrics-bind-address", "0", "--health-probe-bind-address", freeAddr(t), "--admin-addr", "0", "--log-level", "debug",
		"--notice-addr", noticeAddr, "--notice-url", "http://"+noticeAddr, "--aws-interruption-queue", queue.QueueURL)
	gwAddr := freeAddr(t)
	gwProc := startProc(t, "gateway", "--kubeconfig", kubeconfig, "--addr", gwAddr, "--admin-addr", freeAddr(t))

	ns := namespace(t)
	bg := context.Background()
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "aws"},
		StringData: map[string]string{"accessKeyId": "AKIDEXAMPLE", "secretAccessKey": "not-a-real-secret"}}
	if err := k8s.Create(bg, creds); err != nil {
		t.Fatal(err)
	}
	tp := &tidev1.TidePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chat"},
		Spec: tidev1.TidePoolSpec{Provider: tidev1.ProviderAWS, Region: region, Endpoint: ec2.URL, AvailabilityZone: region + "a",
			InstanceType: "g5.xlarge", ImageID: "ami-0123456789abcdef0", InstanceChargeType: tidev1.ChargeSpot, Minimum: 3, Maximum: 5,
			CredentialsSecretRef: &tidev1.SecretReference{Name: "aws"},
			Serving:              tidev1.ServingSpec{Port: int32(port), UsePrivateIP: true, ReadinessPath: "/healthz"},
			Bootstrap:            &tidev1.BootstrapSpec{Template: tidev1.BootstrapOllama, Model: "qwen2:0.5b"}}}
	createPool(t, tp)
	nn := types.NamespacedName{Namespace: ns, Name: "chat"}
	took := eventually(t, 60*time.Second, "3 Ready instances in status", func() bool {
		tp, ok := getPool(t, nn)
		return ok && len(readyIDs(tp)) == 3
	})
	t.Logf("3 EC2-fake instances Ready %s after apply", took)

	// The pool's notice token: in its Secret, owned by the TidePool, and in
	// the user data the launches carried (a root-only file on the instance).
	var sec corev1.Secret
	eventually(t, 10*time.Second, "the notice token Secret", func() bool {
		return k8s.Get(bg, types.NamespacedName{Namespace: ns, Name: "chat-notice-token"}, &sec) == nil
	})
	token := string(sec.Data["token"])
	if len(token) < 40 || len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].Name != "chat" {
		t.Fatalf("notice token Secret: %d-byte token, owners %+v", len(token), sec.OwnerReferences)
	}
	runs := 0
	for _, c := range ec2.Calls() {
		if c.Action != "RunInstances" || c.Status != 200 {
			continue
		}
		runs++
		ud, err := base64.StdEncoding.DecodeString(c.Params.Get("UserData"))
		if err != nil || !strings.HasPrefix(string(ud), "#cloud-config\n") || !strings.Contains(string(ud), "--controller http://"+noticeAddr) ||
			!strings.Contains(string(ud), "path: /etc/tidegpu/notice-token") || !strings.Contains(string(ud), token) {
			t.Fatalf("RunInstances UserData is not the rendered bootstrap with the notice URL and token (%v):\n%s", err, ud)
		}
	}
	if runs < 3 {
		t.Fatalf("%d successful RunInstances calls, want 3", runs)
	}

	gw := "http://" + gwAddr
	eventually(t, 15*time.Second, "the gateway to answer", func() bool {
		resp, err := http.Post(gw+"/ollama-chat", "application/json", strings.NewReader(`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hi"}],"stream":false}`))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	// reclaim waits for the victim to drain and its replacement to be
	// Ready, then plays the cloud: the victim goes away (SIGKILL of its
	// server) if the engine has not terminated it already.
	reclaim := func(what, victim string, announced time.Time, before []string) {
		t.Helper()
		eventually(t, 30*time.Second, what+": "+victim+" Draining", func() bool {
			tp, ok := getPool(t, nn)
			return ok && (instancePhase(tp, victim) == tidev1.PhaseDraining || instancePhase(tp, victim) == "")
		})
		var replacement string
		eventually(t, 60*time.Second, what+": a replacement Ready", func() bool {
			tp, ok := getPool(t, nn)
			if !ok {
				return false
			}
			for _, id := range readyIDs(tp) {
				if !slices.Contains(before, id) {
					replacement = id
					return true
				}
			}
			return false
		})
		ready := time.Since(announced)
		if ready > 2*time.Minute {
			t.Errorf("%s: replacement Ready %s after the notice, later than EC2's 2-minute warning", what, ready)
		}
		if in, ok := ec2.Instance(victim); ok && in.State == ec2test.StateRunning {
			if err := ec2.SetState(victim, ec2test.StateTerminated); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s: %s drained, replacement %s Ready %s after the notice, before the reclaim", what, victim, replacement, ready.Round(time.Millisecond))
		eventually(t, 30*time.Second, what+": 3 Ready without "+victim, func() bool {
			tp, ok := getPool(t, nn)
			ids := readyIDs(tp)
			return ok && len(ids) == 3 && !slices.Contains(ids, victim)
		})
	}

	// 1. The agentless path: a Spot Instance Interruption Warning on the queue.
	load := startLoad(t, gw)
	load.more(t, 20)
	cur, _ := getPool(t, nn)
	before := readyIDs(cur)
	victim := before[0]
	now := time.Now().UTC()
	queue.Send(fmt.Sprintf(`{"version":"0","id":"6a7e8feb-b491-4cf7-a9f1-bf3703467718","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":%q,"region":%q,"resources":["arn:aws:ec2:%s:123456789012:instance/%s"],"detail":{"instance-id":%q,"instance-action":"terminate"}}`,
		now.Format(time.RFC3339), region, region, victim, victim))
	reclaim("queue", victim, now, before)
	load.more(t, 20)
	eventually(t, 10*time.Second, "the queue message deleted", func() bool {
		ms := queue.Messages()
		return len(ms) == 1 && ms[0].Deleted
	})

	// 2. The agent on the instance posts to the notice endpoint with the
	// pool's token; a wrong token is refused and changes nothing.
	cur, _ = getPool(t, nn)
	before = readyIDs(cur)
	victim2, bystander := before[0], before[1]
	post := func(id, tok string, at time.Time) int {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s/api/v1/namespaces/%s/pools/chat/instances/%s/notice", noticeAddr, ns, id),
			strings.NewReader(fmt.Sprintf(`{"source":"aws-imds","interruptAt":%q}`, at.Format(time.RFC3339))))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The agent's copy of the queue's notice (the same interruption time,
	// as IMDS and EventBridge announce one): acknowledged, not handled again.
	if code := post(victim, token, now.Add(2*time.Minute)); code != http.StatusAccepted {
		t.Fatalf("the agent's copy of the queue's notice: %d, want 202", code)
	}
	wrong := strings.Repeat("x", len(token))
	if code := post(bystander, wrong, time.Now().Add(2*time.Minute)); code != http.StatusUnauthorized {
		t.Fatalf("a wrong pool token: %d, want 401", code)
	}
	if code := post(bystander, "", time.Now().Add(2*time.Minute)); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", code)
	}
	imds := metadatatest.NewAWS(t, victim2)
	tokFile := filepath.Join(t.TempDir(), "notice-token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = time.Now().UTC()
	imds.Schedule("terminate", now.Add(2*time.Minute))
	agentProc := startProc(t, "agent", "--cloud", "aws", "--metadata-endpoint", imds.URL, "--controller", "http://"+noticeAddr,
		"--namespace", ns, "--pool", "chat", "--token-file", tokFile, "--interval", "100ms")
	reclaim("agent", victim2, now, before)
	load.more(t, 20)
	eventually(t, 10*time.Second, "the agent's acknowledgement", func() bool {
		return strings.Contains(agentProc.Out.String(), "notice acknowledged by the controller")
	})
	load.end()
	t.Logf("through both reclaims the gateway answered %d x 200, %d failures", load.ok.Load(), load.failed.Load())
	if load.failed.Load() != 0 {
		t.Errorf("the gateway failed %d requests across the two reclaims", load.failed.Load())
	}

	// The wrong token had no effect: the bystander never drained.
	cur, _ = getPool(t, nn)
	if ph := instancePhase(cur, bystander); ph != tidev1.PhaseReady {
		t.Errorf("the bystander a wrong token named is %q, want Ready", ph)
	}
	if hasEvent(t, ns, "ReclaimNotice", bystander) {
		t.Error("a ReclaimNotice event for the bystander, whose notice had a wrong token")
	}
	// Each notice handled once: one ReclaimNotice event per victim.
	for _, id := range []string{victim, victim2} {
		eventually(t, 10*time.Second, "the ReclaimNotice event of "+id, func() bool { return countEvents(t, ns, "ReclaimNotice", id) >= 1 })
		if n := countEvents(t, ns, "ReclaimNotice", id); n != 1 {
			t.Errorf("%d ReclaimNotice events for %s, want 1", n, id)
		}
	}

	// The token is in no status, event or log.
	cur, _ = getPool(t, nn)
	st, _ := json.Marshal(cur)
	var evs eventsv1.EventList
	if err := k8s.List(bg, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	ev, _ := json.Marshal(evs)
	for what, text := range map[string]string{"the TidePool (spec and status)": string(st), "the pool's Events": string(ev),
		"the operator's log": op.Out.String(), "the gateway's log": gwProc.Out.String(), "the agent's log": agentProc.Out.String()} {
		if strings.Contains(text, token) {
			t.Errorf("the notice token appears in %s", what)
		}
	}
}

func countEvents(t *testing.T, ns, reason, note string) int {
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return -1
	}
	n := 0
	for _, e := range list.Items {
		if e.Reason == reason && strings.Contains(e.Note, note) {
			n++
		}
	}
	return n
}
