package usage

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Batch is what a gateway replica sends to the operator (POST
// /api/v1/usage): the tokens served and busy periods measured since its
// previous batch. Replica and Seq identify it: Replica is unique per
// process start, Seq counts the replica's batches from 1, so the operator
// counts a batch sent twice (a retry after a lost answer) once.
type Batch struct {
	Replica string       `json:"replica"`
	Seq     uint64       `json:"seq"`
	Tokens  []TokenCount `json:"tokens,omitempty"`
	Busy    []BusyPeriod `json:"busy,omitempty"`
	// Uses carry the tenants of the tokens (the cost per tenant); an
	// operator of an earlier release ignores them, and a replica of an
	// earlier release sends none.
	Uses []TenantUse `json:"uses,omitempty"`
	// Budgets are the monthly budgets of the replica's keys by tenant
	// (nano-dollars; Reporter.SetBudgets), so that the operator, which
	// keeps the ledger and the webhooks, alerts on them (Ingest.Budgets).
	Budgets map[string]int64 `json:"budgets,omitempty"`
}

// TenantUse is what one tenant's answers (with one set of key labels)
// took of one backend: their tokens and their time in flight.
type TenantUse struct {
	Backend    string            `json:"backend"`
	Tenant     string            `json:"tenant,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Prompt     int64             `json:"prompt"`
	Completion int64             `json:"completion"`
	// ReqNs is the answers' time in flight, summed (nanoseconds).
	ReqNs int64 `json:"reqNs"`
}

// TokenCount is the tokens one backend served of one model.
type TokenCount struct {
	Backend    string `json:"backend"`
	Model      string `json:"model"`
	Prompt     int64  `json:"prompt"`
	Completion int64  `json:"completion"`
}

// BusyPeriod is a stretch [From, To) (unix nanoseconds) during which a
// backend had a request of this replica in flight.
type BusyPeriod struct {
	Backend string `json:"backend"`
	From    int64  `json:"from"`
	To      int64  `json:"to"`
}

// Ack is the operator's answer to a batch: it is counted (now or before).
type Ack struct {
	Replica string `json:"replica"`
	Seq     uint64 `json:"seq"`
	// Duplicate: the batch had been counted already.
	Duplicate bool `json:"duplicate,omitempty"`
	// Month (UTC, "2006-01") and Spend: every tenant's spend that month
	// in the operator's ledger, in nano-dollars, when the operator shares
	// it (Ingest.ShareSpend), so that a replica holds the keys' monthly
	// budgets (Reporter.MonthSpend). An older operator sends neither.
	Month string           `json:"month,omitempty"`
	Spend map[string]int64 `json:"spend,omitempty"`
}

// monthOf names t's UTC month as Ack.Month does.
func monthOf(t time.Time) string { return t.UTC().Format("2006-01") }

// Limits of a batch, so that one request cannot grow the ledger unbounded.
const (
	MaxBatchBytes   = 4 << 20
	maxBatchEntries = 100000
	maxNameLen      = 253
)

// ParseBatch reads a batch (outside input) and checks it: a replica id, a
// sequence number from 1, names within bounds, counts not negative, busy
// periods not reversed.
func ParseBatch(b []byte) (Batch, error) {
	var bt Batch
	if len(b) > MaxBatchBytes {
		return bt, fmt.Errorf("batch of %d bytes: at most %d", len(b), MaxBatchBytes)
	}
	if err := json.Unmarshal(b, &bt); err != nil {
		return Batch{}, fmt.Errorf("batch: not JSON of the usage batch shape: %w", err)
	}
	var errs []error
	if bt.Replica == "" || len(bt.Replica) > maxNameLen {
		errs = append(errs, fmt.Errorf("replica: want a non-empty id of at most %d bytes", maxNameLen))
	}
	if bt.Seq == 0 {
		errs = append(errs, errors.New("seq: want a sequence number from 1"))
	}
	if len(bt.Tokens)+len(bt.Busy)+len(bt.Uses) > maxBatchEntries {
		errs = append(errs, fmt.Errorf("tokens, busy, uses: at most %d entries in all", maxBatchEntries))
	}
	for i, u := range bt.Uses {
		if u.Backend == "" || len(u.Backend) > maxNameLen || len(u.Tenant) > maxNameLen || len(u.Labels) > 8 {
			errs = append(errs, fmt.Errorf("uses[%d]: want a backend id and a tenant of at most %d bytes, at most 8 labels", i, maxNameLen))
		}
		for k, v := range u.Labels {
			if k == "" || len(k) > 63 || len(v) > 63 || strings.ContainsAny(k+v, ",=\r\n") {
				errs = append(errs, fmt.Errorf("uses[%d].labels: want names and values of 1-63 bytes without ',', '=' or line breaks", i))
			}
		}
		if u.Prompt < 0 || u.Completion < 0 || u.ReqNs < 0 {
			errs = append(errs, fmt.Errorf("uses[%d]: counts must not be negative", i))
		}
	}
	if len(bt.Budgets) > maxBatchEntries {
		errs = append(errs, fmt.Errorf("budgets: at most %d tenants", maxBatchEntries))
	}
	for tn, v := range bt.Budgets {
		if tn == "" || len(tn) > maxNameLen || v < 0 {
			errs = append(errs, fmt.Errorf("budgets[%q]: want a tenant of 1-%d bytes and a budget not negative", tn, maxNameLen))
			break
		}
	}
	for i, t := range bt.Tokens {
		if t.Backend == "" || len(t.Backend) > maxNameLen || len(t.Model) > maxNameLen {
			errs = append(errs, fmt.Errorf("tokens[%d]: want a backend id and a model name of at most %d bytes", i, maxNameLen))
		}
		if t.Prompt < 0 || t.Completion < 0 {
			errs = append(errs, fmt.Errorf("tokens[%d]: counts must not be negative", i))
		}
	}
	for i, p := range bt.Busy {
		if p.Backend == "" || len(p.Backend) > maxNameLen {
			errs = append(errs, fmt.Errorf("busy[%d].backend: want an id of at most %d bytes", i, maxNameLen))
		}
		if p.To < p.From || p.From <= 0 {
			errs = append(errs, fmt.Errorf("busy[%d]: want 0 < from <= to (unix ns), got %d..%d", i, p.From, p.To))
		}
	}
	if len(errs) > 0 {
		return Batch{}, errors.Join(errs...)
	}
	return bt, nil
}
