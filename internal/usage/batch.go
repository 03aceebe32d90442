package usage

import (
	"encoding/json"
	"errors"
	"fmt"
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
}

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
	if len(bt.Tokens)+len(bt.Busy) > maxBatchEntries {
		errs = append(errs, fmt.Errorf("tokens, busy: at most %d entries in all", maxBatchEntries))
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
