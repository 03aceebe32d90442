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
