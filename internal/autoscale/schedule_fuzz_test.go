package autoscale

import (
	"testing"
	"time"
)

// FuzzParseCron feeds arbitrary expressions (outside input: they come from
// the CRD or a YAML file) to the parser and evaluates what it accepts at
// arbitrary instants in a zone with DST. It must never panic or hang, and
// an accepted schedule's next firing must lie after the instant.
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{
		"30 8 * * 1-5", "0 18 * * 1-5", "*/5 * * * *", "@daily", "@every 1h", "TZ=", "CRON_TZ=",
		"TZ=Europe/Berlin 0 1 * * *", "0 0 30 2 *", "0 0 29 2 *", "59 23 31 12 *", "0-59/7 1,2,3 ? JAN-DEC MON-FRI",
		"", " ", "* * * * * *", "1-0 * * * *", "0 2 * * 0",
	} {
		f.Add(s, int64(1774745400)) // 2026-03-29 00:50 UTC, around Berlin's DST change
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, expr string, unix int64) {
		c, err := parseCron(expr)
		if err != nil {
			return
		}
		// Instants between 1970 and 2200.
		at := time.Unix(unix%(230*365*86400), 0).UTC()
		if at.Before(time.Unix(0, 0)) {
			at = at.Add(230 * 365 * 24 * time.Hour)
		}
		w := wallClock(at, berlin)
		if n := c.next(w); !n.IsZero() && !n.After(w) {
			t.Fatalf("%q: next(%s) = %s, not after", expr, w, n)
		}
		s := schedule{start: c, end: c, loc: berlin}
		s.active(at)
	})
}
