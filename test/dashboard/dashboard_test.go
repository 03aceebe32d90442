// Package dashboard runs `tidegpu up` as a real process and drives its web
// dashboard in headless Chromium over the DevTools protocol, as a user
// would: give the admin token, see the pool and its instances, reclaim one
// with the page's button, and see the replacement appear. It saves
// screenshots (into docs/img with TIDEGPU_UPDATE_SCREENSHOTS=1). It also opens
// a page of another origin that calls `tidegpu gateway` with fetch, to see
// the gateway answer the CORS preflight.
package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	_ "image/png" // decodes the screenshots
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tidegpu/tidegpu/internal/engine"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/test/testbin"
)

var (
	binary   string
	chromium string
)

// chromiumPaths are where Debian's `chromium` package and others put it.
var chromiumPaths = []string{"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("dashboard e2e: skipped in -short mode")
		os.Exit(0)
	}
	for _, p := range chromiumPaths {
		if _, err := os.Stat(p); err == nil {
			chromium = p
			break
		}
	}
	cleanup := func() {}
	if chromium != "" {
		// testbin.BinaryEnv runs a binary built elsewhere.
		var err error
		if binary, cleanup, err = testbin.Build(); err != nil {
			fmt.Fprintln(os.Stderr, "dashboard e2e:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// up is one running `tidegpu up`.
type up struct {
	t            *testing.T
	cmd          *exec.Cmd
	out          *testbin.SyncBuffer
	admin, gw    string
	token        string
	exited       chan struct{}
	client       *http.Client
	shutdownOnce sync.Once
}

func freeAddr(t *testing.T) string { return testbin.FreeAddr(t) }

// startUp runs `tidegpu up` with the default pool (2 simulators) on fresh
// ports, requiring token on its admin API; it is stopped at the end.
func startUp(t *testing.T, token string) *up {
	t.Helper()
	for try := 1; ; try++ {
		u := startUpOn(t, token, freeAddr(t), freeAddr(t))
		if try >= 3 || !u.lostAddr() {
			return u
		}
	}
}

// lostAddr reports whether u exited because a port freeAddr saw free was
// taken before it listened (testbin.AddrLost, waiting on the admin API).
func (u *up) lostAddr() bool {
	running := func() bool {
		select {
		case <-u.exited:
			return false
		default:
			return true
		}
	}
	return testbin.AddrLost(running, u.out.String, strings.TrimPrefix(u.admin, "http://"), 30*time.Second)
}

// startUpOn is startUp on the addresses gw and adm.
func startUpOn(t *testing.T, token, gw, adm string) *up {
	t.Helper()
	cmd := exec.Command(binary, "up", "--gateway-addr", gw, "--admin-addr", adm, "--state-dir", t.TempDir(), "--log-level", "warn")
	cmd.Env = append(os.Environ(), "TIDEGPU_ADMIN_TOKEN="+token)
	out := &testbin.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	u := &up{t: t, cmd: cmd, out: out, admin: "http://" + adm, gw: "http://" + gw, token: token,
		exited: make(chan struct{}), client: &http.Client{Timeout: 5 * time.Second}}
	go func() {
		_ = cmd.Wait()
		close(u.exited)
	}()
	t.Cleanup(func() {
		u.stop()
		if t.Failed() {
			t.Logf("tidegpu up output:\n%s", out.String())
		}
	})
	return u
}

func (u *up) stop() {
	u.shutdownOnce.Do(func() {
		_ = u.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-u.exited:
		case <-time.After(30 * time.Second):
			_ = u.cmd.Process.Kill()
			<-u.exited
			u.t.Errorf("tidegpu up did not exit within 30s of SIGTERM")
		}
	})
}

// get reads path from the admin API (with the token when auth is true).
func (u *up) get(path string, auth bool, v any) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, u.admin+path, nil)
	if auth {
		req.Header.Set("Authorization", "Bearer "+u.token)
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == http.StatusOK {
		return resp.StatusCode, json.Unmarshal(b, v)
	}
	return resp.StatusCode, nil
}

// phases returns instance id → phase of the pool, per the admin API.
func (u *up) phases(pool string) map[string]string {
	var ps []engine.PoolView
	if code, err := u.get("/api/v1/pools", true, &ps); err != nil || code != http.StatusOK {
		return nil
	}
	out := map[string]string{}
	for _, p := range ps {
		if p.Name == pool {
			for _, in := range p.Status.Instances {
				out[in.ID] = in.Phase
			}
		}
	}
	return out
}

func readyIDs(phases map[string]string) []string {
	var ids []string
	for id, ph := range phases {
		if ph == "Ready" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// startLoad sends chat requests through the gateway until stopped, so that
// the traffic charts have something to draw.
func startLoad(gw string, workers int) (stop func() (ok, failed int64)) {
	var okN, failN atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 20 * time.Second}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				body := fmt.Sprintf(`{"model":"qwen2:0.5b","messages":[{"role":"user","content":"worker %d request %d"}],"stream":false,"options":{"num_predict":8}}`, w, i)
				resp, err := client.Post(gw+"/ollama-chat", "application/json", strings.NewReader(body))
				if err != nil {
					failN.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					okN.Add(1)
				} else {
					failN.Add(1)
				}
				time.Sleep(50 * time.Millisecond) // pacing of the load, not a wait for a condition
			}
		}()
	}
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return okN.Load(), failN.Load()
	}
}

// waitJS evaluates a JavaScript boolean expression until it holds.
func waitJS(t *testing.T, ctx context.Context, timeout time.Duration, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 3000) : ""`))
			t.Fatalf("timed out after %s waiting for %s (last error %v); the page shows:\n%s", timeout, what, err, text)
		}
		time.Sleep(100 * time.Millisecond) // polling interval of a condition
	}
}

func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// screenshotDir is docs/img when TIDEGPU_UPDATE_SCREENSHOTS=1 (to refresh
// the committed images), else a temporary directory.
func screenshotDir(t *testing.T) string {
	if os.Getenv("TIDEGPU_UPDATE_SCREENSHOTS") == "1" {
		dir := filepath.Join(testbin.RepoRoot(), "docs", "img")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

func saveScreenshot(t *testing.T, ctx context.Context, path string, width, height int) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(png))
	if err != nil || format != "png" || cfg.Width != width || cfg.Height != height {
		t.Fatalf("screenshot is %s %dx%d (%v), want a %dx%d png", format, cfg.Width, cfg.Height, err, width, height)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// The demonstration: the dashboard of `tidegpu up` shows the pool
// and its instances, reclaims one through the page (the admin token given
// in the page), and shows the replacement.
func TestDashboardReclaimsAnInstanceAndShowsTheReplacement(t *testing.T) {
	if chromium == "" {
		t.Skipf("chromium is not installed (looked in %v): install the Debian package `chromium` (apt-get install -y chromium)", chromiumPaths)
	}
	const token = "dashboard-e2e-token"
	start := time.Now()
	u := startUp(t, token)

	if _, ok := testbin.Eventually(30*time.Second, func() bool { return len(readyIDs(u.phases("default"))) == 2 }); !ok {
		t.Fatalf("the default pool did not get 2 ready instances: %v", u.phases("default"))
	}
	before := readyIDs(u.phases("default"))
	t.Logf("pool ready after %s: %v", time.Since(start).Round(time.Millisecond), before)

	// The page is served without the token; the data is not.
	if code, err := u.get("/", false, nil); err != nil || code != http.StatusOK {
		t.Fatalf("GET / = %d, %v: the dashboard is not mounted on the admin server (set admin.Options.Dashboard in internal/embedded)", code, err)
	}
	if code, _ := u.get("/api/v1/timeline", false, nil); code != http.StatusUnauthorized {
		t.Fatalf("GET /api/v1/timeline without the token = %d, want 401", code)
	}

	stopLoad := startLoad(u.gw, 3)
	loadStopped := false
	defer func() {
		if !loadStopped {
			stopLoad()
		}
	}()

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless, // --headless (and hide-scrollbars, mute-audio)
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	ctx, cancelTimeout := context.WithTimeout(ctx, 50*time.Second)
	defer cancelTimeout()

	// Uncaught exceptions of the page fail the test.
	var exMu sync.Mutex
	var exceptions []string
	exIter := chromedp.Events(ctx, runtime.ExceptionThrown)
	go func() {
		for ev, err := range exIter {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			exMu.Lock()
			exceptions = append(exceptions, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber+1, msg))
			exMu.Unlock()
		}
	}()

	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(u.admin+"/"),
		chromedp.WaitVisible(chromedp.ID("token-input")),
	); err != nil {
		t.Fatalf("opening the dashboard in %s: %v", chromium, err)
	}
	t.Logf("page open after %s; it asks for the token", time.Since(start).Round(time.Millisecond))

	// Keyboard: type the token and press Enter.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token-input"), token+"\r")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 15*time.Second, "the pool and its 2 instances",
		`document.querySelector('#pools .pool-name')?.textContent === 'default' &&
		 document.querySelectorAll('#pools tr[data-instance]').length === 2 &&
		 document.getElementById('token-form').hidden`)
	shown := js[[]string](t, ctx, `[...document.querySelectorAll('#pools tr[data-instance]')].map(r => r.dataset.instance).sort()`)
	if !slices.Equal(shown, before) {
		t.Fatalf("the page shows instances %v, the admin API %v", shown, before)
	}
	if got := js[string](t, ctx, `document.querySelector('#pools .pool-count').textContent`); !strings.Contains(got, "2 / 2") {
		t.Errorf("pool count shows %q, want 2 / 2 ready", got)
	}
	waitJS(t, ctx, 10*time.Second, "both instances on the timeline and as backends",
		`document.querySelectorAll('#timeline [data-track]').length >= 2 && document.querySelectorAll('#backends tr[data-backend]').length === 2`)

	// Reclaim the first instance with no notice, with the page's button.
	victim := shown[0]
	t.Logf("clicking 'Reclaim now' for %s", victim)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#pools tr[data-instance="`+victim+`"] button[data-action="reclaim-now"]`))); err != nil {
		t.Fatalf("clicking reclaim: %v", err)
	}
	clicked := time.Now()
	waitJS(t, ctx, 20*time.Second, "the replacement to be shown Ready and the reclaimed instance to leave the pool",
		fmt.Sprintf(`(() => {
			const rows = [...document.querySelectorAll('#pools tr[data-instance]')];
			const ids = rows.map(r => r.dataset.instance);
			const ready = rows.filter(r => r.querySelector('.badge').textContent === 'Ready').map(r => r.dataset.instance);
			return !ids.includes(%q) && ready.length === 2 && ready.some(id => !%s.includes(id));
		})()`, victim, mustJSON(t, before)))
	after := js[[]string](t, ctx, `[...document.querySelectorAll('#pools tr[data-instance]')].map(r => r.dataset.instance).sort()`)
	var replacement string
	for _, id := range after {
		if !slices.Contains(before, id) {
			replacement = id
		}
	}
	t.Logf("replacement %s shown Ready %s after the click", replacement, time.Since(clicked).Round(time.Millisecond))
	if api := readyIDs(u.phases("default")); !slices.Equal(api, after) {
		t.Errorf("after the reclaim the page shows %v, the admin API %v", after, api)
	}

	// The click went through the admin API, with the token.
	var evs []events.Event
	if _, err := u.get("/api/v1/events", true, &evs); err != nil {
		t.Fatal(err)
	}
	requested := false
	for _, e := range evs {
		requested = requested || (e.Reason == "ReclaimRequested" && e.Instance == victim)
	}
	if !requested {
		t.Fatalf("no ReclaimRequested event for %s in the admin API's log", victim)
	}
	// The timeline and the live event list tell the story.
	waitJS(t, ctx, 10*time.Second, "the timeline to link the replacement and the event list to show the reclaim",
		fmt.Sprintf(`document.querySelector('#timeline [data-track=%q]')?.textContent.includes('replaces %s') &&
		 document.querySelector('#timeline [data-track=%q]')?.textContent.includes('Gone') &&
		 [...document.querySelectorAll('#events li[data-reason="ReclaimRequested"]')].some(li => li.textContent.includes(%q))`,
			replacement, victim, victim, victim))

	// The traffic charts draw the sampled load: a line through at least
	// three points (four samples, a few seconds apart).
	waitJS(t, ctx, 30*time.Second, "the request-rate and latency charts to draw a line through 3 points",
		`['#chart-rps path.l-rps', '#chart-lat path.l-p50', '#chart-lat path.l-p99'].every(sel =>
			((document.querySelector(sel)?.getAttribute('d') || '').match(/L/g) || []).length >= 2)`)
	// Cost: another issue's endpoint; the panel says what it has.
	costText := js[string](t, ctx, `document.getElementById('cost').textContent`)
	if !strings.Contains(costText, "not available yet") && !strings.Contains(costText, "Run-rate") && !strings.Contains(costText, "No cost") {
		t.Errorf("cost panel shows %q", costText)
	}

	// Accessible basics: every control has a name, nothing overflows.
	unlabelled := js[[]string](t, ctx, `[...document.querySelectorAll('button, input, select, textarea')]
		.filter(e => !(e.getAttribute('aria-label') || (e.labels && e.labels.length) || e.textContent.trim()))
		.map(e => e.outerHTML.slice(0, 80))`)
	if len(unlabelled) > 0 {
		t.Errorf("controls without a label: %v", unlabelled)
	}
	if w := js[float64](t, ctx, `document.documentElement.scrollWidth`); w > 1280 {
		t.Errorf("the page is %v px wide in a 1280 px window", w)
	}
	// Keyboard: the reclaim buttons are reachable with Tab, and a focused
	// one keeps the focus across the page's live updates.
	if n := js[float64](t, ctx, `[...document.querySelectorAll('#pools button')].filter(b => b.tabIndex >= 0 && !b.disabled).length`); n < 2 {
		t.Errorf("%v reclaim buttons reachable by keyboard, want at least 2", n)
	}
	key := "default/" + replacement + "/notice"
	if !js[bool](t, ctx, fmt.Sprintf(`(document.querySelector('[data-key=%q]').focus(), document.activeElement.dataset.key === %q)`, key, key)) {
		t.Fatalf("cannot focus the button %s", key)
	}
	stamp := js[string](t, ctx, `document.getElementById('updated').textContent`)
	waitJS(t, ctx, 15*time.Second, "the page to refresh", fmt.Sprintf(`document.getElementById('updated').textContent !== %q`, stamp))
	if got := js[string](t, ctx, `document.activeElement?.dataset?.key || document.activeElement?.tagName || ''`); got != key {
		t.Errorf("after a refresh the focus is on %q, want it kept on %q", got, key)
	}
	js[bool](t, ctx, `(document.activeElement.blur(), true)`)

	dir := screenshotDir(t)
	js[bool](t, ctx, `(window.scrollTo(0, 0), true)`)
	// Move the mouse off the buttons so that none shows its hover colour.
	if err := chromedp.Do(ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 5, 795)); err != nil {
		t.Fatal(err)
	}
	// The reclaim's confirmation floats over the charts until it fades.
	waitJS(t, ctx, 10*time.Second, "the reclaim confirmation to fade", `document.getElementById('notice').hidden`)
	saveScreenshot(t, ctx, filepath.Join(dir, "dashboard.png"), 1280, 800)

	// A narrow window (a phone): one column, no sideways scrolling.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the page to fit 390 px", `document.documentElement.scrollWidth <= 390`)
	saveScreenshot(t, ctx, filepath.Join(dir, "dashboard-narrow.png"), 390, 844)

	ok, failed := stopLoad()
	loadStopped = true
	t.Logf("load during the test: %d answered, %d failed", ok, failed)

	exMu.Lock()
	defer exMu.Unlock()
	if len(exceptions) > 0 {
		t.Errorf("uncaught exceptions in the page: %v", exceptions)
	}
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
