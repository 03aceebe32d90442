package dashboard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// ev builds an event sec seconds after t0, with the engine's messages.
func ev(sec float64, reason, pool, inst, msg string) events.Event {
	return events.Event{Time: t0.Add(time.Duration(sec * float64(time.Second))), Reason: reason, Pool: pool, Instance: inst, Message: msg}
}

func launched(sec float64, pool, id, market, note string) events.Event {
	return ev(sec, "Launched", pool, id, fmt.Sprintf("launched %s at 127.0.0.1:4000 (%s market)%s: 1 of 2 serving", id, market, note))
}

func pool(name string, desired, ready int32, insts ...tidev1.InstanceStatus) engine.PoolView {
	return engine.PoolView{Name: name,
		Spec:   tidev1.TidePoolSpec{Provider: "local", Minimum: desired, Maximum: desired},
		Status: tidev1.TidePoolStatus{Desired: desired, Ready: ready, Instances: insts}}
}

func inst(id, phase, zone, market string) tidev1.InstanceStatus {
	return tidev1.InstanceStatus{ID: id, Phase: phase, Zone: zone, Market: market}
}

// summary renders a timeline compactly: one line per pool, then one per
// track: id phase zone market replaces>id replacedBy<id: kinds.
func summary(tl Timeline) string {
	var b strings.Builder
	for _, p := range tl.Pools {
		fmt.Fprintf(&b, "pool %s %d/%d\n", p.Name, p.Ready, p.Desired)
		for _, t := range p.Tracks {
			var kinds []string
			for _, s := range t.Steps {
				kinds = append(kinds, s.Kind)
			}
			fmt.Fprintf(&b, "  %s %s %s %s", t.Instance, t.Phase, dashIfEmpty(t.Zone), dashIfEmpty(t.Market))
			if t.Replaces != "" {
				fmt.Fprintf(&b, " replaces>%s", t.Replaces)
			}
			if t.ReplacedBy != "" {
				fmt.Fprintf(&b, " replacedBy<%s", t.ReplacedBy)
			}
			fmt.Fprintf(&b, ": %s\n", strings.Join(kinds, ","))
		}
	}
	return b.String()
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func TestBuildTimeline(t *testing.T) {
	now := t0.Add(2 * time.Minute)
	cases := []struct {
		name  string
		evs   []events.Event
		pools []engine.PoolView
		meta  map[string]Meta
		now   time.Time
		want  string
	}{
		{
			name: "reclaim without notice: the next launch replaces it",
			evs: []events.Event{
				ev(0, "PoolAdded", "p", "", "pool p: want 2"),
				launched(0.1, "p", "a", "spot", ""), launched(0.1, "p", "b", "spot", ""),
				ev(0.3, "Ready", "p", "a", "a ready"), ev(0.3, "Ready", "p", "b", "b ready"),
				ev(10, "ReclaimRequested", "p", "a", "reclaim of a requested with 0s notice"),
				ev(10.01, "Terminated", "p", "a", "a gone: spot reclaim"),
				launched(10.05, "p", "c", "spot", ""),
				ev(10.3, "Ready", "p", "c", "c ready"),
			},
			pools: []engine.PoolView{pool("p", 2, 2, inst("b", "Ready", "local", "spot"), inst("c", "Ready", "local", "spot"))},
			now:   now,
			want: `pool p 2/2
  a Gone - spot replacedBy<c: launched,ready,reclaimed,gone
  b Ready local spot: launched,ready
  c Ready local spot replaces>a: launched,ready
`,
		},
		{
			name: "a lost instance named in the launch message; the notice given twice counts once",
			evs: []events.Event{
				launched(0, "p", "a", "spot", ""), launched(0, "p", "b", "on-demand", ""),
				ev(1, "ReclaimNotice", "p", "b", "b will be reclaimed"),
				ev(1.1, "ReclaimNotice", "p", "b", "b will be reclaimed at ..."),
				ev(1.2, "Draining", "p", "b", "draining b"),
				ev(5, "InstanceLost", "p", "a", "a lost (was ready: true)"),
				launched(5.1, "p", "c", "spot", " replacing a"),
				launched(5.2, "p", "d", "spot", ""),
			},
			pools: []engine.PoolView{pool("p", 2, 0, inst("b", "Draining", "z1", "on-demand"),
				inst("c", "Starting", "z1", "spot"), inst("d", "Starting", "z1", "spot"))},
			now: now,
			want: `pool p 0/2
  a Gone - spot replacedBy<c: launched,lost
  b Draining z1 on-demand replacedBy<d: launched,reclaimed,draining
  c Starting z1 spot replaces>a: launched
  d Starting z1 spot replaces>b: launched
`,
		},
		{
			name: "a launch long after a reclaim is a scale-up, not a replacement",
			evs: []events.Event{
				launched(0, "p", "a", "spot", ""),
				ev(1, "ReclaimRequested", "p", "a", "reclaim"),
				ev(1.1, "Terminated", "p", "a", "gone"),
				launched(90, "p", "b", "spot", ""),
			},
			pools: []engine.PoolView{pool("p", 1, 0, inst("b", "Starting", "", "spot"))},
			now:   now,
			want: `pool p 0/1
  a Gone - spot: launched,reclaimed,gone
  b Starting - spot: launched
`,
		},
		{
			name: "gone instances older than the window are dropped; meta remembers a zone",
			evs: []events.Event{
				launched(0, "p", "old", "spot", ""), ev(1, "Terminated", "p", "old", "gone"),
				launched(1000, "p", "mid", "spot", ""), ev(1001, "Terminated", "p", "mid", "gone"),
			},
			pools: []engine.PoolView{pool("p", 0, 0)},
			meta:  map[string]Meta{"mid": {Zone: "ap-singapore-1", Market: "spot"}},
			now:   t0.Add(1200 * time.Second),
			want: `pool p 0/0
  mid Gone ap-singapore-1 spot: launched,gone
`,
		},
		{
			name:  "a live instance whose events left the log starts at its launch time",
			evs:   nil,
			pools: []engine.PoolView{pool("p", 1, 1, tidev1.InstanceStatus{ID: "x", Phase: "Ready", Zone: "local", Market: "spot", LaunchedAt: metav1.NewTime(t0)})},
			now:   now,
			want: `pool p 1/1
  x Ready local spot: launched
`,
		},
		{
			name: "a removed pool with recent events comes after the live ones; pool events are not steps",
			evs: []events.Event{
				launched(0, "gone-pool", "g1", "spot", ""),
				ev(2, "Terminated", "gone-pool", "g1", "gone"),
				ev(3, "PoolRemoved", "gone-pool", "", "pool removed"),
				ev(4, "LaunchFailed", "live", "", "launch failed"),
			},
			pools: []engine.PoolView{pool("live", 1, 0)},
			now:   now,
			want: `pool live 0/1
pool gone-pool 0/0
  g1 Gone - spot: launched,gone
`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := summary(BuildTimeline(tc.evs, tc.pools, tc.meta, tc.now, 15*time.Minute))
			if got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestBuildTimelineKeepsNewestTracks(t *testing.T) {
	var evs []events.Event
	for i := range MaxTracksPerPool + 5 {
		id := fmt.Sprintf("i%02d", i)
		evs = append(evs, launched(float64(i), "p", id, "spot", ""), ev(float64(i)+0.5, "Terminated", "p", id, "gone"))
	}
	tl := BuildTimeline(evs, []engine.PoolView{pool("p", 0, 0)}, nil, t0.Add(time.Minute), 15*time.Minute)
	tr := tl.Pools[0].Tracks
	if len(tr) != MaxTracksPerPool || tr[0].Instance != "i05" || tr[len(tr)-1].Instance != fmt.Sprintf("i%02d", MaxTracksPerPool+4) {
		t.Fatalf("kept %d tracks from %s to %s, want the newest %d", len(tr), tr[0].Instance, tr[len(tr)-1].Instance, MaxTracksPerPool)
	}
	if !tl.Since.Equal(t0.Add(time.Minute - 15*time.Minute)) {
		t.Errorf("since = %s", tl.Since)
	}
}
