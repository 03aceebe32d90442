package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A pool with minimum 0 sits at zero instances while idle; the first
// requests wake it through the gateway's activator and wait, streaming ones
// with keep-alive chunks, until its first instance is Ready; past the
// activator's queue bound a request gets 429 with Retry-After; after the
// idle window the pool goes back to zero.
func TestScaleToZeroWakesOnTheFirstRequest(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pool.yaml")
	pool := fmt.Sprintf(`apiVersion: tidegpu.eja.dev/v1
kind: TidePool
metadata:
  name: zero
spec:
  minimum: 0
  maximum: 2
  local:
    command: [%q, "sim", "--load-time", "11s"]
  autoscaling:
    metrics:
      - type: Concurrency
        target: "40"
    behavior:
      scaleDown:
        stabilizationWindowSeconds: 0
    scaleToZero:
      idleWindow: 30s
`, binary)
	if err := os.WriteFile(file, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startUp(t, "", "-f", file, "--activator-queue", "50")
	eventually(t, 30*time.Second, "the pool to sit at zero", func() bool {
		p, ok := u.pool("zero")
		return ok && p.Status.Autoscaling != nil && p.Status.Autoscaling.Recommender == "idle" && len(p.Status.Instances) == 0
	})
	p, _ := u.pool("zero")
	t.Logf("at zero: %s", p.Status.Autoscaling.Reason)

	type answer struct {
		stream     bool
		code       int
		done       bool
		keepAlives int
		at         time.Time
		err        error
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 2 * time.Minute}
	start := time.Now()
	answers := make(chan answer, 50)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := answer{stream: i%2 == 0}
			body := fmt.Sprintf(`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"request %d"}],"stream":%t,"options":{"num_predict":8}}`, i, a.stream)
			resp, err := client.Post(u.gateway+"/api/chat", "application/json", strings.NewReader(body))
			if err != nil {
				a.err = err
				answers <- a
				return
			}
			defer resp.Body.Close()
			a.code = resp.StatusCode
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var c struct {
					Message struct{ Content string }
					Done    bool
				}
				if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
					a.err = fmt.Errorf("not a chunk: %q", sc.Text())
					break
				}
				if c.Done {
					a.done, a.at = true, time.Now()
				} else if c.Message.Content == "" && a.at.IsZero() {
					a.keepAlives++
				}
			}
			answers <- a
		}()
	}
	// Every request is held while the instance loads its model: one more
	// is refused.
	eventually(t, 10*time.Second, "the gateway to hold 50 requests", func() bool { return u.held("zero") == 50 })
	resp, err := client.Post(u.gateway+"/api/chat", "application/json", strings.NewReader(`{"model":"qwen2:0.5b","stream":false}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the 51st request: %d (Retry-After %q) %s, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	var readyAt time.Time
	eventually(t, 60*time.Second, "the first instance to be Ready", func() bool {
		if len(u.readyIDs("zero")) > 0 {
			readyAt = time.Now()
			return true
		}
		return false
	})
	wg.Wait()
	close(answers)
	var first time.Time
	keptAlive := 0
	for a := range answers {
		if a.err != nil || a.code != http.StatusOK || !a.done {
			t.Fatalf("a held request: code %d, complete %t, err %v", a.code, a.done, a.err)
		}
		if first.IsZero() || a.at.Before(first) {
			first = a.at
		}
		if a.stream && a.keepAlives > 0 {
			keptAlive++
		}
	}
	coldStart := readyAt.Sub(start)
	t.Logf("all 50 answered: the first instance was Ready %s after the first request, the first answer %s after that; %d of 25 streams got keep-alives",
		coldStart.Round(time.Millisecond), first.Sub(readyAt).Round(time.Millisecond), keptAlive)
	if first.Sub(start) > coldStart+time.Second {
		t.Errorf("first answer %s after the first request, want within the cold start %s + 1s", first.Sub(start), coldStart)
	}
	if keptAlive != 25 {
		t.Errorf("%d of 25 held streams got keep-alive chunks during an 11 s cold start, want all", keptAlive)
	}
	if !u.hasEventMessage("Scaled", "activation") {
		t.Errorf("no Scaled event saying what woke the pool")
	}
	// Idle again: back to zero after the 30 s window, not before.
	idle := time.Now()
	eventually(t, 90*time.Second, "the pool to go back to zero", func() bool {
		p, ok := u.pool("zero")
		return ok && p.Status.Autoscaling != nil && p.Status.Autoscaling.DesiredReplicas == 0 && len(p.Status.Instances) == 0
	})
	if took := time.Since(idle); took < 25*time.Second {
		t.Errorf("back to zero %s after the last answer, before the 30 s idle window", took)
	}
}

// held reads the gateway's activator gauge for pool from the admin API's
// metrics.
func (u *upProc) held(pool string) int {
	resp, err := http.Get(u.admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	prefix := `tidegpu_gateway_activator_held{pool="` + pool + `"} `
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return 0
}

// hasEventMessage reports whether an event of reason mentions text.
func (u *upProc) hasEventMessage(reason, text string) bool {
	for _, e := range u.events() {
		if e.Reason == reason && strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}
