package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/admin"
	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/provider/local"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

var statusNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func sampleSnapshot() statusSnapshot {
	at := func(sec int) time.Time { return statusNow.Add(-time.Duration(sec) * time.Second) }
	return statusSnapshot{
		Pools: []engine.PoolView{{
			Name: "default",
			Spec: tidev1.TidePoolSpec{Provider: "local", Minimum: 2, Maximum: 3},
			Status: tidev1.TidePoolStatus{Desired: 2, Ready: 1, Spot: 2,
				Conditions: []metav1.Condition{{Type: "Ready", Status: "False", Message: "1 of 2 ready"}},
				Instances: []tidev1.InstanceStatus{
					{ID: "lp-a", Phase: "Ready", Address: "127.0.0.1:40001", Zone: "local", Market: "spot", LaunchedAt: metav1.NewTime(at(125))},
					{ID: "lp-b", Phase: "Starting", Zone: "local", Market: "spot", LaunchedAt: metav1.NewTime(at(3))},
				}},
		}},
		Backends: []gateway.BackendStatus{
			{ID: "lp-a", Pool: "default", Address: "127.0.0.1:40001", Weight: 100, Healthy: true, InFlight: 3, Requests: 1200, Failures: 2, EWMALatency: 41500 * time.Microsecond,
				Signals: &gateway.BackendSignals{Source: "scrape", Family: "vllm", Fresh: true, Age: 2.4, ObservedAt: at(0)}},
			{ID: "ol-1", Pool: "default", Address: "127.0.0.1:11434", Weight: 100, Healthy: true,
				Signals: &gateway.BackendSignals{Source: "scrape", Family: "ollama", Loaded: []string{"qwen2:0.5b"}, Age: 1, ObservedAt: at(1)}},
			{ID: "lp-z", Pool: "default", Address: "127.0.0.1:40009", Weight: 100, Draining: true, Healthy: true, InFlight: 1, Requests: 7,
				Signals: &gateway.BackendSignals{Source: "scrape", Error: "scraping lp-z (127.0.0.1:40009): status 404 Not Found"}},
		},
		Events: []events.Event{
			{Seq: 7, Time: at(9), Type: "Warning", Reason: "ReclaimNotice", Pool: "default", Instance: "lp-z", Message: "lp-z will be reclaimed at now:\n draining"},
			{Seq: 8, Time: at(3), Type: "Normal", Reason: "Launched", Pool: "default", Instance: "lp-b", Message: "launched lp-b"},
		},
	}
}

func TestWriteStatus(t *testing.T) {
	empty := statusSnapshot{Backends: []gateway.BackendStatus{}, Events: []events.Event{}}
	cases := []struct {
		name string
		snap statusSnapshot
		want string
	}{
		{"pools, instances, backends and events", sampleSnapshot(), `POOLS
POOL     PROVIDER  READY  SPOT  MIN  MAX  CONDITION
default  local     1/2    2     2    3    Ready=False (1 of 2 ready)

INSTANCES
POOL     INSTANCE  PHASE     ADDRESS          ZONE   MARKET  AGE
default  lp-a      Ready     127.0.0.1:40001  local  spot    2m5s
default  lp-b      Starting  -                local  spot    3s

BACKENDS
POOL     BACKEND  ADDRESS          HEALTH    WEIGHT  IN-FLIGHT  REQUESTS  FAILURES  EWMA    SIGNALS
default  lp-a     127.0.0.1:40001  healthy   100     3          1200      2         41.5ms  scrape/vllm 2s
default  ol-1     127.0.0.1:11434  healthy   100     0          0         0         -       gateway's own; ollama 1 loaded
default  lp-z     127.0.0.1:40009  draining  100     1          7         0         -       MISSING
missing signals (balanced on the gateway's own measurements):
  lp-z: scraping lp-z (127.0.0.1:40009): status 404 Not Found

RECENT EVENTS
AGE     REASON         OBJECT  MESSAGE
9s ago  ReclaimNotice  lp-z    lp-z will be reclaimed at now: draining
3s ago  Launched       lp-b    launched lp-b
`},
		{"nothing yet", empty, `POOLS
  no pools

INSTANCES
  no instances

BACKENDS
  no backends on this gateway

RECENT EVENTS
  no events yet
`},
		{"an admin server without backends or events", statusSnapshot{BackendsErr: fmt.Errorf("x: %w", errNotServed), EventsErr: errors.New("admin API: 500")}, `POOLS
  no pools

INSTANCES
  no instances

RECENT EVENTS
  unavailable: admin API: 500
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			writeStatus(&b, tc.snap, statusNow, false)
			if b.String() != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tc.want)
			}
			if strings.Contains(b.String(), "\033") {
				t.Error("escape sequences without colour")
			}
		})
	}
}

func TestWriteStatusColour(t *testing.T) {
	var plain, col bytes.Buffer
	writeStatus(&plain, sampleSnapshot(), statusNow, false)
	writeStatus(&col, sampleSnapshot(), statusNow, true)
	for _, want := range []string{
		"\033[1mPOOLS\033[0m",                    // section titles bold
		"\033[2mPOOL\033[0m",                     // headers dim
		"\033[33m1/2\033[0m",                     // a pool short of ready: yellow
		"\033[32mReady\033[0m",                   // ready instance: green
		"\033[36mStarting\033[0m",                // starting: cyan
		"\033[33mdraining\033[0m",                // draining backend: yellow
		"\033[33mReclaimNotice\033[0m",           // warning event: yellow
		"\033[33mReady=False (1 of 2 ready)\033", // condition not true: yellow
	} {
		if !strings.Contains(col.String(), want) {
			t.Errorf("coloured output lacks %q:\n%s", want, col.String())
		}
	}
	// Colour changes nothing but the escapes: alignment is the same.
	stripped := escapes.ReplaceAllString(col.String(), "")
	if stripped != plain.String() {
		t.Errorf("coloured output without escapes differs:\n%s\nvs\n%s", stripped, plain.String())
	}
}

func TestWriteTable(t *testing.T) {
	cases := []struct {
		name   string
		header []string
		rows   [][]tableCell
		colour bool
		want   string
	}{
		{"pads by text width, last column unpadded", []string{"A", "BB", "C"},
			[][]tableCell{{cellText("xxx"), cellText("y"), cellText("z")}, {cellText("é"), cellText("ü"), cellText("")}}, false,
			"A    BB  C\nxxx  y   z\né    ü\n"},
		{"escapes do not count toward the width", []string{"A", "B"},
			[][]tableCell{{styled("ok", styleGreen), cellText("1")}}, true,
			"\033[2mA\033[0m   \033[2mB\033[0m\n\033[32mok\033[0m  1\n"},
		{"header only", []string{"ONE", "TWO"}, nil, false, "ONE  TWO\n"},
	}
	for _, tc := range cases {
		var b bytes.Buffer
		writeTable(&b, tc.header, tc.rows, tc.colour)
		if b.String() != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, b.String(), tc.want)
		}
	}
}

func TestStatusHelpers(t *testing.T) {
	durations := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"}, {59 * time.Second, "59s"}, {61 * time.Second, "1m1s"},
		{3*time.Hour + 5*time.Minute, "3h5m"}, {72 * time.Hour, "3d"},
	}
	for _, tc := range durations {
		if got := shortDuration(tc.d); got != tc.want {
			t.Errorf("shortDuration(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
	truncs := []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"}, {"a  b\n c", 10, "a b c"}, {"abcdefghijk", 5, "abcd…"}, {"写一首诗写一首诗", 4, "写一首…"},
	}
	for _, tc := range truncs {
		if got := truncate(tc.s, tc.n); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
	healths := []struct {
		b    gateway.BackendStatus
		want string
	}{
		{gateway.BackendStatus{Healthy: true}, "healthy"},
		{gateway.BackendStatus{Healthy: false}, "unhealthy"},
		{gateway.BackendStatus{Healthy: true, Ejected: true}, "ejected"},
		{gateway.BackendStatus{Healthy: true, Draining: true, Ejected: true}, "draining"},
		{gateway.BackendStatus{Healthy: true, Removed: true, Draining: true}, "removed"},
	}
	for _, tc := range healths {
		if got, _ := backendHealth(tc.b); got != tc.want {
			t.Errorf("backendHealth(%+v) = %q, want %q", tc.b, got, tc.want)
		}
	}
	phases := map[string]cellStyle{"Ready": styleGreen, "Pending": styleCyan, "Starting": styleCyan, "Draining": styleYellow, "Terminating": styleRed, "Odd": stylePlain}
	for p, want := range phases {
		if got := phaseStyle(p); got != want {
			t.Errorf("phaseStyle(%s) = %d, want %d", p, got, want)
		}
	}
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is not a terminal")
	}
}

// fetchStatus against the real admin API: pools, backends and the last
// recentEvents events, and the token.
func TestFetchStatus(t *testing.T) {
	prov, err := local.New(local.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Close(context.Background()) })
	rec := events.NewRecorder(100, nil, nil)
	mgr, err := engine.NewManager(engine.Options{Provider: prov, Registrar: registrar.Nop{}, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	tp := &tidev1.TidePool{Spec: tidev1.TidePoolSpec{Provider: "local", Minimum: 1, Maximum: 1}}
	tp.Name = "p"
	mgr.Apply(tp) // records PoolAdded
	for i := range 7 {
		rec.Eventf(events.TypeNormal, "Test", "p", "", "event %d", i)
	}
	gw, err := gateway.New(gateway.Options{ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	gw.SetBackends("p", []gateway.Backend{{ID: "b1", Pool: "p", Address: "127.0.0.1:1"}})
	srv := httptest.NewServer(admin.NewHandler(admin.Options{Pools: mgr, Events: rec, Backends: gw, Token: "tok"}))
	t.Cleanup(srv.Close)

	if _, err := fetchStatus(context.Background(), srv.URL, ""); err == nil || !strings.Contains(err.Error(), "TIDEGPU_ADMIN_TOKEN") {
		t.Fatalf("without the token: %v, want an error naming TIDEGPU_ADMIN_TOKEN", err)
	}
	s, err := fetchStatus(context.Background(), srv.URL+"/", "tok")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pools) != 1 || s.Pools[0].Name != "p" || len(s.Backends) != 1 || s.Backends[0].ID != "b1" || s.BackendsErr != nil || s.EventsErr != nil {
		t.Fatalf("snapshot = %+v", s)
	}
	if len(s.Events) != recentEvents || s.Events[0].Message != "event 2" || s.Events[recentEvents-1].Message != "event 6" {
		t.Fatalf("events = %+v, want the last %d", s.Events, recentEvents)
	}
	if _, err := fetchStatus(context.Background(), "http://127.0.0.1:1", ""); err == nil || !strings.Contains(err.Error(), "--admin") {
		t.Fatalf("unreachable: %v", err)
	}
}

var escapes = regexp.MustCompile("\033\\[[0-9;]*m")
