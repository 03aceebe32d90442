package prefixbench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	w := Workload{Tenants: 5, SystemTokens: 50, Turns: 3, UserTokens: 4, AssistantTokens: 6, Think: time.Second, Skew: 1}
	a := w.Schedule(20, 30*time.Second, 7)
	b := w.Schedule(20, 30*time.Second, 7)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("%d and %d turns: the same seed must give the same schedule", len(a), len(b))
	}
	perTenant := make([]int, w.Tenants)
	for i := range a {
		if a[i].At != b[i].At || a[i].Conv.ID != b[i].Conv.ID || a[i].Index != b[i].Index {
			t.Fatalf("turn %d differs between runs of one seed", i)
		}
		if i > 0 && a[i].At < a[i-1].At {
			t.Fatal("turns out of time order")
		}
		p := a[i].Prompt()
		if len(p) != 2+2*a[i].Index || p[0].Role != "system" || p[len(p)-1].Role != "user" {
			t.Fatalf("turn %d: prompt of %d messages", a[i].Index, len(p))
		}
		if got := strings.Count(p[0].Content, " "); got < w.SystemTokens {
			t.Fatalf("system prompt of %d words, want %d", got, w.SystemTokens)
		}
		if a[i].Index == 0 {
			perTenant[a[i].Conv.Tenant]++
		}
	}
	// About 20 conversations/s over 30 s, three turns each (a few cut off
	// at the end), and the first tenant the most popular.
	if n := len(a); n < 1500 || n > 2100 {
		t.Errorf("%d turns, want about 1800", n)
	}
	if perTenant[0] <= perTenant[w.Tenants-1] {
		t.Errorf("conversations per tenant %v: want the first the most", perTenant)
	}
	// Every conversation of a tenant shares its system prompt, and another
	// tenant's differs.
	sys := map[int]string{}
	for _, tu := range a {
		s := tu.Prompt()[0].Content
		if prev, ok := sys[tu.Conv.Tenant]; ok && prev != s {
			t.Fatal("two system prompts for one tenant")
		}
		sys[tu.Conv.Tenant] = s
	}
	if sys[0] == sys[1] {
		t.Error("two tenants share a system prompt")
	}
}

func TestCapacity(t *testing.T) {
	b := Backend{TTFT: 20 * time.Millisecond, PrefillRate: 8000, TokenTime: 10 * time.Millisecond, BatchSlowdown: 0.05, MaxBatch: 8, OutputTokens: 32}
	// 20 ms + 150/8000 s + 31 x 10 ms x 1.35 = 20 + 18.75 + 418.5 ms.
	want := 20*time.Millisecond + 18750*time.Microsecond + 418500*time.Microsecond
	if got := b.SlotTime(150); got != want {
		t.Errorf("SlotTime(150) = %v, want %v", got, want)
	}
	if got := Capacity(b, 4, 150); math.Abs(got-32/want.Seconds()) > 1e-9 {
		t.Errorf("Capacity = %v", got)
	}
	w := Workload{Turns: 4, UserTokens: 60, AssistantTokens: 120}
	if got := w.NewTokens(); got != 60+90 {
		t.Errorf("NewTokens = %v, want 150", got)
	}
}

func TestHAProxyConfig(t *testing.T) {
	cfg := HAProxyConfig("127.0.0.1:1", []string{"127.0.0.1:2", "127.0.0.1:3"}, "hdr(X-Session-Id)", "consistent", 125)
	for _, want := range []string{"bind 127.0.0.1:1", "balance hdr(X-Session-Id)", "hash-type consistent", "hash-balance-factor 125",
		"server s0 127.0.0.1:2", "server s1 127.0.0.1:3", "option http-no-delay"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if cfg := HAProxyConfig("a", nil, "leastconn", "", 0); strings.Contains(cfg, "hash-") {
		t.Errorf("leastconn config with hash settings:\n%s", cfg)
	}
}

func TestGoalRowAndShortSchedule(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{rowDefault, true},
		{rowP2C, true},
		{rowSession, true},
		{rowRR, false},
		{rowLeast, false},
		{rowTenant, false},
	}
	for _, tt := range tests {
		if got := goalRow(tt.name); got != tt.want {
			t.Errorf("goalRow(%q) = %t, want %t", tt.name, got, tt.want)
		}
	}
	// The smoke rows' schedule is the full one's turns before its end.
	w := workload()
	full := w.Schedule(3, 18*time.Second, seed)
	short := w.Schedule(3, 13*time.Second, seed)
	var before []Turn
	for _, tu := range full {
		if tu.At < 13*time.Second {
			before = append(before, tu)
		}
	}
	if len(short) == 0 || len(short) != len(before) || len(short) == len(full) {
		t.Fatalf("short schedule %d turns, full %d, full before the short end %d", len(short), len(full), len(before))
	}
	for i, tu := range short {
		b := before[i]
		if tu.At != b.At || tu.Conv.ID != b.Conv.ID || tu.Index != b.Index || tu.Conv.Tenant != b.Conv.Tenant {
			t.Fatalf("turn %d: short %v %d/%d, full %v %d/%d", i, tu.At, tu.Conv.ID, tu.Index, b.At, b.Conv.ID, b.Index)
		}
	}
}
