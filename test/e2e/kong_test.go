package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/kong/kongtest"
)

// kongTargets returns the addresses in the fake Kong's seed upstream.
func kongTargets(k *kongtest.Server) []string {
	var out []string
	for _, t := range k.Targets("llama2-YiFlow-upstream") {
		out = append(out, t.Target)
	}
	sort.Strings(out)
	return out
}

// readyAddrs returns the addresses of the pool's Ready instances.
func (u *upProc) readyAddrs(pool string) []string {
	p, ok := u.pool(pool)
	if !ok {
		return nil
	}
	var out []string
	for _, in := range p.Status.Instances {
		if in.Phase == "Ready" {
			out = append(out, in.Address)
		}
	}
	sort.Strings(out)
	return out
}

// `tidegpu up` with a Kong in front: the seed's upstream, service and route
// exist, and Kong's targets equal the Ready instances within 1 s of every
// change (kill -9, reclaim with notice), with the admin token sent.
func TestKongFollowsThePool(t *testing.T) {
	k := kongtest.New(t)
	k.SetToken("s3cret")
	dir := t.TempDir()
	file := filepath.Join(dir, "pool.yaml")
	tokenFile := filepath.Join(dir, "token")
	pool := "apiVersion: tidegpu.eja.dev/v1\nkind: TidePool\nmetadata:\n  name: chat\nspec:\n  minimum: 2\n  maximum: 2\n  kong:\n    adminURL: " + k.URL + "\n"
	if err := os.WriteFile(file, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u := startUp(t, "", "-f", file, "--kong-token-file", tokenFile)
	u.waitReady("chat", 2, 30*time.Second)
	equal := func() bool {
		want := u.readyAddrs("chat")
		return len(want) == 2 && slices.Equal(kongTargets(k), want)
	}
	eventually(t, 2*time.Second, "Kong's targets to equal the Ready instances", equal)
	if svc := k.Service("ai-YiFlow-proxy"); svc == nil || svc["path"] != "/api/chat" || svc["host"] != "llama2-YiFlow-upstream" {
		t.Errorf("service not as the seed's: %v", svc)
	}
	if r := k.Route("ollama-chat"); r == nil {
		t.Errorf("route ollama-chat missing")
	}

	// kill -9 of an instance.
	victim := u.readyIDs("chat")[0]
	victimAddr := ""
	p, _ := u.pool("chat")
	for _, in := range p.Status.Instances {
		if in.ID == victim {
			victimAddr = in.Address
		}
	}
	if err := syscall.Kill(u.statePIDs()[victim], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	gone := eventually(t, time.Second, "the dead instance's target to leave Kong", func() bool {
		return !slices.Contains(kongTargets(k), victimAddr)
	})
	healed := eventually(t, 5*time.Second, "Kong's targets to equal the new Ready set", func() bool {
		ids := u.readyIDs("chat")
		return len(ids) == 2 && !slices.Contains(ids, victim) && equal()
	})
	t.Logf("kill -9: dead target removed from Kong after %s, Kong equal to the 2 Ready instances after %s more", gone, healed)

	// Reclaim with notice: the draining target leaves Kong at once.
	victim = u.readyIDs("chat")[0]
	p, _ = u.pool("chat")
	for _, in := range p.Status.Instances {
		if in.ID == victim {
			victimAddr = in.Address
		}
	}
	if code, body := postJSON(t, u.admin+"/api/v1/pools/chat/instances/"+victim+"/reclaim", `{"noticeSeconds": 10}`); code != 202 {
		t.Fatalf("reclaim: %d %s", code, body)
	}
	drained := eventually(t, time.Second, "the reclaimed instance's target to leave Kong", func() bool {
		return !slices.Contains(kongTargets(k), victimAddr)
	})
	eventually(t, 5*time.Second, "Kong's targets to equal the Ready set after the reclaim", equal)
	t.Logf("reclaim with notice: target removed from Kong after %s", drained)
}
