package dashboard

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/tidegpu/tidegpu/test/testbin"
)

// corsPage is a web app on its own origin that calls the gateway (another
// origin) with fetch: a JSON POST with an Authorization header, which the
// Fetch standard sends only after a CORS preflight
// (https://fetch.spec.whatwg.org/#cors-preflight-fetch).
const corsPage = `<!doctype html><title>app</title><pre id="out">pending</pre>
<script>
fetch(GATEWAY + "/v1/chat/completions", {
  method: "POST",
  headers: {"Content-Type": "application/json", "Authorization": "Bearer sk-app"},
  body: JSON.stringify({model: "qwen2:0.5b", max_tokens: 4, messages: [{role: "user", content: "hi"}]}),
}).then(async r => {
  const j = await r.json();
  document.getElementById("out").textContent = "status " + r.status + " backend " + r.headers.get("X-Tidegpu-Backend") +
    " content " + JSON.stringify(j.choices[0].message.content);
}).catch(e => { document.getElementById("out").textContent = "error " + e; });
</script>`

// A browser page on another origin calls `tidegpu gateway` with fetch: the
// gateway answers the preflight itself, 204 with the configured headers, and
// the page reads the answer of the simulator behind it.
func TestBrowserPreflightAnsweredByTheGateway(t *testing.T) {
	if chromium == "" {
		t.Skipf("chromium is not installed (looked in %v): install the Debian package `chromium` (apt-get install -y chromium)", chromiumPaths)
	}
	// Each process is started again on fresh ports if one FreeAddr saw free
	// was taken before it listened (testbin.LostAddr).
	var simAddr string
	for try := 1; ; try++ {
		simAddr = testbin.FreeAddr(t)
		p := testbin.Start(t, binary, "sim", "--addr", simAddr, "--ttft", "1ms", "--token-time", "1ms")
		if try >= 3 || !testbin.LostAddr(p, simAddr, 30*time.Second) {
			break
		}
	}

	var gwAddr, adminAddr string // gwAddr read by the page's handler once the gateway runs
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, strings.Replace(corsPage, "GATEWAY", `"http://`+gwAddr+`"`, 1))
	}))
	t.Cleanup(page.Close)
	pageURL := page.URL // http://127.0.0.1:PORT, another origin than the gateway's port
	for try := 1; ; try++ {
		gwAddr, adminAddr = testbin.FreeAddr(t), testbin.FreeAddr(t)
		p := testbin.Start(t, binary, "gateway", "--backend", "http://"+simAddr, "--addr", gwAddr, "--admin-addr", adminAddr,
			"--cors-allowed-origin", pageURL, "--cors-allowed-headers", "Authorization,Content-Type", "--cors-max-age", "10m")
		if try >= 3 || !testbin.LostAddr(p, gwAddr, 30*time.Second) {
			break
		}
	}
	if _, ok := testbin.Eventually(15*time.Second, func() bool {
		resp, err := http.Post("http://"+gwAddr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"qwen2:0.5b","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}); !ok {
		t.Fatal("the gateway did not answer within 15 s")
	}

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true), chromedp.UserDataDir(t.TempDir()))
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()

	// The browser's own view of the preflight, from the DevTools protocol's
	// Network domain (a response of type Preflight).
	var mu sync.Mutex
	var pre *network.Response
	if err := chromedp.Do(ctx); err != nil { // the tab, before listening to it
		t.Fatalf("starting %s: %v", chromium, err)
	}
	go func() {
		for e, err := range chromedp.Events(ctx, network.ResponseReceived) {
			if err != nil {
				return
			}
			mu.Lock()
			if e.Type == network.ResourceTypePreflight {
				pre = e.Response
			}
			mu.Unlock()
		}
	}()
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("opening %s in %s: %v", pageURL, chromium, err)
	}
	waitJS(t, ctx, 20*time.Second, "the page's fetch to finish", `document.getElementById("out").textContent != "pending"`)
	out := js[string](t, ctx, `document.getElementById("out").textContent`)
	if !strings.HasPrefix(out, "status 200 backend static-0 content ") {
		t.Fatalf("the page got %q", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if pre == nil {
		t.Fatal("the browser sent no preflight (the request should need one)")
	}
	h := map[string]string{}
	for k, v := range pre.Headers {
		h[strings.ToLower(k)], _ = v.(string)
	}
	t.Logf("page: %s; preflight answered %d %v", out, pre.Status, h)
	if pre.Status != 204 || h["access-control-allow-origin"] != pageURL ||
		!strings.EqualFold(h["access-control-allow-methods"], "POST") ||
		!strings.Contains(strings.ToLower(h["access-control-allow-headers"]), "authorization") ||
		h["access-control-max-age"] != "600" || h["x-tidegpu-backend"] != "" {
		t.Fatalf("preflight answered %d with %v: want 204 from the gateway itself with the configured headers", pre.Status, h)
	}
	// No backend saw it: the gateway counted a 204 of its own.
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `tidegpu_gateway_requests_total{backend="none",code="204",pool="none"} 1`) {
		t.Fatalf("the gateway's metrics do not show its own 204:\n%s", grepLines(string(b), "tidegpu_gateway_requests_total"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
