package autoscale

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Cron expressions are parsed with github.com/robfig/cron/v3 (standard
// 5-field syntax and the @hourly/@daily/@weekly/@monthly/@yearly
// descriptors), behind a guard for what that parser mishandles: a "TZ=" or
// "CRON_TZ=" prefix without a following space makes it panic, and @every is
// a delay from an arbitrary start, not a time of day. The time zone is a
// field of its own (ScheduleSpec.TimeZone), so both prefixes are refused.
//
// Schedules are evaluated on the zone's wall clock mapped onto UTC (a clock
// without DST): a window boundary that falls into the hour skipped in
// spring takes effect when the clock jumps over it instead of being missed
// until the next day (robfig's Next skips such times), and the repeated
// autumn hour is evaluated by its wall-clock time.

// maxCronLen bounds expressions from outside.
const maxCronLen = 256

// cronParser accepts the standard 5 fields and descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronSchedule is a parsed expression that fires at least once in five years.
type cronSchedule struct {
	expr string
	s    cron.Schedule
}

// next returns the first firing strictly after wall (a wall-clock time in
// UTC), or the zero time if there is none within five years.
func (c cronSchedule) next(wall time.Time) time.Time { return c.s.Next(wall) }

// parseCron parses one expression from outside. It never panics.
func parseCron(expr string) (cs cronSchedule, err error) {
	e := strings.TrimSpace(expr)
	switch {
	case e == "":
		return cs, fmt.Errorf("empty cron expression: use 5 fields (minute hour day-of-month month day-of-week), e.g. \"30 8 * * 1-5\"")
	case len(e) > maxCronLen:
		return cs, fmt.Errorf("cron expression longer than %d characters", maxCronLen)
	case strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ="):
		return cs, fmt.Errorf("cron expression %q carries a time zone: put the zone in timeZone instead", expr)
	case strings.HasPrefix(e, "@every"):
		return cs, fmt.Errorf("cron expression %q: @every is not a time of day; use 5 fields or @hourly/@daily/@weekly/@monthly/@yearly", expr)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("invalid cron expression %q", expr)
		}
	}()
	s, perr := cronParser.Parse(e)
	if perr != nil {
		return cs, fmt.Errorf("invalid cron expression %q: %v", expr, perr)
	}
	// An expression such as "0 0 30 2 *" parses but never fires.
	probe := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	if s.Next(probe).IsZero() {
		return cs, fmt.Errorf("cron expression %q never fires", expr)
	}
	return cronSchedule{expr: e, s: s}, nil
}

// wallClock maps t to the same wall-clock reading in UTC.
func wallClock(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// fromWallClock maps a wall-clock reading (in UTC) back to an instant in
// loc; readings inside a skipped hour are normalised forward by time.Date.
func fromWallClock(w time.Time, loc *time.Location) time.Time {
	return time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
}

// active reports whether the schedule's window is open at now, and when
// that next changes: open while the next End comes before the next Start.
func (s schedule) active(now time.Time) (bool, time.Time) {
	w := wallClock(now, s.loc)
	ns, ne := s.start.next(w), s.end.next(w)
	var on bool
	switch {
	case ne.IsZero():
		on = false
	case ns.IsZero():
		on = true
	default:
		on = ne.Before(ns)
	}
	change := ns
	if on {
		change = ne
	}
	if change.IsZero() {
		return on, time.Time{}
	}
	return on, fromWallClock(change, s.loc)
}
