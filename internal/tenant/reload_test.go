package tenant

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// secretVolume lays out a directory as the kubelet does for a Secret
// mounted as a volume: the data in a timestamped directory, "..data" a link
// to it, and each key a link through "..data". update swaps in new content
// the kubelet's way (AtomicWriter): a new directory, a new link renamed over
// "..data", the old directory removed.
type secretVolume struct {
	t   *testing.T
	dir string
	n   int
}

func newSecretVolume(t *testing.T, content string) *secretVolume {
	v := &secretVolume{t: t, dir: t.TempDir()}
	v.update(content)
	if err := os.Symlink(filepath.Join("..data", "keys.yaml"), v.file()); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v *secretVolume) file() string { return filepath.Join(v.dir, "keys.yaml") }

func (v *secretVolume) update(content string) {
	v.t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_12_02_04_00_%02d.%d", v.n, 100+v.n)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		v.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v.dir, ts, "keys.yaml"), []byte(content), 0o644); err != nil {
		v.t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			v.t.Fatal(err)
		}
	}
}

// syncBuffer is a log the test reads while the reloader writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func keysYAML(entries ...string) string {
	var b strings.Builder
	b.WriteString("keys:\n")
	for _, e := range entries {
		name, rest, _ := strings.Cut(e, " ")
		// name tenant [limits]
		tenant, limits, _ := strings.Cut(rest, " ")
		fmt.Fprintf(&b, "- name: %s\n  sha256: %s\n  tenant: %s\n", name, Hash("sk-"+name), tenant)
		if limits != "" {
			fmt.Fprintf(&b, "  limits: %s\n", limits)
		}
	}
	return b.String()
}

// eventuallyT polls cond until it holds, for at most 10 s.
func eventuallyT(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond) // the polling interval, not a condition
	}
}

// Keys added to a Secret volume are served after the kubelet's symlink
// swap, removed ones get 401, a bad file is refused with a log naming the
// field and the keys in force stay, and the tenants that stay keep their
// buckets: all through a real gateway and simulator, the reloader on its
// own goroutine driven by the test's ticks.
func TestReloadSecretVolume(t *testing.T) {
	vol := newSecretVolume(t, keysYAML("a1 team-a {requestsPerMinute: 3}", "b1 team-b"))
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clock := newClock()
	r := NewReloader("--keys-file", vol.file(), logger)
	ks, err := r.Load()
	if err != nil {
		t.Fatal(err)
	}
	srv, h, _ := serve(t, simGateway(t), ks, clock)
	status := func(key string) int {
		resp, _ := do(t, srv, "/v1/chat/completions", chat, hdr("Authorization", "Bearer sk-"+key))
		return resp.StatusCode
	}
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx, tick, h.SetKeys) }()
	t.Cleanup(func() { cancel(); <-done })
	reload := func(content string) {
		t.Helper()
		vol.update(content)
		tick <- clock.now() // Run takes it, then reads the file
	}

	for _, c := range []struct {
		key  string
		want int
	}{{"a1", 200}, {"a1", 200}, {"a2", 401}, {"b1", 200}} {
		if got := status(c.key); got != c.want {
			t.Fatalf("before any reload, %s: %d, want %d", c.key, got, c.want)
		}
	}

	// A second key of team-a: accepted after the swap, and it shares the
	// bucket team-a's first key has used 2 of 3 of.
	reload(keysYAML("a1 team-a {requestsPerMinute: 3}", "a2 team-a", "b1 team-b"))
	eventuallyT(t, "the added key a2 is accepted", func() bool { return status("a2") == 200 })
	if got := status("a1"); got != 429 {
		t.Fatalf("team-a's 4th request in the minute (2 before the reload, 1 after): %d, want 429", got)
	}

	// A bad file: refused, logged once naming the field, the keys stay.
	bad := keysYAML("a1 team-a {requestsPerMinute: 3}", "a2 team-a {requestsPerMinute: 5}", "b1 team-b")
	reload(bad)
	eventuallyT(t, "the refusal is logged", func() bool { return strings.Contains(logs.String(), "refused") })
	if l := logs.String(); !strings.Contains(l, "keys[1] (a2).limits: tenant team-a already has the limits {requestsPerMinute: 3}") {
		t.Fatalf("the refusal does not name the field: %s", l)
	}
	tick <- clock.now() // the same bad content again: not logged again
	tick <- clock.now()
	if n := strings.Count(logs.String(), "refused"); n != 1 {
		t.Fatalf("the same bad file logged %d times", n)
	}
	clock.add(20 * time.Second) // one request back in team-a's bucket
	if got, b := status("a2"), status("b1"); got != 200 || b != 200 {
		t.Fatalf("after a refused file, a2 %d and b1 %d: want the keys in force to stay", got, b)
	}
	if got := status("a1"); got != 429 {
		t.Fatalf("team-a's bucket after a refused file: %d, want 429 (it kept its state)", got)
	}

	// b1 removed: 401 at once after the swap.
	reload(keysYAML("a1 team-a {requestsPerMinute: 3}", "a2 team-a"))
	eventuallyT(t, "the removed key b1 gets 401", func() bool { return status("b1") == 401 })
	if got := status("a1"); got != 429 {
		t.Fatalf("team-a after b's removal: %d, want 429 (its bucket kept)", got)
	}
	if got := testutil.ToFloat64(r.reloads.WithLabelValues("applied")); got != 2 {
		t.Errorf("reloads applied = %v, want 2", got)
	}
	if got := testutil.ToFloat64(r.reloads.WithLabelValues("refused")); got != 1 {
		t.Errorf("reloads refused = %v, want 1", got)
	}

	// Neither a key nor a digest in the log.
	l := logs.String()
	for _, k := range []string{"a1", "a2", "b1"} {
		if strings.Contains(l, "sk-"+k) || strings.Contains(l, Hash("sk-"+k)) {
			t.Fatalf("the log shows key %s or its digest: %s", k, l)
		}
	}
}

// Check, step by step on a plain file: what is applied, refused, retried.
func TestReloaderCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	write := func(s string) {
		t.Helper()
		// Written to a temporary name and renamed over, as editors and
		// config tools do.
		if err := os.WriteFile(path+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	good1, good2 := keysYAML("a team-a"), keysYAML("a team-a", "b team-b")
	write(good1)
	var logs syncBuffer
	r := NewReloader("--keys-file", path, slog.New(slog.NewTextHandler(&logs, nil)))
	if _, err := r.Load(); err != nil {
		t.Fatal(err)
	}
	var applied []int
	apply := func(ks *Keys) error { applied = append(applied, ks.Len()); return nil }
	for i, s := range []struct {
		write   string // "": unchanged; "-": removed
		applied bool
		log     string // a new line of the log containing it; "": no new line
	}{
		{"", false, ""},
		{good1, false, ""}, // the same content rewritten: nothing
		{good2, true, "keys file reloaded"},
		{"keys: [{name: a}]", false, "keys[0] (a).sha256: want the 64"},
		{"-", false, "cannot read the keys file"},
		{"", false, ""}, // still gone: not logged again
		{good2, false, "back to the keys in force"},
		{"keys:\n- {name: a, sha256: " + Hash("sk-a") + ", tenant: team-a, owner: x}\n", false, `unknown field \"owner\"`},
		{good1, true, "keys file reloaded"},
	} {
		switch s.write {
		case "":
		case "-":
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		default:
			write(s.write)
		}
		before := logs.String()
		if got := r.Check(apply); got != s.applied {
			t.Fatalf("step %d: Check = %v, want %v", i, got, s.applied)
		}
		added := strings.TrimPrefix(logs.String(), before)
		if (s.log == "") != (added == "") || !strings.Contains(added, s.log) {
			t.Fatalf("step %d: logged %q, want a line with %q", i, added, s.log)
		}
	}
	if fmt.Sprint(applied) != "[2 1]" {
		t.Fatalf("applied key sets of %v keys, want [2 1]", applied)
	}
}

// A rejected apply (the middleware's SetKeys refuses an empty set) is a
// refusal too.
func TestReloaderApplyError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte(keysYAML("a t")), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	r := NewReloader("--keys-file", path, slog.New(slog.NewTextHandler(&logs, nil)))
	if _, err := r.Load(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(keysYAML("a t", "b t")), 0o600); err != nil {
		t.Fatal(err)
	}
	if r.Check(func(*Keys) error { return fmt.Errorf("no thanks") }) || !strings.Contains(logs.String(), "no thanks") {
		t.Fatalf("an apply error was not a refusal: %s", logs.String())
	}
}
