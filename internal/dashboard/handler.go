package dashboard

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/poolview"
)

//go:embed assets
var assets embed.FS

// Pools is what the timeline reads of the engine (the engine's Manager and
// the operator's engines satisfy it).
type Pools interface {
	Pools() []poolview.Pool
}

// Options configure the dashboard's handler.
type Options struct {
	// Pools and Events feed the instance timeline; with either nil the
	// timeline lists no instance.
	Pools  Pools
	Events *events.Recorder
	// Sampler feeds the traffic charts; nil answers a series that is not
	// available (the page says so).
	Sampler *Sampler
	// Window of the timeline; default DefaultWindow.
	Window time.Duration
	// Clock is injected for tests; default real.
	Clock clock.PassiveClock
}

// Routes are the patterns Handler serves. PublicRoutes hold no data and
// must be reachable without the admin token (the page asks for it);
// DataRoutes belong behind the token.
var (
	PublicRoutes = []string{"GET /{$}", "GET /ui/"}
	DataRoutes   = []string{"GET /api/v1/timeline", "GET /api/v1/timeseries"}
)

// Handler returns the dashboard: the page at /, its assets under /ui/, and
// its JSON at /api/v1/timeline and /api/v1/timeseries.
func Handler(o Options) http.Handler {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	h := &handler{o: o, meta: map[string]Meta{}}
	mux := http.NewServeMux()
	files := http.FileServerFS(sub)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		http.ServeFileFS(w, r, sub, "index.html")
	})
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || r.URL.Path == "index.html" {
			http.Redirect(w, r, "/", http.StatusMovedPermanently)
			return
		}
		pageHeaders(w)
		files.ServeHTTP(w, r)
	})))
	mux.HandleFunc("GET /api/v1/timeline", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, h.timeline())
	})
	mux.HandleFunc("GET /api/v1/timeseries", func(w http.ResponseWriter, _ *http.Request) {
		if o.Sampler == nil {
			writeJSON(w, Series{Now: o.Clock.Now(), Points: []Point{}})
			return
		}
		writeJSON(w, o.Sampler.Series())
	})
	return mux
}

type handler struct {
	o Options

	mu sync.Mutex
	// meta remembers the zone and market of instances seen in the status,
	// for when they are gone; bounded by the event log.
	meta map[string]Meta
}

func (h *handler) timeline() Timeline {
	var evs []events.Event
	if h.o.Events != nil {
		evs = h.o.Events.List(0, "")
	}
	var pools []poolview.Pool
	if h.o.Pools != nil {
		pools = h.o.Pools.Pools()
	}
	h.mu.Lock()
	for _, p := range pools {
		for _, in := range p.Status.Instances {
			if in.Zone != "" || in.Market != "" {
				h.meta[in.ID] = Meta{Zone: in.Zone, Market: in.Market}
			}
		}
	}
	keep := map[string]bool{}
	for _, e := range evs {
		keep[e.Instance] = true
	}
	for _, p := range pools {
		for _, in := range p.Status.Instances {
			keep[in.ID] = true
		}
	}
	for id := range h.meta {
		if !keep[id] {
			delete(h.meta, id)
		}
	}
	meta := make(map[string]Meta, len(h.meta))
	for k, v := range h.meta {
		meta[k] = v
	}
	h.mu.Unlock()
	return BuildTimeline(evs, pools, meta, h.o.Clock.Now(), h.o.Window)
}

// pageHeaders keep the page to its own origin: no inline script, no
// framing, no referrer leaking the admin address.
func pageHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-cache")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
