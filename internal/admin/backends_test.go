package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/gateway"
	loadmetrics "github.com/tidegpu/tidegpu/internal/metrics"
)

// TestBackendsShowSignals: GET /api/v1/backends shows, for each backend of
// a real gateway scraping real HTTP servers, the signals read with their
// source and age, what is missing, and why a backend has none.
func TestBackendsShowSignals(t *testing.T) {
	// A TGI router's gauges (huggingface/text-generation-inference,
	// docs/source/reference/metrics.md): no KV-cache gauge, no TTFT.
	tgi := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("# TYPE tgi_queue_size gauge\ntgi_queue_size 5\n# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 2\n"))
	}))
	defer tgi.Close()
	broken := httptest.NewServer(http.NotFoundHandler())
	defer broken.Close()

	src := loadmetrics.NewScrape(loadmetrics.ScrapeOptions{})
	defer src.Close()
	gw, err := gateway.New(gateway.Options{Metrics: src, MetricsInterval: 20 * time.Millisecond, ProbeInterval: -1, WaitForBackend: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	gw.SetBackends("p", []gateway.Backend{
		{ID: "tgi", Pool: "p", Address: tgi.Listener.Addr().String()},
		{ID: "broken", Pool: "p", Address: broken.Listener.Addr().String()},
	})
	srv := httptest.NewServer(NewHandler(Options{Backends: gw}))
	defer srv.Close()

	type signals struct {
		Source  string   `json:"source"`
		Family  string   `json:"family"`
		Queue   *float64 `json:"queue"`
		Running *float64 `json:"running"`
		KVCache *float64 `json:"kvCache"`
		Age     *float64 `json:"age"`
		Fresh   bool     `json:"fresh"`
		Missing []string `json:"missing"`
		Error   string   `json:"error"`
	}
	var got map[string]signals
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/api/v1/backends")
		if err != nil {
			t.Fatal(err)
		}
		var bs []struct {
			ID      string   `json:"id"`
			Signals *signals `json:"signals"`
		}
		err = json.NewDecoder(resp.Body).Decode(&bs)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]signals{}
		for _, b := range bs {
			if b.Signals != nil {
				got[b.ID] = *b.Signals
			}
		}
		if got["tgi"].Fresh && got["broken"].Error != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fresh TGI signals and broken's error within 10s: %+v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := got["tgi"]
	if s.Source != "scrape" || s.Family != "tgi" || s.Queue == nil || *s.Queue != 5 || s.Running == nil || *s.Running != 2 ||
		s.KVCache != nil || s.Age == nil || *s.Age < 0 || !slices.Equal(s.Missing, []string{"kvCache", "ttftP99", "gpuUtil"}) {
		t.Errorf("tgi signals %+v", s)
	}
	if b := got["broken"]; b.Fresh || b.Queue != nil || len(b.Missing) != 5 {
		t.Errorf("broken signals %+v; want none, all missing", b)
	}
}
