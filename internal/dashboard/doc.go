// Package dashboard owns TideGPU's web dashboard: the page and its assets
// (plain HTML, CSS and JavaScript embedded in the binary, no CDN, no build
// step), the instance timeline it draws (BuildTimeline, from the event log
// and the pools' status) and the 15-minute traffic series behind its charts
// (Sampler, which samples the gateway's counters and latency histogram every
// few seconds).
//
// Handler serves four routes: the page at GET / and its assets under
// GET /ui/ (they hold no data, so the admin server serves them without the
// admin token and the page asks for the token), and the JSON the page reads
// at GET /api/v1/timeline and GET /api/v1/timeseries (behind the token, like
// the rest of the admin API). Everything else the page shows comes from the
// admin API itself: /api/v1/pools, /api/v1/backends, /api/v1/events (and its
// SSE stream), the reclaim endpoint, and /api/v1/cost once it exists.
package dashboard
