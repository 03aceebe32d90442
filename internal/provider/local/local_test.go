package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// The test binary doubles as the instance program: with childEnv=1 it
// serves /healthz and /info on 127.0.0.1:$TIDEGPU_PORT until killed.
const (
	childEnv       = "TIDEGPU_LOCAL_TEST_CHILD"
	ignoreTermEnv  = "TIDEGPU_LOCAL_TEST_IGNORE_TERM"
	idleEnv        = "TIDEGPU_LOCAL_TEST_IDLE" // =1: do not listen, just wait to be killed
	testTimeout    = 10 * time.Second
	shortStopGrace = 300 * time.Millisecond
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		runChild()
		return
	}
	os.Exit(m.Run())
}

// childInfo is what a child reports on /info.
type childInfo struct {
	PID  int               `json:"pid"`
	Args []string          `json:"args"`
	Env  map[string]string `json:"env"`
}

func runChild() {
	if os.Getenv(ignoreTermEnv) == "1" {
		signal.Ignore(syscall.SIGTERM)
	}
	if os.Getenv(idleEnv) == "1" {
		time.Sleep(24 * time.Hour)
		os.Exit(4)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/info", func(w http.ResponseWriter, _ *http.Request) {
		env := map[string]string{}
		for _, kv := range os.Environ() {
			if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TIDEGPU_") || k == "OLLAMA_HOST" || k == "EXTRA" {
				env[k] = v
			}
		}
		json.NewEncoder(w).Encode(childInfo{PID: os.Getpid(), Args: os.Args[1:], Env: env})
	})
	err := http.ListenAndServe("127.0.0.1:"+os.Getenv("TIDEGPU_PORT"), mux)
	fmt.Fprintln(os.Stderr, "child:", err)
	os.Exit(3)
}

func testExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// testLogger logs to stderr when TIDEGPU_TEST_LOG is set, else nowhere.
func testLogger() *slog.Logger {
	if os.Getenv("TIDEGPU_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newTestProvider(t *testing.T, dir string, mod func(*Options)) *Provider {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	opts := Options{StateDir: dir, SelfExe: testExe(t), StopGrace: 2 * time.Second, Logger: testLogger()}
	if mod != nil {
		mod(&opts)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// childSpec runs the test binary as the instance, with template arguments
// it reports back on /info.
func childSpec(t *testing.T, env ...string) *tidev1.TidePoolSpec {
	return &tidev1.TidePoolSpec{
		InstanceChargeType: tidev1.ChargeSpot,
		Local: &tidev1.LocalSpec{
			Command: []string{testExe(t), "port={{.Port}}", "host={{.Host}}", "id={{.InstanceID}}", "pool={{.Pool}}"},
			Env:     append([]string{childEnv + "=1"}, env...),
		},
	}
}

// launchReady launches an instance and waits until it answers HTTP.
func launchReady(t *testing.T, p *Provider, req provider.LaunchRequest) provider.Instance {
	t.Helper()
	inst, err := p.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	pid, start := pidOf(t, p, inst.ID)
	t.Cleanup(func() { killIfSame(pid, start) })
	waitHTTP(t, inst.Address)
	return inst
}

// killIfSame SIGKILLs a test instance's group if it is still that process
// (a safety net so no test leaves processes behind).
func killIfSame(pid int, start uint64) {
	if sameProcess(pid, start) {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
}

func pidOf(t *testing.T, p *Provider, id string) (int, uint64) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.procs[id]
	if pr == nil {
		t.Fatalf("no process for %s", id)
	}
	return pr.pid, pr.startTime
}

var httpClient = &http.Client{Timeout: time.Second}

func get(addr, path string) (string, error) {
	resp, err := httpClient.Get("http://" + addr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return string(b), err
}

func waitHTTP(t *testing.T, addr string) {
	t.Helper()
	var last error
	waitFor(t, "HTTP on "+addr, func() bool {
		_, last = get(addr, "/healthz")
		return last == nil
	})
}

// waitFor polls cond every 10ms for at most testTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// waitEvent returns the next event of type typ for id, skipping others.
func waitEvent(t *testing.T, ch <-chan provider.Event, typ provider.EventType, id string) provider.Event {
	t.Helper()
	timeout := time.After(testTimeout)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("events closed while waiting for %s of %s", typ, id)
			}
			if ev.Type == typ && ev.Instance.ID == id {
				return ev
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s of %s", typ, id)
		}
	}
}

// reaped reports whether pid is gone and reaped: /proc/<pid> absent, or
// the pid now names another process. A zombie is not reaped.
func reaped(pid int, start uint64) bool {
	st, err := readStat(pid)
	return err != nil || st.StartTime != start
}

func readState(t *testing.T, dir string) []stateEntry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := parseState(b)
	if err != nil {
		t.Fatalf("state.json: %v\n%s", err, b)
	}
	return entries
}

func ids(insts []provider.Instance) []string {
	out := make([]string, 0, len(insts))
	for _, i := range insts {
		out = append(out, i.ID)
	}
	slices.Sort(out)
	return out
}

func listIDs(t *testing.T, p *Provider, pool string) []string {
	t.Helper()
	l, err := p.List(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return ids(l)
}

func TestLaunchServesHTTP(t *testing.T) {
	dir := t.TempDir()
	p := newTestProvider(t, dir, nil)
	spec := childSpec(t, "EXTRA=yes")
	spec.InstanceChargeType = tidev1.ChargeOnDemand
	inst := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: spec})

	if !validID(inst.ID) || inst.State != provider.StateRunning || inst.Zone != "local" ||
		inst.Market != provider.MarketOnDemand || inst.InstanceType != "local" || inst.Pool != "chat" || inst.LaunchedAt.IsZero() {
		t.Fatalf("unexpected instance %+v", inst)
	}
	host, port, err := net.SplitHostPort(inst.Address)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("address %q", inst.Address)
	}
	body, err := get(inst.Address, "/info")
	if err != nil {
		t.Fatal(err)
	}
	var info childInfo
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	wantArgs := []string{"port=" + port, "host=127.0.0.1", "id=" + inst.ID, "pool=chat"}
	if !slices.Equal(info.Args, wantArgs) {
		t.Errorf("args %q, want %q", info.Args, wantArgs)
	}
	wantEnv := map[string]string{
		"TIDEGPU_PORT": port, "TIDEGPU_HOST": "127.0.0.1", "TIDEGPU_INSTANCE_ID": inst.ID, "TIDEGPU_POOL": "chat",
		"OLLAMA_HOST": inst.Address, "EXTRA": "yes", childEnv: "1",
	}
	for k, v := range wantEnv {
		if info.Env[k] != v {
			t.Errorf("env %s=%q, want %q", k, info.Env[k], v)
		}
	}
	// Its own process group, so a ^C at the terminal does not reach it.
	if st, err := readStat(info.PID); err != nil || st.PGRP != info.PID {
		t.Errorf("pgrp of %d = %+v, %v; want its own group", info.PID, st, err)
	}

	if got := listIDs(t, p, "chat"); !slices.Equal(got, []string{inst.ID}) {
		t.Errorf("List(chat) = %v", got)
	}
	if got := listIDs(t, p, "other"); len(got) != 0 {
		t.Errorf("List(other) = %v", got)
	}
	entries := readState(t, dir)
	pid, start := pidOf(t, p, inst.ID)
	if len(entries) != 1 || entries[0].ID != inst.ID || entries[0].PID != pid || entries[0].StartTime != start ||
		strconv.Itoa(entries[0].Port) != port || entries[0].Market != provider.MarketOnDemand {
		t.Errorf("state %+v", entries)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", inst.ID+".log")); err != nil {
		t.Errorf("log file: %v", err)
	}

	// Default command: [SelfExe, "sim"]; instance type from request, then spec.
	def := &tidev1.TidePoolSpec{InstanceType: "g5.xlarge", Local: &tidev1.LocalSpec{Env: []string{childEnv + "=1"}}}
	inst2 := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: def})
	if inst2.InstanceType != "g5.xlarge" || inst2.Market != provider.MarketSpot {
		t.Errorf("default-command instance %+v", inst2)
	}
	body, err = get(inst2.Address, "/info")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Args, []string{"sim"}) {
		t.Errorf("default command args %q, want [sim]", info.Args)
	}
	inst3 := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: def, InstanceType: "override", Market: provider.MarketOnDemand})
	if inst3.InstanceType != "override" || inst3.Market != provider.MarketOnDemand {
		t.Errorf("request overrides ignored: %+v", inst3)
	}
}

func TestLaunchIdempotentToken(t *testing.T) {
	p := newTestProvider(t, "", nil)
	req := provider.LaunchRequest{Pool: "chat", Spec: childSpec(t), Token: "tok-1"}
	a := launchReady(t, p, req)
	b, err := p.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != b.ID || a.Address != b.Address {
		t.Fatalf("same token gave %s and %s", a.ID, b.ID)
	}
	other := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: childSpec(t), Token: "tok-2"})
	if other.ID == a.ID {
		t.Fatal("different token gave the same instance")
	}
	if got := listIDs(t, p, ""); len(got) != 2 {
		t.Fatalf("List = %v, want 2 instances", got)
	}
	// The token is remembered only while its instance lives.
	if err := p.Reclaim(context.Background(), a.ID, 0); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, p.Events(), provider.EventGone, a.ID)
	c := launchReady(t, p, req)
	if c.ID == a.ID {
		t.Fatal("token of a gone instance still returned it")
	}
}

func TestKilledFromOutside(t *testing.T) {
	dir := t.TempDir()
	p := newTestProvider(t, dir, nil)
	inst := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: childSpec(t)})
	pid, start := pidOf(t, p, inst.ID)

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, p.Events(), provider.EventGone, inst.ID)
	if ev.Message != "killed by signal 9 (killed)" || ev.Instance.Address != inst.Address {
		t.Errorf("gone event %+v", ev)
	}
	if got := listIDs(t, p, ""); len(got) != 0 {
		t.Errorf("List after exit = %v", got)
	}
	if entries := readState(t, dir); len(entries) != 0 {
		t.Errorf("state after exit = %+v", entries)
	}
	if !reaped(pid, start) {
		t.Errorf("pid %d not reaped", pid)
	}
}

func TestExitStatusReported(t *testing.T) {
	p := newTestProvider(t, "", nil)
	// The child exits 3 when it cannot listen: give it a port that is taken.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	spec := &tidev1.TidePoolSpec{Local: &tidev1.LocalSpec{
		Command: []string{"/bin/sh", "-c", `TIDEGPU_PORT=` + taken + ` exec "$0"`, testExe(t)},
		Env:     []string{childEnv + "=1"},
	}}
	inst, err := p.Launch(context.Background(), provider.LaunchRequest{Pool: "chat", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, p.Events(), provider.EventGone, inst.ID); ev.Message != "exited with status 3" {
		t.Errorf("message %q", ev.Message)
	}
}

func TestTerminate(t *testing.T) {
	dir := t.TempDir()
	p := newTestProvider(t, dir, nil)
	inst := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: childSpec(t)})
	pid, start := pidOf(t, p, inst.ID)

	if err := p.Terminate(context.Background(), inst.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(context.Background(), inst.ID); err != nil { // idempotent
		t.Fatal(err)
	}
	ch := waitEvent(t, p.Events(), provider.EventChanged, inst.ID)
	if ch.Instance.State != provider.StateTerminating {
		t.Errorf("changed event %+v", ch)
	}
	ev := waitEvent(t, p.Events(), provider.EventGone, inst.ID)
	if ev.Message != "terminated: killed by signal 15 (terminated)" {
		t.Errorf("gone message %q", ev.Message)
	}
	if !reaped(pid, start) {
		t.Errorf("pid %d not reaped (zombie?)", pid)
	}
	if got := listIDs(t, p, ""); len(got) != 0 {
		t.Errorf("List = %v", got)
	}
	if entries := readState(t, dir); len(entries) != 0 {
		t.Errorf("state = %+v", entries)
	}
	if err := p.Terminate(context.Background(), inst.ID); err != nil {
		t.Errorf("Terminate of a gone instance: %v", err)
	}
	if err := p.Terminate(context.Background(), "local-ffffffff"); err != nil {
		t.Errorf("Terminate of an unknown instance: %v", err)
	}
}

func TestTerminateKillsAfterGrace(t *testing.T) {
	p := newTestProvider(t, "", func(o *Options) { o.StopGrace = shortStopGrace })
	inst := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: childSpec(t, ignoreTermEnv+"=1")})
	pid, start := pidOf(t, p, inst.ID)

	began := time.Now()
	if err := p.Terminate(context.Background(), inst.ID); err != nil {
		t.Fatal(err)
	}
	l, _ := p.List(context.Background(), "")
	if len(l) != 1 || l[0].State != provider.StateTerminating {
		t.Fatalf("List right after Terminate = %+v, want one Terminating", l)
	}
	ev := waitEvent(t, p.Events(), provider.EventGone, inst.ID)
	if ev.Message != "terminated: killed by signal 9 (killed)" {
		t.Errorf("gone message %q", ev.Message)
	}
	if d := time.Since(began); d < shortStopGrace {
		t.Errorf("killed after %v, before the %v grace", d, shortStopGrace)
	}
	if !reaped(pid, start) {
		t.Errorf("pid %d not reaped", pid)
	}
}

func TestReclaimWithNotice(t *testing.T) {
	fc := testingclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	p := newTestProvider(t, "", func(o *Options) { o.Clock = fc })
	inst := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: childSpec(t)})
	if !inst.LaunchedAt.Equal(fc.Now()) {
		t.Errorf("LaunchedAt %v, want the injected clock's %v", inst.LaunchedAt, fc.Now())
	}
	pid, start := pidOf(t, p, inst.ID)

	const notice = 2 * time.Minute
	deadline := fc.Now().Add(notice)
	if err := p.Reclaim(context.Background(), inst.ID, notice); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, p.Events(), provider.EventInterruption, inst.ID)
	if ev.Instance.InterruptAt == nil || !ev.Instance.InterruptAt.Equal(deadline) {
		t.Fatalf("interruption event %+v, want InterruptAt %v", ev, deadline)
	}
	l, _ := p.List(context.Background(), "chat")
	if len(l) != 1 || l[0].InterruptAt == nil || !l[0].InterruptAt.Equal(deadline) || l[0].State != provider.StateRunning {
		t.Fatalf("List = %+v", l)
	}

	fc.Step(notice - time.Second)
	// The timer has not fired, so nothing can have killed it: it still serves.
	if _, err := get(inst.Address, "/healthz"); err != nil || !sameProcess(pid, start) {
		t.Fatalf("instance died before its notice ran out: %v", err)
	}
	fc.Step(time.Second)
	gone := waitEvent(t, p.Events(), provider.EventGone, inst.ID)
	if gone.Message != "reclaimed: killed by signal 9 (killed)" {
		t.Errorf("gone message %q", gone.Message)
	}
	if !reaped(pid, start) {
		t.Errorf("pid %d not reaped", pid)
	}
}

func TestReclaimNow(t *testing.T) {
	p := newTestProvider(t, "", nil)
	inst := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: childSpec(t)})
	if err := p.Reclaim(context.Background(), inst.ID, 0); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, p.Events(), provider.EventGone, inst.ID); ev.Message != "reclaimed: killed by signal 9 (killed)" {
		t.Errorf("gone message %q", ev.Message)
	}
	err := p.Reclaim(context.Background(), inst.ID, 0)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), inst.ID) {
		t.Errorf("Reclaim of a gone instance: %v, want ErrNotFound naming it", err)
	}
}

// TestAdoptAfterCrash: run A launches three instances and "crashes"
// (Detach); run B on the same state dir adopts two and stops the third.
func TestAdoptAfterCrash(t *testing.T) {
	dir := t.TempDir()
	a := newTestProvider(t, dir, nil)
	k1 := launchReady(t, a, provider.LaunchRequest{Pool: "keep", Spec: childSpec(t)})
	k2 := launchReady(t, a, provider.LaunchRequest{Pool: "keep", Spec: childSpec(t)})
	// The dropped one ignores SIGTERM: B has to escalate to SIGKILL.
	d := launchReady(t, a, provider.LaunchRequest{Pool: "drop", Spec: childSpec(t, ignoreTermEnv+"=1")})
	k1pid, _ := pidOf(t, a, k1.ID)
	dpid, dstart := pidOf(t, a, d.ID)
	a.Detach()
	if _, ok := <-a.Events(); ok {
		t.Fatal("A's events still open after Detach")
	}

	b := newTestProvider(t, dir, func(o *Options) { o.StopGrace = shortStopGrace })
	var offered []string
	adopted, stopped, err := b.Adopt(context.Background(), func(i provider.Instance) bool {
		offered = append(offered, i.ID)
		return i.Pool == "keep"
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(offered)
	if want := ids([]provider.Instance{k1, k2, d}); !slices.Equal(offered, want) {
		t.Errorf("keep was offered %v, want %v", offered, want)
	}
	if got, want := ids(adopted), ids([]provider.Instance{k1, k2}); !slices.Equal(got, want) {
		t.Fatalf("adopted %v, want %v", got, want)
	}
	if got := ids(stopped); !slices.Equal(got, []string{d.ID}) {
		t.Fatalf("stopped %v, want [%s]", got, d.ID)
	}
	if sameProcess(dpid, dstart) {
		t.Fatalf("stopped instance %d still running", dpid)
	}
	l, _ := b.List(context.Background(), "")
	if len(l) != 2 || l[0].Address == "" || l[0].State != provider.StateRunning || l[0].Zone != "local" || l[0].LaunchedAt.IsZero() {
		t.Fatalf("List = %+v", l)
	}
	if got := ids(adopted); !slices.Equal(ids(l), got) {
		t.Fatalf("List %v, adopted %v", ids(l), got)
	}
	if entries := readState(t, dir); len(entries) != 2 {
		t.Errorf("state after Adopt = %+v", entries)
	}
	waitHTTP(t, k1.Address)

	// An outside kill of an adopted process is seen (pidfd path).
	if err := syscall.Kill(k1pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, b.Events(), provider.EventGone, k1.ID)
	if ev.Message != statusAdopted {
		t.Errorf("gone message %q", ev.Message)
	}
	if got := listIDs(t, b, ""); !slices.Equal(got, []string{k2.ID}) {
		t.Errorf("List after kill = %v", got)
	}

	// Terminate works on an adopted instance.
	if err := b.Terminate(context.Background(), k2.ID); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, b.Events(), provider.EventGone, k2.ID); !strings.HasPrefix(ev.Message, "terminated: ") {
		t.Errorf("gone message %q", ev.Message)
	}
	if entries := readState(t, dir); len(entries) != 0 {
		t.Errorf("state at the end = %+v", entries)
	}
}

// TestAdoptPollFallback adopts without pidfds: exits are found by polling,
// and Reclaim works on an adopted instance.
func TestAdoptPollFallback(t *testing.T) {
	dir := t.TempDir()
	a := newTestProvider(t, dir, nil)
	inst := launchReady(t, a, provider.LaunchRequest{Pool: "keep", Spec: childSpec(t)})
	a.Detach()

	b := newTestProvider(t, dir, nil)
	b.noPidfd = true
	adopted, stopped, err := b.Adopt(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(adopted) != 1 || adopted[0].ID != inst.ID || len(stopped) != 0 {
		t.Fatalf("adopted %v stopped %v", adopted, stopped)
	}
	if err := b.Reclaim(context.Background(), inst.ID, 0); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, b.Events(), provider.EventGone, inst.ID); ev.Message != "reclaimed: "+statusAdopted {
		t.Errorf("gone message %q", ev.Message)
	}
}

// TestAdoptNeverSignalsReusedPIDs: entries whose pid is alive but started
// at another time are different processes and must be left alone.
func TestAdoptNeverSignalsReusedPIDs(t *testing.T) {
	dir := t.TempDir()

	// A bystander in its own group, which would die of SIGTERM.
	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	by := exec.Command(testExe(t))
	by.Env = append(os.Environ(), childEnv+"=1", "TIDEGPU_PORT="+strconv.Itoa(port))
	by.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := by.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { by.Process.Kill(); by.Wait() })
	byAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	waitHTTP(t, byAddr)
	bySt, err := readStat(by.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	self, err := readStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A pid that is (almost surely) free now.
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}

	entry := func(id string, pid int, start uint64) stateEntry {
		e := validStateEntry()
		e.ID, e.PID, e.StartTime = id, pid, start
		return e
	}
	entries := []stateEntry{
		entry("local-00000001", os.Getpid(), self.StartTime+12345),
		entry("local-00000002", by.Process.Pid, bySt.StartTime+1),
		entry("local-00000003", dead.Process.Pid, 1),
	}
	if err := writeStateFile(filepath.Join(dir, "state.json"), entries); err != nil {
		t.Fatal(err)
	}

	p := newTestProvider(t, dir, func(o *Options) { o.StopGrace = shortStopGrace })
	adopted, stopped, err := p.Adopt(context.Background(), func(provider.Instance) bool {
		t.Error("keep called for an entry that is not the recorded process")
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(adopted) != 0 || len(stopped) != 0 {
		t.Fatalf("adopted %v stopped %v, want none", adopted, stopped)
	}
	if _, err := get(byAddr, "/healthz"); err != nil || !sameProcess(by.Process.Pid, bySt.StartTime) {
		t.Fatalf("bystander was hurt: %v", err)
	}
	if got := readState(t, dir); len(got) != 0 {
		t.Errorf("state after Adopt = %+v", got)
	}
}

func TestAdoptRules(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte(`{"version":1,"instances":[{"id":"x"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t, dir, nil)
	_, _, err := p.Adopt(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "state.json")) {
		t.Fatalf("Adopt of a corrupt state file: %v, want an error naming it", err)
	}
	if _, _, err := p.Adopt(context.Background(), nil); err == nil {
		t.Error("second Adopt accepted")
	}

	q := newTestProvider(t, "", nil)
	launchReady(t, q, provider.LaunchRequest{Pool: "chat", Spec: childSpec(t)})
	if _, _, err := q.Adopt(context.Background(), nil); err == nil {
		t.Error("Adopt after Launch accepted")
	}
}

func TestStateDirLocked(t *testing.T) {
	dir := t.TempDir()
	first := newTestProvider(t, dir, nil)
	_, err := New(Options{StateDir: dir, Logger: testLogger()})
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
		t.Fatalf("second New: %v, want an error naming %s and the holder's pid", err, dir)
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, err := New(Options{StateDir: dir, Logger: testLogger()})
	if err != nil {
		t.Fatalf("New after Close: %v", err)
	}
	again.Close(context.Background())
}

func TestLaunchErrors(t *testing.T) {
	dir := t.TempDir()
	p := newTestProvider(t, dir, nil)
	for _, tc := range []struct {
		name    string
		local   *tidev1.LocalSpec
		wantErr string
	}{
		{"not in PATH", &tidev1.LocalSpec{Command: []string{"tidegpu-no-such-command", "serve"}}, "tidegpu-no-such-command"},
		{"no such file", &tidev1.LocalSpec{Command: []string{"/nonexistent/bin/serve"}}, "/nonexistent/bin/serve"},
		{"bad template", &tidev1.LocalSpec{Command: []string{"x", "{{.Nope}}"}}, "command[1]"},
		{"bad env", &tidev1.LocalSpec{Command: []string{"x"}, Env: []string{"NOEQUALS"}}, "env[0]"},
	} {
		_, err := p.Launch(context.Background(), provider.LaunchRequest{Pool: "chat", Spec: &tidev1.TidePoolSpec{Local: tc.local}, Token: "t"})
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
	if _, err := p.Launch(context.Background(), provider.LaunchRequest{Spec: childSpec(t), Market: "reserved"}); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("unknown market: err = %v", err)
	}
	if got := listIDs(t, p, ""); len(got) != 0 {
		t.Errorf("List after failed launches = %v", got)
	}
	logs, _ := os.ReadDir(filepath.Join(dir, "logs"))
	if len(logs) != 0 {
		t.Errorf("failed launches left logs %v", logs)
	}
	// The token of a failed launch is not remembered.
	inst := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: childSpec(t), Token: "t"})
	if inst.ID == "" {
		t.Fatal("no instance")
	}
}

func TestClose(t *testing.T) {
	dir := t.TempDir()
	p := newTestProvider(t, dir, func(o *Options) { o.StopGrace = shortStopGrace })
	a := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: childSpec(t)})
	b := launchReady(t, p, provider.LaunchRequest{Pool: "chat", Spec: childSpec(t, ignoreTermEnv+"=1")})
	apid, astart := pidOf(t, p, a.ID)
	bpid, bstart := pidOf(t, p, b.ID)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !reaped(apid, astart) || !reaped(bpid, bstart) {
		t.Error("Close left processes behind")
	}
	if entries := readState(t, dir); len(entries) != 0 {
		t.Errorf("state after Close = %+v", entries)
	}
	gone := map[string]string{}
	for ev := range p.Events() { // closed by Close
		if ev.Type == provider.EventGone {
			gone[ev.Instance.ID] = ev.Message
		}
	}
	if !strings.HasPrefix(gone[a.ID], "stopped: ") || gone[b.ID] != "stopped: killed by signal 9 (killed)" {
		t.Errorf("gone events %v", gone)
	}
	if _, err := p.Launch(context.Background(), provider.LaunchRequest{Spec: childSpec(t)}); !errors.Is(err, ErrClosed) {
		t.Errorf("Launch after Close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	q, err := New(Options{StateDir: dir, Logger: testLogger()})
	if err != nil {
		t.Fatalf("New after Close: %v", err)
	}
	q.Close(ctx)
}
