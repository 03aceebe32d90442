package dashboard

import (
	"regexp"
	"slices"
	"strings"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/poolview"
)

// Step kinds of an instance's timeline.
const (
	StepLaunched    = "launched"
	StepAdopted     = "adopted"
	StepReady       = "ready"
	StepReclaimed   = "reclaimed"
	StepDraining    = "draining"
	StepLost        = "lost"
	StepTerminating = "terminating"
	StepGone        = "gone"
)

// PhaseGone is the phase of an instance that is no longer in its pool.
const PhaseGone = "Gone"

// stepOf maps an event reason to a step kind; reasons not listed (pool
// events, failures without an instance) are not steps.
var stepOf = map[string]string{
	"Launched":         StepLaunched,
	"Adopted":          StepAdopted,
	"Ready":            StepReady,
	"ReclaimRequested": StepReclaimed,
	"ReclaimNotice":    StepReclaimed,
	"Draining":         StepDraining,
	"InstanceLost":     StepLost,
	"Terminating":      StepTerminating,
	"Terminated":       StepGone,
}

// Step is one thing that happened to an instance.
type Step struct {
	Kind    string    `json:"kind"`
	At      time.Time `json:"at"`
	Message string    `json:"message,omitempty"`
}

// Track is one instance's life as the timeline shows it.
type Track struct {
	Instance string `json:"instance"`
	Zone     string `json:"zone,omitempty"`
	Market   string `json:"market,omitempty"`
	// Phase is the instance's phase in the pool's status, or Gone.
	Phase string `json:"phase"`
	// Replaces is the instance this one was launched for, and ReplacedBy
	// the one launched for this one, when known.
	Replaces   string `json:"replaces,omitempty"`
	ReplacedBy string `json:"replacedBy,omitempty"`
	// Steps, oldest first.
	Steps []Step `json:"steps"`
}

// PoolTimeline is one pool's size and the tracks of its instances, oldest
// launch first.
type PoolTimeline struct {
	Name     string  `json:"name"`
	Provider string  `json:"provider,omitempty"`
	Desired  int32   `json:"desired"`
	Ready    int32   `json:"ready"`
	Tracks   []Track `json:"tracks"`
}

// Timeline is what GET /api/v1/timeline answers.
type Timeline struct {
	Now time.Time `json:"now"`
	// Since is the start of the window: gone instances whose last step is
	// older are left out.
	Since time.Time      `json:"since"`
	Pools []PoolTimeline `json:"pools"`
}

// Meta is what is known of an instance besides its events: its zone and
// market (remembered after it is gone).
type Meta struct {
	Zone   string
	Market string
}

// MaxTracksPerPool bounds the tracks of one pool (the newest are kept).
const MaxTracksPerPool = 40

// replaceWindow bounds how long after a reclaim or loss a launch with no
// explicit "replacing" note is taken as that instance's replacement.
const replaceWindow = time.Minute

var (
	replacingRe = regexp.MustCompile(`\breplacing (\S+?)[:,]?(\s|$)`)
	marketRe    = regexp.MustCompile(`\((\S+) market\)`)
)

// BuildTimeline folds the event log (oldest first) and the pools' current
// status into per-instance tracks. meta supplies zone and market for
// instances no longer in the status (nil for none). It is pure.
func BuildTimeline(evs []events.Event, pools []poolview.Pool, meta map[string]Meta, now time.Time, window time.Duration) Timeline {
	tl := Timeline{Now: now, Since: now.Add(-window), Pools: []PoolTimeline{}}
	byPool := map[string]map[string]*Track{}
	order := map[string][]string{}
	track := func(pool, id string) *Track {
		m := byPool[pool]
		if m == nil {
			m = map[string]*Track{}
			byPool[pool] = m
		}
		t := m[id]
		if t == nil {
			t = &Track{Instance: id, Steps: []Step{}}
			m[id] = t
			order[pool] = append(order[pool], id)
		}
		return t
	}
	// lastLoss is, per pool, the instances reclaimed or lost and not yet
	// known to be replaced, in order.
	pending := map[string][]string{}
	lossAt := map[string]time.Time{}
	for _, e := range evs {
		kind, ok := stepOf[e.Reason]
		if !ok || e.Instance == "" {
			continue
		}
		t := track(e.Pool, e.Instance)
		// A reclaim is announced twice (request, then the provider's
		// notice): keep the first.
		if kind == StepReclaimed && hasStep(t, StepReclaimed) {
			continue
		}
		t.Steps = append(t.Steps, Step{Kind: kind, At: e.Time, Message: e.Message})
		switch kind {
		case StepLaunched:
			if m := marketRe.FindStringSubmatch(e.Message); m != nil && t.Market == "" {
				t.Market = m[1]
			}
			replaced := ""
			if m := replacingRe.FindStringSubmatch(e.Message); m != nil {
				replaced = m[1]
			} else {
				// The first pending loss of the pool, if recent.
				for len(pending[e.Pool]) > 0 {
					id := pending[e.Pool][0]
					if e.Time.Sub(lossAt[e.Pool+"/"+id]) <= replaceWindow && byPool[e.Pool][id].ReplacedBy == "" {
						replaced = id
						break
					}
					pending[e.Pool] = pending[e.Pool][1:]
				}
			}
			if replaced != "" && replaced != e.Instance {
				t.Replaces = replaced
				old := track(e.Pool, replaced)
				old.ReplacedBy = e.Instance
				pending[e.Pool] = slices.DeleteFunc(pending[e.Pool], func(id string) bool { return id == replaced })
			}
		case StepReclaimed, StepLost:
			if t.ReplacedBy == "" && !slices.Contains(pending[e.Pool], e.Instance) {
				pending[e.Pool] = append(pending[e.Pool], e.Instance)
				lossAt[e.Pool+"/"+e.Instance] = e.Time
			}
		}
	}

	names := map[string]bool{}
	for _, p := range pools {
		names[p.Name] = true
		pt := PoolTimeline{Name: p.Name, Provider: p.Spec.Provider, Desired: p.Status.Desired, Ready: p.Status.Ready}
		if pt.Desired == 0 {
			pt.Desired = p.Spec.DesiredReplicas()
		}
		live := map[string]tidev1.InstanceStatus{}
		for _, in := range p.Status.Instances {
			live[in.ID] = in
			t := track(p.Name, in.ID)
			if len(t.Steps) == 0 && !in.LaunchedAt.IsZero() {
				// Its events have left the log: start it at its launch.
				t.Steps = append(t.Steps, Step{Kind: StepLaunched, At: in.LaunchedAt.Time})
			}
		}
		pt.Tracks = finishTracks(byPool[p.Name], order[p.Name], live, meta, tl.Since)
		tl.Pools = append(tl.Pools, pt)
	}
	// Pools that are gone from the status but still have events in the
	// window (a removed pool) are shown too, after the live ones.
	var rest []string
	for name := range byPool {
		if !names[name] {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	for _, name := range rest {
		tracks := finishTracks(byPool[name], order[name], nil, meta, tl.Since)
		if len(tracks) > 0 {
			tl.Pools = append(tl.Pools, PoolTimeline{Name: name, Tracks: tracks})
		}
	}
	return tl
}

func hasStep(t *Track, kind string) bool {
	for _, s := range t.Steps {
		if s.Kind == kind {
			return true
		}
	}
	return false
}

// finishTracks sets phases, zones and markets, drops gone instances older
// than since, sorts by first step and keeps the newest MaxTracksPerPool.
func finishTracks(m map[string]*Track, order []string, live map[string]tidev1.InstanceStatus, meta map[string]Meta, since time.Time) []Track {
	out := make([]Track, 0, len(order))
	for _, id := range order {
		t := *m[id]
		if in, ok := live[id]; ok {
			t.Phase = in.Phase
			t.Zone = firstNonEmpty(in.Zone, t.Zone)
			t.Market = firstNonEmpty(in.Market, t.Market)
		} else {
			t.Phase = PhaseGone
			if len(t.Steps) == 0 || t.Steps[len(t.Steps)-1].At.Before(since) {
				continue
			}
		}
		if mt, ok := meta[id]; ok {
			t.Zone = firstNonEmpty(t.Zone, mt.Zone)
			t.Market = firstNonEmpty(t.Market, mt.Market)
		}
		out = append(out, t)
	}
	slices.SortStableFunc(out, func(a, b Track) int {
		return firstAt(a).Compare(firstAt(b))
	})
	if len(out) > MaxTracksPerPool {
		out = out[len(out)-MaxTracksPerPool:]
	}
	return out
}

func firstAt(t Track) time.Time {
	if len(t.Steps) == 0 {
		return time.Time{}
	}
	return t.Steps[0].At
}

func firstNonEmpty(a, b string) string {
	if strings.TrimSpace(a) != "" {
		return a
	}
	return b
}
