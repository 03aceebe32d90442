package usage

// Why push, not pull: a replica's tokens must reach the operator's ledger
// once each, across replica restarts. A pull over the replicas' /metrics
// counters loses what a replica served since the last scrape when it
// stops, and needs counter-reset guessing when it comes back. Pushing
// batches that the operator acknowledges, each named by (replica, seq),
// loses nothing on a graceful stop (the replica flushes and waits for the
// ack on SIGTERM) and counts nothing twice (a batch sent again after a lost
// ack is recognised by its seq). A replica killed -9 loses at most its
// unacknowledged tail: one interval's worth.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidegpu/tidegpu/internal/cost"
)

// Path is where the operator's admin API takes batches.
const Path = "/api/v1/usage"

// DefaultReportInterval is how often a Reporter sends what it gathered.
const DefaultReportInterval = time.Second

// ReporterOptions configure a Reporter.
type ReporterOptions struct {
	// URL is the operator's admin API, http://host:port; required.
	URL string
	// Token is the admin API's bearer token; required unless URL's host is
	// a loopback address.
	Token string
	// Name names the replica (the pod name); "" means the host name. The
	// replica's id is Name plus a random suffix drawn per process start.
	Name string
	// Interval is the period of sending; 0 means DefaultReportInterval.
	Interval time.Duration
	// Client sends the batches; nil means one with a 10 s timeout.
	Client *http.Client
	Logger *slog.Logger
	// Registry, if non-nil, gets the reporter's metrics.
	Registry prometheus.Registerer
}

// Reporter gathers a gateway replica's tokens and busy periods and sends
// them to the operator in acknowledged batches, one at a time and in
// order: a batch is sent again, unchanged, until the operator acknowledges
// it; what is gathered meanwhile goes into the next one. Its methods are
// safe for concurrent use.
type Reporter struct {
	url, token string
	replica    string
	interval   time.Duration
	client     *http.Client
	log        *slog.Logger
	metrics    *reporterMetrics // nil: none

	mu     sync.Mutex
	tokens map[tokenKey]*TokenCount // gathered, not yet in a batch
	uses   map[useKey]*TenantUse    // gathered, not yet in a batch
	busy   []BusyPeriod
	open   map[string]int64 // backends busy now: since when (unix ns), not yet in a batch
	seq    uint64           // of the last batch made
	sent   *Batch           // made, not yet acknowledged
	acked  uint64           // batches acknowledged
	// The operator's last word on the tenants' spend (Ack.Month, Ack.Spend).
	spendMonth string
	spend      map[string]int64
	budgets    map[string]int64 // the keys' monthly budgets, in every batch
}

type tokenKey struct{ backend, model string }

type useKey struct{ backend, tenant, labels string }

// NewReporter checks o and returns a Reporter; Run sends.
func NewReporter(o ReporterOptions) (*Reporter, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("usage report URL %q: want the operator's admin API as http://host:port", o.URL)
	}
	if o.Token == "" && !loopbackHost(u.Hostname()) {
		return nil, fmt.Errorf("usage report URL %q: not a loopback address, so the operator's admin API needs a token: set TIDEGPU_ADMIN_TOKEN to the operator's", o.URL)
	}
	name := o.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	r := &Reporter{
		url: u.Scheme + "://" + u.Host + Path, token: o.Token,
		replica:  name + "-" + hex.EncodeToString(rnd[:]),
		interval: o.Interval, client: o.Client, log: o.Logger,
		tokens: map[tokenKey]*TokenCount{}, uses: map[useKey]*TenantUse{}, open: map[string]int64{},
	}
	if r.interval <= 0 {
		r.interval = DefaultReportInterval
	}
	if r.client == nil {
		r.client = &http.Client{Timeout: 10 * time.Second}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if o.Registry != nil {
		if r.metrics, err = newReporterMetrics(o.Registry, r); err != nil {
			return nil, fmt.Errorf("usage reporter metrics: %w", err)
		}
	}
	return r, nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// Replica is the id the batches carry.
func (r *Reporter) Replica() string { return r.replica }

// Add gathers the tokens of one answer; it is a Sink.
func (r *Reporter) Add(backend, model string, prompt, completion int64) {
	if prompt <= 0 && completion <= 0 {
		return
	}
	r.mu.Lock()
	k := tokenKey{backend, model}
	t := r.tokens[k]
	if t == nil {
		t = &TokenCount{Backend: backend, Model: model}
		r.tokens[k] = t
	}
	t.Prompt += max(prompt, 0)
	t.Completion += max(completion, 0)
	r.mu.Unlock()
}

// AddUse gathers one answer's use by a tenant; it is a UseSink.
func (r *Reporter) AddUse(backend, _ string, u cost.Use) {
	if u.Prompt < 0 || u.Completion < 0 {
		return
	}
	var reqNs int64
	if !u.Start.IsZero() && u.End.After(u.Start) {
		reqNs = u.End.Sub(u.Start).Nanoseconds()
	}
	r.mu.Lock()
	k := useKey{backend, u.Tenant, labelsKey(u.Labels)}
	t := r.uses[k]
	if t == nil {
		t = &TenantUse{Backend: backend, Tenant: u.Tenant, Labels: u.Labels}
		r.uses[k] = t
	}
	t.Prompt += u.Prompt
	t.Completion += u.Completion
	t.ReqNs += reqNs
	r.mu.Unlock()
}

func labelsKey(l map[string]string) string {
	b, _ := json.Marshal(l) // sorted keys
	return string(b)
}

// BusyStart records that backend turned busy at at (SampleBusy's start).
func (r *Reporter) BusyStart(backend string, at time.Time) {
	r.mu.Lock()
	if _, ok := r.open[backend]; !ok {
		r.open[backend] = at.UnixNano()
	}
	r.mu.Unlock()
}

// BusyEnd records that backend turned idle at at (SampleBusy's end).
func (r *Reporter) BusyEnd(backend string, at time.Time) {
	r.mu.Lock()
	if from, ok := r.open[backend]; ok {
		delete(r.open, backend)
		if t := at.UnixNano(); t > from {
			r.busy = append(r.busy, BusyPeriod{Backend: backend, From: from, To: t})
		}
	}
	r.mu.Unlock()
}

// Acked is the number of batches the operator has acknowledged.
func (r *Reporter) Acked() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked
}

// Unacked is the tokens gathered that the operator has not acknowledged.
func (r *Reporter) Unacked() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, t := range r.tokens {
		n += t.Prompt + t.Completion
	}
	if r.sent != nil {
		for _, t := range r.sent.Tokens {
			n += t.Prompt + t.Completion
		}
	}
	return n
}

// pendingLocked reports whether anything waits to be sent.
func (r *Reporter) pendingLocked() bool {
	return r.sent != nil || len(r.tokens) > 0 || len(r.busy) > 0 || len(r.uses) > 0
}

// batchLocked returns the batch to send: the unacknowledged one, else a
// new one of what was gathered (busy periods still open are cut at now and
// go on from there), else nil.
func (r *Reporter) batchLocked(now time.Time) *Batch {
	if r.sent != nil {
		return r.sent
	}
	t := now.UnixNano()
	for id, from := range r.open {
		if t > from {
			r.busy = append(r.busy, BusyPeriod{Backend: id, From: from, To: t})
			r.open[id] = t
		}
	}
	if len(r.tokens) == 0 && len(r.busy) == 0 && len(r.uses) == 0 {
		return nil
	}
	r.seq++
	b := &Batch{Replica: r.replica, Seq: r.seq, Busy: r.busy, Budgets: r.budgets}
	for _, tc := range r.tokens {
		b.Tokens = append(b.Tokens, *tc)
	}
	for _, u := range r.uses {
		b.Uses = append(b.Uses, *u)
	}
	r.tokens, r.busy, r.uses = map[tokenKey]*TokenCount{}, nil, map[useKey]*TenantUse{}
	r.sent = b
	return b
}

// send sends the current batch, if any, once. It returns nil when nothing
// is left unacknowledged of what was gathered before the call.
func (r *Reporter) send(ctx context.Context) error {
	r.mu.Lock()
	b := r.batchLocked(time.Now())
	r.mu.Unlock()
	if b == nil {
		return nil
	}
	ack, err := r.post(ctx, b)
	if err != nil {
		r.metrics.batch("failed")
		return err
	}
	if ack.Duplicate {
		r.metrics.batch("duplicate")
	} else {
		r.metrics.batch("acked")
	}
	r.mu.Lock()
	if r.sent == b {
		r.sent = nil
		r.acked++
	}
	if ack.Month != "" {
		r.spendMonth, r.spend = ack.Month, ack.Spend
	}
	r.mu.Unlock()
	return nil
}

// SetBudgets sets the keys' monthly budgets by tenant in US dollars (the
// keys file's, again after each reload); every batch from now carries
// them, so that the operator alerts on them.
func (r *Reporter) SetBudgets(budgets map[string]*big.Rat) {
	m := make(map[string]int64, len(budgets))
	for t, b := range budgets {
		m[t] = cost.RatNanos(b)
	}
	r.mu.Lock()
	r.budgets = m
	r.mu.Unlock()
}

// MonthSpend implements the tenant middleware's Spend (tenant.Spend) on a
// standalone replica: the tenant's spend this month as the operator last
// acknowledged it. Spend only grows within a month, so the figure is a
// lower bound that stays true all month: a tenant it puts over budget is
// over budget. It lags by what the tenant spent since (about one batch
// interval while the tenant sends requests). Unknown (false) before the
// first acknowledgement of the month, or when the operator does not share
// spend.
func (r *Reporter) MonthSpend(tenant string, now time.Time) (*big.Rat, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spendMonth == "" || r.spendMonth != monthOf(now) {
		return nil, false
	}
	return big.NewRat(r.spend[tenant], 1e9), true
}

// post sends b and returns the operator's acknowledgement of it.
func (r *Reporter) post(ctx context.Context, b *Batch) (Ack, error) {
	body, err := json.Marshal(b)
	if err != nil {
		return Ack{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return Ack{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return Ack{}, fmt.Errorf("sending usage batch %d to %s: %w", b.Seq, r.url, err)
	}
	defer resp.Body.Close()
	// An acknowledgement carries a figure per tenant (Ack.Spend): room for
	// tens of thousands.
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		return Ack{}, fmt.Errorf("usage batch %d: %s answered %s: %s", b.Seq, r.url, resp.Status, bytes.TrimSpace(reply))
	}
	var ack Ack
	if err := json.Unmarshal(reply, &ack); err != nil || ack.Replica != b.Replica || ack.Seq != b.Seq {
		return Ack{}, fmt.Errorf("usage batch %d: %s answered no matching acknowledgement: %s", b.Seq, r.url, bytes.TrimSpace(reply))
	}
	return ack, nil
}

// Run sends every interval until ctx ends. A failed send is retried at the
// next tick with the same batch; failures are logged once until a send
// succeeds again. Call Flush after Run returns to send the rest.
func (r *Reporter) Run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.send(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			r.log.Warn("usage report failed; retrying", "err", err)
			failing = true
		case err == nil && failing:
			r.log.Info("usage report delivered again")
			failing = false
		}
	}
}

// Flush sends everything gathered (busy periods still open are cut at
// now) until the operator has acknowledged it all or ctx ends; on SIGTERM,
// after the last request finished. It returns an error, naming what is
// lost, if ctx ended first.
func (r *Reporter) Flush(ctx context.Context) error {
	var last error
	for {
		err := r.send(ctx)
		r.mu.Lock()
		more := r.pendingLocked()
		r.mu.Unlock()
		if err == nil && !more {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("usage not acknowledged by the operator before shutdown; lost"), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
