package local

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
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

// The tests here play the window between Start and the state write: a run
// dies (crashAfterStart, then Detach) with a child that nothing but the
// child's own environment says is an instance.

// markedIn lists the live processes, other than this one, that carry dir's
// ownership marker; no other guard applies.
func markedIn(t *testing.T, dir string) []markedProc {
	t.Helper()
	owner, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	found, err := scanMarked(procRoot, owner, scanGuard{self: os.Getpid(), pgrp: -1})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// killMarkedAtEnd SIGKILLs, when the test ends, whatever still carries
// dir's marker, so that a failing test leaves nothing behind.
func killMarkedAtEnd(t *testing.T, dir string) {
	t.Cleanup(func() {
		for _, m := range markedIn(t, dir) {
			if sameProcess(m.PID, m.StartTime) {
				syscall.Kill(m.PID, syscall.SIGKILL)
			}
		}
	})
}

// crashingLaunch launches through p with the crash hook armed: the child
// starts and p "dies" before recording it. It returns the child as the
// /proc scan sees it.
func crashingLaunch(t *testing.T, p *Provider, dir string, req provider.LaunchRequest) markedProc {
	t.Helper()
	var crashed string
	p.crashAfterStart = func(id string) bool { crashed = id; return true }
	if _, err := p.Launch(context.Background(), req); !errors.Is(err, errSimulatedCrash) {
		t.Fatalf("Launch with the crash hook: %v, want errSimulatedCrash", err)
	}
	p.Detach()
	var found []markedProc
	for _, m := range markedIn(t, dir) {
		if m.ID == crashed {
			found = append(found, m)
		}
	}
	if len(found) != 1 || !found[0].leader() || found[0].Err != nil {
		t.Fatalf("the crashed launch's child %s as scanned: %+v, want one group leader with valid tags", crashed, found)
	}
	if entries, err := readStateFile(filepath.Join(dir, "state.json")); err != nil || len(entries) != 0 {
		t.Fatalf("state.json = %+v, %v; want nothing recorded (the window)", entries, err)
	}
	return found[0]
}

func TestAdoptUnrecordedInstance(t *testing.T) {
	for _, keep := range []bool{true, false} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) {

			dir := t.TempDir()
			killMarkedAtEnd(t, dir)
			fc := testingclock.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			a := newTestProvider(t, dir, func(o *Options) { o.Clock = fc })
			env := []string{}
			if !keep {
				env = append(env, ignoreTermEnv+"=1") // B has to escalate to SIGKILL
			}
			spec := childSpec(t, env...)
			spec.InstanceChargeType = tidev1.ChargeOnDemand
			spec.InstanceType = "g5.xlarge"
			child := crashingLaunch(t, a, dir, provider.LaunchRequest{Pool: "chat", Spec: spec})
			waitHTTP(t, child.Entry.Address) // serving, so past its signal setup

			// B opens the state dir through a symlink: the marker names
			// the directory, not the path.
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(dir, link); err != nil {
				t.Fatal(err)
			}
			b := newTestProvider(t, link, func(o *Options) { o.StopGrace = shortStopGrace })
			var offered []provider.Instance
			began := time.Now()
			adopted, stopped, err := b.Adopt(context.Background(), func(i provider.Instance) bool {
				offered = append(offered, i)
				return keep
			})
			if err != nil {
				t.Fatal(err)
			}
			want := provider.Instance{
				ID: child.ID, Pool: "chat", Zone: Zone, InstanceType: "g5.xlarge", Market: provider.MarketOnDemand,
				State: provider.StateRunning, PrivateIP: "127.0.0.1", PublicIP: "127.0.0.1",
				Address: net.JoinHostPort("127.0.0.1", strconv.Itoa(child.Entry.Port)), LaunchedAt: fc.Now(),
			}
			if len(offered) != 1 || !offered[0].LaunchedAt.Equal(want.LaunchedAt) {
				t.Fatalf("keep was offered %+v, want %+v", offered, want)
			}
			offered[0].LaunchedAt = want.LaunchedAt
			if offered[0] != want {
				t.Fatalf("keep was offered %+v, want %+v", offered[0], want)
			}

			if !keep {
				if len(adopted) != 0 || !slices.Equal(ids(stopped), []string{child.ID}) {
					t.Fatalf("adopted %v stopped %v, want %s stopped", ids(adopted), ids(stopped), child.ID)
				}
				if sameProcess(child.PID, child.StartTime) {
					t.Fatalf("stopped instance %d still runs", child.PID)
				}
				if d := time.Since(began); d < shortStopGrace {
					t.Errorf("stopped after %v: it ignores SIGTERM, so not before the %v grace", d, shortStopGrace)
				}
				if left := markedIn(t, dir); len(left) != 0 {
					t.Fatalf("tagged processes left: %+v", left)
				}
				if entries := readState(t, dir); len(entries) != 0 {
					t.Errorf("state after Adopt = %+v", entries)
				}
				return
			}

			if len(stopped) != 0 || !slices.Equal(ids(adopted), []string{child.ID}) {
				t.Fatalf("adopted %v stopped %v, want %s adopted", ids(adopted), ids(stopped), child.ID)
			}
			if l, _ := b.List(context.Background(), "chat"); len(l) != 1 || l[0].Address != want.Address {
				t.Fatalf("List = %+v", l)
			}
			// The address is right: the child answers there, as itself.
			waitHTTP(t, want.Address)
			body, err := get(want.Address, "/info")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(body, `"pid":`+strconv.Itoa(child.PID)+",") || !strings.Contains(body, `"TIDEGPU_INSTANCE_ID":"`+child.ID+`"`) {
				t.Fatalf("/info at %s = %s, want pid %d and id %s", want.Address, body, child.PID, child.ID)
			}
			// Now it is recorded.
			entries := readState(t, dir)
			if len(entries) != 1 || entries[0].ID != child.ID || entries[0].PID != child.PID || entries[0].StartTime != child.StartTime {
				t.Fatalf("state after Adopt = %+v", entries)
			}
			// Its exit is seen.
			if err := syscall.Kill(child.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if ev := waitEvent(t, b.Events(), provider.EventGone, child.ID); ev.Message != statusAdopted {
				t.Errorf("gone message %q", ev.Message)
			}
			if entries := readState(t, dir); len(entries) != 0 {
				t.Errorf("state after the exit = %+v", entries)
			}
		})
	}
}

// TestAdoptLeftovers: instances whose command is a shell running the real
// server as its child, in its group. Adopt leaves the child of a kept
// instance alone, takes down the group of a dropped one, and stops a
// tagged child whose shell died while no run watched.
func TestAdoptLeftovers(t *testing.T) {
	dir := t.TempDir()
	killMarkedAtEnd(t, dir)
	a := newTestProvider(t, dir, nil)
	spec := &tidev1.TidePoolSpec{Local: &tidev1.LocalSpec{
		Command: []string{"/bin/sh", "-c", `"$0" & wait`, testExe(t)},
		Env:     []string{childEnv + "=1", idleEnv + "=1"},
	}}
	launch := func(pool string) (leader, member markedProc) {
		inst, err := a.Launch(context.Background(), provider.LaunchRequest{Pool: pool, Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the shell's child of "+inst.ID, func() bool {
			for _, m := range markedIn(t, dir) {
				switch {
				case m.ID != inst.ID:
				case m.leader():
					leader = m
				default:
					member = m
				}
			}
			return leader.PID != 0 && member.PID != 0
		})
		if member.PGRP != leader.PID {
			t.Fatalf("member %+v not in the group of %+v", member, leader)
		}
		return leader, member
	}
	kl, km := launch("keep")
	dl, dm := launch("drop")
	ol, om := launch("orphan")
	a.Detach()
	// The orphan's shell dies alone while no run watches: its child stays,
	// tagged, in a group without its leader.
	if err := syscall.Kill(ol.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the orphan's shell to be reaped", func() bool { return reaped(ol.PID, ol.StartTime) })

	b := newTestProvider(t, dir, func(o *Options) { o.StopGrace = shortStopGrace })
	adopted, stopped, err := b.Adopt(context.Background(), func(i provider.Instance) bool { return i.Pool == "keep" })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(adopted), []string{kl.ID}) || !slices.Equal(ids(stopped), []string{dl.ID}) {
		t.Fatalf("adopted %v stopped %v, want [%s] and [%s]", ids(adopted), ids(stopped), kl.ID, dl.ID)
	}
	for _, m := range []markedProc{kl, km} {
		if !sameProcess(m.PID, m.StartTime) {
			t.Errorf("process %d of the kept instance was stopped", m.PID)
		}
	}
	for _, m := range []markedProc{dl, dm, om} {
		if sameProcess(m.PID, m.StartTime) {
			t.Errorf("process %d (%s) still runs", m.PID, m.ID)
		}
	}
	// Terminating the kept instance takes its whole group.
	if err := b.Terminate(context.Background(), kl.ID); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, b.Events(), provider.EventGone, kl.ID)
	waitFor(t, "the kept instance's child to exit", func() bool { return !sameProcess(km.PID, km.StartTime) })
	if left := markedIn(t, dir); len(left) != 0 {
		t.Fatalf("tagged processes left: %+v", left)
	}
}

// TestAdoptScanGuards: tagged processes that are not an earlier run's
// instances of this state dir are never touched: another state dir's, a
// marker that is not exact, and one in this process's own group (guarded
// twice: scanMarked skips it, and claim refuses it; TestScanMarked checks
// the first alone).
func TestAdoptScanGuards(t *testing.T) {
	dir := t.TempDir()
	owner, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := func(stateDir string, ownGroup bool) markedProc {
		t.Helper()
		v := templateVars{Port: 1, Host: "127.0.0.1", InstanceID: "local-0000abcd", Pool: "p"}
		tags := ownerTags{StateDir: stateDir, LaunchedAt: time.Now(), Market: provider.MarketSpot}
		env, err := buildEnv(os.Environ(), []string{childEnv + "=1", idleEnv + "=1"}, v, tags)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(testExe(t))
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ownGroup}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		var m markedProc
		waitFor(t, "the bystander's environment", func() bool {
			found, err := scanMarked(procRoot, stateDir, scanGuard{self: os.Getpid(), pgrp: -1})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range found {
				if f.PID == cmd.Process.Pid {
					m = f
				}
			}
			return m.PID != 0
		})
		return m
	}
	bystanders := []markedProc{
		start(owner, false),                          // in this process's group
		start(filepath.Join(t.TempDir(), "x"), true), // another state dir's
		start(owner+"/", true),                       // not exact
		start(owner+"-2", true),                      // a sibling
	}

	b := newTestProvider(t, dir, func(o *Options) { o.StopGrace = shortStopGrace })
	adopted, stopped, err := b.Adopt(context.Background(), func(i provider.Instance) bool {
		t.Errorf("keep was offered %+v", i)
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(adopted) != 0 || len(stopped) != 0 {
		t.Fatalf("adopted %v stopped %v, want none", ids(adopted), ids(stopped))
	}
	for _, m := range bystanders {
		if !sameProcess(m.PID, m.StartTime) {
			t.Errorf("bystander %d was hurt", m.PID)
		}
	}
}

// TestCrashStress: run A launches and terminates at random and dies at a
// random point, sometimes between a child's Start and its state write;
// run B adopts with keep=false. After each round no process carries the
// marker, and every instance A left running was stopped by B.
func TestCrashStress(t *testing.T) {
	rounds := 100
	if testing.Short() {
		rounds = 20
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	killMarkedAtEnd(t, dir)
	spec := childSpec(t, idleEnv+"=1")
	opts := Options{StateDir: dir, SelfExe: testExe(t), StopGrace: shortStopGrace, Logger: testLogger()}
	crashes := 0
	for round := range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		a, err := New(opts)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		crashAt, launches := -1, 0
		if rng.IntN(2) == 0 {
			crashAt = rng.IntN(3)
		}
		crashed := ""
		a.crashAfterStart = func(id string) bool {
			launches++
			if launches-1 == crashAt {
				crashed = id
				return true
			}
			return false
		}
		running := map[string]bool{} // launched by A and not terminated
		ops := rng.IntN(6)
	run:
		for range ops {
			if len(running) > 0 && rng.IntN(3) == 0 {
				keys := slices.Sorted(func(yield func(string) bool) {
					for k := range running {
						if !yield(k) {
							return
						}
					}
				})
				id := keys[rng.IntN(len(keys))]
				if err := a.Terminate(ctx, id); err != nil {
					t.Fatal(err)
				}
				delete(running, id)
				continue
			}
			inst, err := a.Launch(ctx, provider.LaunchRequest{Pool: "p", Spec: spec})
			switch {
			case errors.Is(err, errSimulatedCrash):
				crashes++
				break run
			case err != nil:
				t.Fatalf("round %d: %v", round, err)
			}
			running[inst.ID] = true
		}
		a.Detach()

		b, err := New(opts)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		adopted, stopped, err := b.Adopt(ctx, func(provider.Instance) bool { return false })
		if err != nil || len(adopted) != 0 {
			t.Fatalf("round %d: Adopt: adopted %v, %v", round, ids(adopted), err)
		}
		if left := markedIn(t, dir); len(left) != 0 {
			t.Fatalf("round %d (seed %d): %d tagged processes left after Adopt: %+v", round, seed, len(left), left)
		}
		if crashed != "" {
			running[crashed] = true
		}
		for id := range running {
			if !slices.Contains(ids(stopped), id) {
				t.Fatalf("round %d (seed %d): %s was left running by A but B did not stop it (stopped %v)", round, seed, id, ids(stopped))
			}
		}
		if err := b.Close(ctx); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
	}
	t.Logf("%d rounds, %d crashes between Start and the state write", rounds, crashes)
}
