package cost

import "fmt"

// Budget alerts: the thresholds of a month's budget a pool's spend has
// crossed, and the forecast overrun, each said once per period.

// AlertLevels are the spent fractions of a budget that raise an alert.
var AlertLevels = []int{50, 80, 100}

// Alert is one budget alert of one period.
type Alert struct {
	// Key identifies the alert: the same key is the same alert, delivered
	// once (pool, period, level or "forecast").
	Key string `json:"key"`
	// Level is the spent percentage crossed (50, 80, 100), or 0 for the
	// forecast overrun.
	Level int `json:"level"`
	// Forecast is true for the forecast overrun: at the current run rate
	// the period's spend will exceed the budget.
	Forecast bool   `json:"forecast,omitempty"`
	Message  string `json:"message"`
}

// Alerts returns the alerts st raises that are not in sent (keys already
// said), highest level first, then the forecast. Pure.
func Alerts(st BudgetStatus, sent map[string]bool) []Alert {
	limit := st.Limit.Float()
	if !(limit > 0) {
		return nil
	}
	period := st.Period.From.UTC().Format("2006-01")
	spent := st.Spent.Float()
	var out []Alert
	for i := len(AlertLevels) - 1; i >= 0; i-- {
		lv := AlertLevels[i]
		if spent < limit*float64(lv)/100 {
			continue
		}
		key := fmt.Sprintf("%s/%s/%d", st.Pool, period, lv)
		if !sent[key] {
			out = append(out, Alert{Key: key, Level: lv, Message: fmt.Sprintf("pool %s crossed %d %% of its %.4g %s budget for %s: spent %.4g %s (%d %%)",
				st.Pool, lv, limit, st.Limit.Currency, period, spent, st.Spent.Currency, int(100*spent/limit))})
		}
		break // only the highest level crossed; the lower ones are implied
	}
	if st.ForecastExceeded && !st.Exceeded {
		key := fmt.Sprintf("%s/%s/forecast", st.Pool, period)
		if !sent[key] {
			out = append(out, Alert{Key: key, Forecast: true, Message: fmt.Sprintf("pool %s will overrun its %.4g %s budget for %s at its current rate: forecast %.4g %s (run rate %.4g %s/h)",
				st.Pool, limit, st.Limit.Currency, period, st.Forecast.Float(), st.Forecast.Currency, st.RunRatePerHour.Float(), st.RunRatePerHour.Currency)})
		}
	}
	return out
}

// TenantAlerts returns the alerts of a tenant's monthly budget that are
// not in sent: the highest of AlertLevels its spend crossed in period
// (limit and spent in nano-units of currency), keyed
// "tenant/TENANT/PERIOD/LEVEL" so each is said once. Pure.
func TenantAlerts(tenant string, period Window, limitNanos, spentNanos int64, currency string, sent map[string]bool) []Alert {
	if limitNanos <= 0 {
		return nil
	}
	p := period.From.UTC().Format("2006-01")
	for i := len(AlertLevels) - 1; i >= 0; i-- {
		lv := AlertLevels[i]
		// spent/limit >= lv/100 (exact for amounts below 2^53 nano-units).
		if float64(spentNanos)*100 < float64(limitNanos)*float64(lv) {
			continue
		}
		key := fmt.Sprintf("tenant/%s/%s/%d", tenant, p, lv)
		if sent[key] {
			return nil
		}
		what := "requests are refused (429 budget_exceeded) until the month rolls over"
		if lv < 100 {
			what = "requests are refused once it reaches 100 %"
		}
		return []Alert{{Key: key, Level: lv, Message: fmt.Sprintf("tenant %s crossed %d %% of its %.4g %s budget for %s: spent %.4g %s (%d %%); %s",
			tenant, lv, float64(limitNanos)/nanosPerUnit, currency, p, float64(spentNanos)/nanosPerUnit, currency,
			int(100*float64(spentNanos)/float64(limitNanos)), what)}}
	}
	return nil
}
