package cost

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/market"
)

// usd36 is 3.60 USD an hour: a tenth of a cent a second.
var usd36 = market.Price{PerHour: 3.6, Currency: "USD", Source: market.PriceOverride, Market: market.OnDemand}

func groupOf(t *testing.T, gs []GroupCost, name string) GroupCost {
	t.Helper()
	for _, g := range gs {
		if g.Group == name {
			return g
		}
	}
	t.Fatalf("no group %q in %+v", name, gs)
	return GroupCost{}
}

func TestTenantCosts(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	teamA := map[string]string{"team": "a", "env": "prod"}
	teamB := map[string]string{"team": "b"}
	cases := []struct {
		name string
		feed func(l *Ledger)
		// want: group -> cost in USD (by tenant), tokens
		want   map[string]float64
		tokens map[string]float64
		byTeam map[string]float64
	}{
		{
			name: "one tenant alone pays all busy time",
			feed: func(l *Ledger) {
				l.AddBusy("i1", at(0), at(100))
				l.AddUse("i1", Use{Tenant: "a", Labels: teamA, Prompt: 10, Completion: 90, Start: at(0), End: at(100)})
			},
			want:   map[string]float64{"a": 0.1, IdleGroup: 3.6 - 0.1},
			tokens: map[string]float64{"a": 100},
			byTeam: map[string]float64{"a": 0.1},
		},
		{
			name: "two tenants sharing busy time split it by request time",
			feed: func(l *Ledger) {
				l.AddBusy("i1", at(0), at(100))
				// a is in flight 0-100 s, b 50-100 s: a has 2/3 of the request time.
				l.AddUse("i1", Use{Tenant: "a", Labels: teamA, Prompt: 1, Completion: 1, Start: at(0), End: at(100)})
				l.AddUse("i1", Use{Tenant: "b", Labels: teamB, Prompt: 1000, Completion: 1000, Start: at(50), End: at(100)})
			},
			want:   map[string]float64{"a": 0.1 * 2 / 3, "b": 0.1 / 3, IdleGroup: 3.5},
			tokens: map[string]float64{"a": 2, "b": 2000},
			byTeam: map[string]float64{"a": 0.1 * 2 / 3, "b": 0.1 / 3},
		},
		{
			name: "busy time without a recorded request is unattributed; no key is its own tenant",
			feed: func(l *Ledger) {
				l.AddBusy("i1", at(0), at(100))
				l.AddBusy("i1", at(4000), at(4100)) // the next hour: no use recorded there
				l.AddUse("i1", Use{Prompt: 5, Completion: 5, Start: at(10), End: at(20)})
			},
			want:   map[string]float64{NoTenant: 0.1, UnattributedGroup: 0.1, IdleGroup: 7.2 - 0.2},
			tokens: map[string]float64{NoTenant: 10},
			byTeam: map[string]float64{NoLabel: 0.1},
		},
		{
			name: "uses without request time are weighed by tokens",
			feed: func(l *Ledger) {
				l.AddBusy("i1", at(0), at(100))
				l.AddUse("i1", Use{Tenant: "a", Prompt: 30, Completion: 0, End: at(100)})
				l.AddUse("i1", Use{Tenant: "b", Prompt: 0, Completion: 10, End: at(100)})
			},
			want:   map[string]float64{"a": 0.075, "b": 0.025, IdleGroup: 3.5},
			tokens: map[string]float64{"a": 30, "b": 10},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			l := NewLedger(Options{Clock: clk})
			info := p3("i1")
			if err := l.Start(info, t0, usd36, usd36); err != nil {
				t.Fatal(err)
			}
			c.feed(l)
			end := t0.Add(time.Hour)
			if len(c.want) > 3 || c.want[UnattributedGroup] > 0 {
				end = t0.Add(2 * time.Hour)
			}
			check := func(t *testing.T, l *Ledger) {
				t.Helper()
				rows := l.TenantCosts(Window{t0, end}, end)
				var sum float64
				for _, r := range rows {
					sum += r.Cost.Float()
				}
				spend := onlyReport(t, l.ReportAt("", Window{t0, end}, end)).EffectiveCost.Float()
				relClose(t, "sum of tenant rows vs spend", sum, spend, 1e-9)
				gs := GroupTenantCosts(rows, "tenant")
				for g, want := range c.want {
					relClose(t, "cost of "+g, groupOf(t, gs, g).Cost.Float(), want, 1e-9)
				}
				for g, want := range c.tokens {
					x := groupOf(t, gs, g)
					relClose(t, "tokens of "+g, x.PromptTokens+x.CompletionTokens, want, 1e-12)
					relClose(t, "$/Mtok of "+g, x.PerMillion, c.want[g]*1e6/want, 1e-9)
				}
				if c.byTeam != nil {
					gt := GroupTenantCosts(rows, "label:team")
					for g, want := range c.byTeam {
						relClose(t, "team "+g, groupOf(t, gt, g).Cost.Float(), want, 1e-9)
					}
				}
			}
			if err := l.End("i1", end); err != nil {
				t.Fatal(err)
			}
			check(t, l)
			// A snapshot round-trips the tenants' use.
			clk.SetTime(end)
			b, err := l.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			r := NewLedger(Options{Clock: clk})
			if err := r.Restore(b); err != nil {
				t.Fatal(err)
			}
			check(t, r)
			b2, _ := r.Snapshot()
			if string(b) != string(b2) {
				t.Errorf("snapshot after restore differs:\n%s\n%s", b, b2)
			}
			// Compaction folds the tenants into hourly aggregates: the
			// same figures, and they survive a snapshot.
			clk.SetTime(end.Add(25 * time.Hour))
			r.Compact()
			if len(r.Lifetimes("")) != 0 {
				t.Fatal("not compacted")
			}
			check(t, r)
			b3, _ := r.Snapshot()
			r2 := NewLedger(Options{Clock: clk})
			if err := r2.Restore(b3); err != nil {
				t.Fatal(err)
			}
			check(t, r2)
		})
	}
}

func TestParseGroupBy(t *testing.T) {
	for _, c := range []struct {
		in, want string
		bad      bool
	}{{"tenant", "tenant", false}, {"label:team", "label:team", false}, {"label:env", "label:env", false},
		{"", "pool", false}, {"label:owner", "", true}, {"tenants", "", true}} {
		got, err := ParseGroupBy(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseGroupBy(%q) = %q, %v", c.in, got, err)
		}
	}
}

func TestAddUseAfterRestoreIgnoredBeforeSnapshot(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	l := NewLedger(Options{Clock: clk})
	_ = l.Start(p3("i1"), t0, usd36, usd36)
	l.AddUse("i1", Use{Tenant: "a", Prompt: 1, End: t0.Add(time.Second)})
	clk.SetTime(t0.Add(time.Minute))
	b, _ := l.Snapshot()
	r := NewLedger(Options{Clock: clk})
	if err := r.Restore(b); err != nil {
		t.Fatal(err)
	}
	r.AddUse("i1", Use{Tenant: "a", Prompt: 1, End: t0.Add(time.Second)}) // replayed: already in
	r.AddUse("i1", Use{Tenant: "a", Prompt: 1, End: t0.Add(2 * time.Minute)})
	g := groupOf(t, GroupTenantCosts(r.TenantCosts(Window{t0, t0.Add(time.Hour)}, t0.Add(time.Hour)), "tenant"), "a")
	if g.PromptTokens != 2 {
		t.Errorf("prompt tokens %v, want 2", g.PromptTokens)
	}
}
