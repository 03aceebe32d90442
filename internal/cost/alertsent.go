package cost

import (
	"fmt"
	"sort"
	"time"
)

// Delivered alerts. The loops that send budget alerts (costreport) mark
// each alert's key here once it is delivered, and the ledger's snapshot
// keeps the marks, so that a restarted `tidegpu up` or a new operator
// leader, which restores the snapshot, does not say an alert again. A
// process that stops between a delivery and its next save (every 30 s)
// says it once more: at least once, not exactly once.

// alertRetention is how long a mark is kept: an alert's key names its
// month, so after two months it can no longer come up.
const alertRetention = 62 * 24 * time.Hour

// maxAlerts bounds the marks a snapshot may hold.
const maxAlerts = 100_000

type snapAlert struct {
	Key string    `json:"key"`
	At  time.Time `json:"at"`
}

// MarkAlert records that the alert key was delivered at at.
func (l *Ledger) MarkAlert(key string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.alerts[key]; !ok && len(l.alerts) < maxAlerts {
		l.alerts[key] = at.UnixNano()
	}
}

// SentAlerts returns the keys marked delivered.
func (l *Ledger) SentAlerts() map[string]bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make(map[string]bool, len(l.alerts))
	for k := range l.alerts {
		out[k] = true
	}
	return out
}

// compactAlertsLocked forgets the marks older than alertRetention.
func (l *Ledger) compactAlertsLocked(now int64) {
	for k, at := range l.alerts {
		if now-at > int64(alertRetention) {
			delete(l.alerts, k)
		}
	}
}

func (l *Ledger) snapshotAlertsLocked() []snapAlert {
	out := make([]snapAlert, 0, len(l.alerts))
	for k, at := range l.alerts {
		out = append(out, snapAlert{Key: k, At: time.Unix(0, at).UTC()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (l *Ledger) loadAlerts(as []snapAlert) error {
	if len(as) > maxAlerts {
		return fmt.Errorf("%d delivered alerts, at most %d", len(as), maxAlerts)
	}
	for i, a := range as {
		if err := checkName(fmt.Sprintf("alert %d key", i), a.Key, true); err != nil {
			return err
		}
		if !validTime(a.At) {
			return fmt.Errorf("alert %q: time %v out of range", a.Key, a.At)
		}
		l.alerts[a.Key] = a.At.UnixNano()
	}
	return nil
}
