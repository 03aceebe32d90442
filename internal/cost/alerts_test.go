package cost

import (
	"strings"
	"testing"
	"time"
)

func TestAlerts(t *testing.T) {
	period := Window{time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	usd := func(v float64) Money { return moneyFromNanos("USD", int64(v*1e9)) }
	st := func(spent, forecast float64) BudgetStatus {
		return BudgetStatus{Pool: "chat", Period: period, Limit: usd(100), Spent: usd(spent), Forecast: usd(forecast),
			Exceeded: spent >= 100, ForecastExceeded: forecast >= 100, RunRatePerHour: usd(1)}
	}
	tests := []struct {
		name string
		st   BudgetStatus
		sent []string
		want []string // keys
	}{
		{"below every level", st(10, 40), nil, nil},
		{"forecast overrun", st(10, 140), nil, []string{"chat/2026-12/forecast"}},
		{"half spent", st(55, 90), nil, []string{"chat/2026-12/50"}},
		{"a jump says only the highest level", st(85, 120), nil, []string{"chat/2026-12/80", "chat/2026-12/forecast"}},
		{"each once", st(85, 120), []string{"chat/2026-12/80", "chat/2026-12/forecast"}, nil},
		{"exceeded: no forecast beside it", st(100, 150), []string{"chat/2026-12/80"}, []string{"chat/2026-12/100"}},
		{"no budget amount", BudgetStatus{Pool: "chat", Period: period, Spent: usd(5)}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sent := map[string]bool{}
			for _, k := range tc.sent {
				sent[k] = true
			}
			var got []string
			for _, a := range Alerts(tc.st, sent) {
				got = append(got, a.Key)
				if a.Message == "" || !strings.Contains(a.Message, "chat") {
					t.Errorf("alert %s without a message naming the pool: %q", a.Key, a.Message)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("alerts %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTenantAlerts(t *testing.T) {
	march := MonthWindow(t0)
	const usd = int64(1e9)
	for _, c := range []struct {
		name         string
		limit, spent int64
		sent         map[string]bool
		wantKey      string
	}{
		{"below half", 10 * usd, 4*usd + 999_999_999, nil, ""},
		{"half", 10 * usd, 5 * usd, nil, "tenant/a/2026-03/50"},
		{"80 said already", 10 * usd, 9 * usd, map[string]bool{"tenant/a/2026-03/80": true}, ""},
		{"only the highest", 10 * usd, 10 * usd, map[string]bool{}, "tenant/a/2026-03/100"},
		{"over", 10 * usd, 30 * usd, nil, "tenant/a/2026-03/100"},
		{"no budget", 0, 30 * usd, nil, ""},
	} {
		got := TenantAlerts("a", march, c.limit, c.spent, "USD", c.sent)
		key := ""
		if len(got) > 0 {
			key = got[0].Key
		}
		if key != c.wantKey || len(got) > 1 {
			t.Errorf("%s: %+v, want key %q", c.name, got, c.wantKey)
		}
	}
}
