package usage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidegpu/tidegpu/internal/cost"
)

// replicaTTL is how long the operator remembers a replica that sends
// nothing more (a replica id is per process start, so old ones pile up).
const replicaTTL = 7 * 24 * time.Hour

// Ingest takes the gateway replicas' batches into the operator's ledger,
// each once: a batch whose seq is not above the last one counted of its
// replica is acknowledged again without counting. Tokens are counted at the
// time the batch arrives (the operator's clock; a replica sends every
// second), busy periods at the replica's times. Tokens of a backend the
// ledger does not know (not an instance of a pool) are dropped, and named
// in the debug log and counted in MetricIngestDropped. Its methods are safe
// for concurrent use.
type Ingest struct {
	ledger *cost.Ledger
	now    func() time.Time
	log    *slog.Logger

	ready   func() bool // nil: always
	spend   func(now time.Time) map[string]int64
	metrics *ingestMetrics

	mu      sync.Mutex
	last    map[string]replicaState     // by replica id
	budgets map[string]map[string]int64 // the budgets each replica last sent, by replica id
}

// Gate makes ServeHTTP refuse batches (503, closing the connection, so a
// retry through a Service may reach another pod) while ready reports false:
// on an operator that is not the leader, or whose ledger is not yet
// restored, a batch counted now would be lost. Call before serving.
func (in *Ingest) Gate(ready func() bool) { in.ready = ready }

// ShareSpend makes every acknowledgement carry the tenants' spend this
// month as spend computes it (nano-dollars by tenant), so that the
// replicas hold the keys' monthly budgets without a ledger of their own.
// Call before serving.
func (in *Ingest) ShareSpend(spend func(now time.Time) map[string]int64) { in.spend = spend }

// Register adds the ingest's metrics to reg. Call before serving.
func (in *Ingest) Register(reg prometheus.Registerer) error {
	m, err := newIngestMetrics(reg)
	if err != nil {
		return err
	}
	in.metrics = m
	return nil
}

type replicaState struct {
	Seq  uint64 `json:"seq"`
	Seen int64  `json:"seen"` // unix ns of its last batch
}

// NewIngest returns an Ingest into l. now nil means time.Now; logger nil
// means no logging.
func NewIngest(l *cost.Ledger, now func() time.Time, logger *slog.Logger) *Ingest {
	if now == nil {
		now = time.Now
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Ingest{ledger: l, now: now, log: logger, last: map[string]replicaState{}}
}

// Apply counts b unless it was counted before, and returns its
// acknowledgement.
func (in *Ingest) Apply(b Batch) Ack {
	in.mu.Lock()
	defer in.mu.Unlock()
	now := in.now()
	ack := Ack{Replica: b.Replica, Seq: b.Seq}
	st, known := in.last[b.Replica]
	if known && b.Seq <= st.Seq {
		ack.Duplicate = true
		in.metrics.batch("duplicate")
		return ack
	}
	in.metrics.batch("counted")
	if known && b.Seq > st.Seq+1 {
		in.log.Warn("usage batches missing from a gateway replica (the operator lost them)", "replica", b.Replica, "after", st.Seq, "got", b.Seq)
	}
	for _, t := range b.Tokens {
		m := in.ledger.Meter(t.Backend)
		if m == nil {
			in.log.Debug("usage for a backend that is no instance the ledger knows: dropped", "backend", t.Backend, "replica", b.Replica,
				"prompt", t.Prompt, "completion", t.Completion)
			in.metrics.drop(t.Prompt + t.Completion)
			continue
		}
		m.AddTokens(t.Model, t.Prompt, t.Completion, now)
	}
	for _, u := range b.Uses {
		// The answers' time in flight ends now, as their tokens count now.
		use := cost.Use{Tenant: u.Tenant, Labels: u.Labels, Prompt: u.Prompt, Completion: u.Completion, End: now}
		if u.ReqNs > 0 {
			use.Start = now.Add(-time.Duration(u.ReqNs))
		}
		in.ledger.AddUse(u.Backend, use)
	}
	for _, p := range b.Busy {
		in.ledger.AddBusy(p.Backend, time.Unix(0, p.From), time.Unix(0, p.To))
	}
	in.last[b.Replica] = replicaState{Seq: b.Seq, Seen: now.UnixNano()}
	if b.Budgets != nil {
		if in.budgets == nil {
			in.budgets = map[string]map[string]int64{}
		}
		in.budgets[b.Replica] = b.Budgets
	}
	for id, s := range in.last {
		if now.UnixNano()-s.Seen > int64(replicaTTL) {
			delete(in.last, id)
			delete(in.budgets, id)
		}
	}
	return ack
}

// Budgets returns the tenants' monthly budgets in US dollars as the
// replicas' keys give them: the smallest any replica sent last (replicas
// share one keys Secret; while a change rolls out, the stricter holds).
// It is what the operator's tenant budget alerts watch
// (costreport.WatchBudgets).
func (in *Ingest) Budgets() map[string]*big.Rat {
	in.mu.Lock()
	defer in.mu.Unlock()
	least := map[string]int64{}
	for _, m := range in.budgets {
		for t, v := range m {
			if o, ok := least[t]; !ok || v < o {
				least[t] = v
			}
		}
	}
	out := make(map[string]*big.Rat, len(least))
	for t, v := range least {
		out[t] = big.NewRat(v, 1e9)
	}
	return out
}

// ServeHTTP takes one batch: POST, JSON, answered 200 with its Ack, or 400
// naming what is wrong.
func (in *Ingest) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "POST a usage batch"})
		return
	}
	if in.ready != nil && !in.ready() {
		in.metrics.batch("refused")
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "this operator does not keep the ledger now (not the leader, or restoring it): retry"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBatchBytes+1))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "reading the batch: " + err.Error()})
		return
	}
	b, err := ParseBatch(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ack := in.Apply(b)
	if in.spend != nil {
		now := in.now()
		ack.Month, ack.Spend = monthOf(now), in.spend(now)
	}
	writeJSON(w, http.StatusOK, ack)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Snapshot returns the ledger's snapshot (taken by snap) and the replicas'
// last seqs, taken together with no batch counted in between, so that a
// restore of both counts every batch once: one in the snapshot is known by
// its seq, one after it is not in the ledger either.
func (in *Ingest) Snapshot(snap func() ([]byte, error)) (ledger, seqs []byte, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if ledger, err = snap(); err != nil {
		return nil, nil, err
	}
	seqs, err = json.Marshal(in.last)
	return ledger, seqs, err
}

// Restore takes back the replicas' seqs saved by Snapshot (outside input:
// a ConfigMap).
func (in *Ingest) Restore(seqs []byte) error {
	var m map[string]replicaState
	if err := json.Unmarshal(seqs, &m); err != nil {
		return fmt.Errorf("usage seqs: %w", err)
	}
	for id := range m {
		if id == "" {
			return errors.New("usage seqs: an empty replica id")
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if m == nil {
		m = map[string]replicaState{}
	}
	in.last = m
	return nil
}
