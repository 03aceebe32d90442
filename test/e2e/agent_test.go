package e2e

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/agent/metadatatest"
	"github.com/tidegpu/tidegpu/test/testbin"
)

// startAgent runs `tidegpu agent` with args until the test ends; it must
// exit cleanly on SIGTERM.
func startAgent(t *testing.T, args ...string) *testbin.SyncBuffer {
	t.Helper()
	p := testbin.Start(t, binary, append([]string{"agent"}, args...)...)
	t.Cleanup(func() {
		p.Stop(syscall.SIGTERM)
		if p.ExitErr != nil {
			t.Errorf("tidegpu agent exited with %v after SIGTERM", p.ExitErr)
		}
	})
	return p.Out
}

// A spot interruption notice that the agent on an instance reads from the
// (fake) AWS instance metadata service, under load: the controller hears of
// it through the agent, the replacement is Ready and the instance drained
// and gone before the interruption time, and no request fails.
func TestAgentNoticeUnderLoad(t *testing.T) {
	u := startUp(t, "")
	u.waitReady("default", 2, 30*time.Second)
	before := u.readyIDs("default")
	victim := before[0]
	pid := u.statePIDs()[victim]
	if pid == 0 {
		t.Fatalf("no pid for %s in the state file", victim)
	}

	imds := metadatatest.NewAWS(t, victim)
	agentOut := startAgent(t, "--cloud", "aws", "--metadata-endpoint", imds.URL, "--controller", u.admin,
		"--pool", "default", "--instance-id", victim, "--interval", "200ms")
	eventually(t, 10*time.Second, "the agent to poll the metadata service", func() bool {
		return imds.CallCount(metadatatest.InstanceActionPath) >= 2
	})

	l := startLoad(u.gateway, 16)
	eventually(t, 10*time.Second, "load to flow", func() bool { return l.ok.Load() > 50 && l.backendCount(victim) > 5 })
	if u.hasEvent("ReclaimNotice", victim) {
		t.Fatalf("a ReclaimNotice for %s before any notice", victim)
	}

	// IMDS gives whole seconds: at least 10 s ahead.
	interruptAt := time.Now().Add(11 * time.Second).Truncate(time.Second)
	imds.Schedule("terminate", interruptAt)
	scheduled := time.Now()

	heard := eventually(t, 5*time.Second, "a ReclaimNotice event from the agent", func() bool {
		for _, e := range u.events() {
			if e.Reason == "ReclaimNotice" && e.Instance == victim && strings.Contains(e.Message, "aws-imds") {
				return true
			}
		}
		return false
	})
	ready := eventually(t, time.Until(interruptAt), "a replacement Ready beside the survivor before the interruption time", func() bool {
		ids := u.readyIDs("default")
		return len(ids) == 2 && !slices.Contains(ids, victim)
	})
	gone := eventually(t, time.Until(interruptAt), "the instance drained and its process gone by the interruption time", func() bool {
		return !alive(pid)
	})

	// Keep the load a little longer on the new set.
	n := l.ok.Load()
	eventually(t, 10*time.Second, "more traffic after the reclaim", func() bool { return l.ok.Load() > n+50 })
	l.finish()
	l.report(t)
	t.Logf("notice for %s due %s ahead: controller heard it after %s, replacement Ready after %s, instance gone after %s",
		victim, interruptAt.Sub(scheduled).Round(time.Millisecond), heard, heard+ready, heard+ready+gone)
	if f, b := l.failedBefore.Load(), l.brokenStreams.Load(); f != 0 || b != 0 {
		t.Errorf("%d failed requests and %d cut streams; want none with a notice", f, b)
	}
	if !strings.Contains(agentOut.String(), "notice acknowledged") {
		t.Errorf("the agent did not log the controller's acknowledgement:\n%s", agentOut.String())
	}
	if u.hasEvent("InstanceLost", victim) {
		t.Errorf("%s counted as lost: the notice did not reach the engine in time", victim)
	}
}
