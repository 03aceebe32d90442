package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/notify"
)

// Budget alerts reach people: a pool whose spend crosses its monthly
// budget in seconds posts its alerts to a Slack-shaped receiver and to a
// generic JSON one whose HMAC signature verifies; each alert arrives once.
func TestBudgetAlertsReachWebhooks(t *testing.T) {
	type got struct {
		header http.Header
		body   []byte
	}
	var mu sync.Mutex
	bodies := map[string][]got{}
	receiver := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies[name] = append(bodies[name], got{r.Header.Clone(), b})
			mu.Unlock()
		}))
		t.Cleanup(s.Close)
		return s
	}
	slack, hook := receiver("slack"), receiver("json")
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte("e2e-shared-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "pool.yaml")
	// 2 instances at 3.6 $/h spend 0.002 $/s: 50 % of the 0.01 budget in
	// about 2.5 s, all of it in about 5 s.
	pool := "apiVersion: tidegpu.eja.dev/v1\nkind: TidePool\nmetadata:\n  name: alerted\nspec:\n  minimum: 2\n  maximum: 2\n  pricing:\n    spotPerHour: \"3.6\"\n  budget:\n    monthly: \"0.01\"\n"
	if err := os.WriteFile(file, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startUp(t, "", "-f", file, "--alert-slack-webhook", slack.URL+"/services/T1/B1/SLACKTOKEN",
		"--alert-webhook", hook.URL+"/hook", "--alert-webhook-secret-file", secretFile)
	eventually(t, 60*time.Second, "the 100 % alert at both receivers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		has := func(name string) bool {
			for _, g := range bodies[name] {
				if strings.Contains(string(g.body), "100 %") {
					return true
				}
			}
			return false
		}
		return has("slack") && has("json")
	})
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	for _, g := range bodies["json"] {
		if want := notify.Sign([]byte("e2e-shared-secret"), g.header.Get(notify.HeaderTimestamp), g.body); g.header.Get(notify.HeaderSignature) != want {
			t.Errorf("signature %q does not verify (want %q)", g.header.Get(notify.HeaderSignature), want)
		}
		var b notify.Body
		if err := json.Unmarshal(g.body, &b); err != nil || b.Pool != "alerted" {
			t.Errorf("json alert %s: %v", g.body, err)
		}
		id := g.header.Get(notify.HeaderDelivery)
		if seen[id] {
			t.Errorf("alert %s delivered twice", id)
		}
		seen[id] = true
	}
	for _, g := range bodies["slack"] {
		var s struct{ Text string }
		if json.Unmarshal(g.body, &s) != nil || !strings.Contains(s.Text, "pool alerted") {
			t.Errorf("slack alert %s", g.body)
		}
	}
	t.Logf("%d alerts to each receiver: %s", len(bodies["slack"]), func() string {
		var b strings.Builder
		for _, g := range bodies["slack"] {
			b.WriteString("\n  ")
			b.Write(g.body)
		}
		return b.String()
	}())
	if strings.Contains(u.Out.String(), "SLACKTOKEN") || strings.Contains(u.Out.String(), "e2e-shared-secret") {
		t.Errorf("a webhook secret reached the output")
	}
}
