package usage

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidegpu/tidegpu/internal/cost"
)

func TestParseBatch(t *testing.T) {
	cases := []struct {
		body string
		want string // "" when valid
	}{
		{`{"replica":"gw-0-ab","seq":1,"tokens":[{"backend":"i-1","model":"m","prompt":3,"completion":4}],"busy":[{"backend":"i-1","from":10,"to":20}]}`, ""},
		{`{"replica":"gw","seq":2}`, ""},
		{`{"seq":1}`, "replica:"},
		{`{"replica":"gw","seq":0}`, "seq:"},
		{`{"replica":"gw","seq":1,"tokens":[{"backend":"","model":"m","prompt":1}]}`, "tokens[0]"},
		{`{"replica":"gw","seq":1,"tokens":[{"backend":"i","model":"m","prompt":-1}]}`, "must not be negative"},
		{`{"replica":"gw","seq":1,"busy":[{"backend":"i","from":20,"to":10}]}`, "busy[0]"},
		{`{"replica":"gw","seq":1,"budgets":{"team-a":5000000000}}`, ""},
		{`{"replica":"gw","seq":1,"budgets":{"team-a":-1}}`, "budgets"},
		{`{"replica":"gw","seq":1,"budgets":{"":1}}`, "budgets"},
		{`{"replica":"gw","seq":-1}`, "not JSON"},
		{`[`, "not JSON"},
	}
	for _, tc := range cases {
		_, err := ParseBatch([]byte(tc.body))
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: err %v, want %q", tc.body, err, tc.want)
		}
	}
}

func FuzzParseBatch(f *testing.F) {
	f.Add([]byte(`{"replica":"gw-0-ab","seq":1,"tokens":[{"backend":"i-1","model":"m","prompt":3,"completion":4}],"busy":[{"backend":"i-1","from":10,"to":20}]}`))
	f.Add([]byte(`{"replica":"x","seq":18446744073709551615}`))
	f.Add([]byte(`{"replica":"x","seq":1,"budgets":{"team-a":5000000000,"b":0}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		bt, err := ParseBatch(b)
		if err != nil {
			return
		}
		if bt.Replica == "" || bt.Seq == 0 {
			t.Fatalf("accepted %q", b)
		}
		for _, tc := range bt.Tokens {
			if tc.Prompt < 0 || tc.Completion < 0 || tc.Backend == "" {
				t.Fatalf("accepted %q", b)
			}
		}
		for _, p := range bt.Busy {
			if p.To < p.From || p.From <= 0 {
				t.Fatalf("accepted %q", b)
			}
		}
		for tn, v := range bt.Budgets {
			if tn == "" || v < 0 {
				t.Fatalf("accepted %q", b)
			}
		}
	})
}

// A batch sent again (its acknowledgement lost) is acknowledged without
// counting; a restore of Snapshot keeps knowing it.
func TestIngestCountsABatchOnce(t *testing.T) {
	l := newTestLedger(t, "i-1")
	in := NewIngest(l, nil, nil)
	b := Batch{Replica: "gw-0-aa", Seq: 1, Tokens: []TokenCount{{Backend: "i-1", Model: accModel, Prompt: 3, Completion: 5}}}
	if a := in.Apply(b); a.Duplicate || a.Seq != 1 {
		t.Fatalf("first: %+v", a)
	}
	if a := in.Apply(b); !a.Duplicate {
		t.Fatalf("again: %+v", a)
	}
	if p, c := ledgerTokens(l); p != 3 || c != 5 {
		t.Fatalf("ledger %d %d after a batch sent twice", p, c)
	}
	// Another replica's seq 1 is its own.
	in.Apply(Batch{Replica: "gw-1-bb", Seq: 1, Tokens: []TokenCount{{Backend: "i-1", Model: accModel, Prompt: 1}}})
	// An unknown backend's tokens are dropped, not an error.
	in.Apply(Batch{Replica: "gw-1-bb", Seq: 2, Tokens: []TokenCount{{Backend: "nobody", Model: accModel, Prompt: 100}}})
	if p, _ := ledgerTokens(l); p != 4 {
		t.Fatalf("ledger prompt %d, want 4", p)
	}

	ledgerSnap, seqs, err := in.Snapshot(l.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	l2 := cost.NewLedger(cost.Options{})
	if err := l2.Restore(ledgerSnap); err != nil {
		t.Fatal(err)
	}
	in2 := NewIngest(l2, nil, nil)
	if err := in2.Restore(seqs); err != nil {
		t.Fatal(err)
	}
	if a := in2.Apply(b); !a.Duplicate {
		t.Fatalf("after a restore, batch 1 counted again: %+v", a)
	}
	if a := in2.Apply(Batch{Replica: "gw-0-aa", Seq: 2, Tokens: []TokenCount{{Backend: "i-1", Model: accModel, Prompt: 2}}}); a.Duplicate {
		t.Fatalf("batch 2 taken for a duplicate")
	}
	if p, c := ledgerTokens(l2); p != 6 || c != 5 {
		t.Fatalf("restored ledger %d %d, want 6 5", p, c)
	}
	if err := in2.Restore([]byte(`{"":{"seq":1}}`)); err == nil {
		t.Fatal("an empty replica id restored")
	}
}

// The operator counts a batch but its answer is lost: the replica sends
// the batch again, the operator acknowledges it as a duplicate, and the
// tokens are in the ledger once. Busy periods reach the ledger too.
func TestReporterRetriesUntilAcknowledged(t *testing.T) {
	l := newTestLedger(t, "i-1")
	in := NewIngest(l, nil, nil)
	var posts, dropped atomic.Int64
	op := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != Path {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		rec := httptest.NewRecorder()
		in.ServeHTTP(rec, r)
		if dropped.Load() == 0 {
			// Counted, but the answer never reaches the replica.
			dropped.Add(1)
			http.Error(w, "lost", http.StatusBadGateway)
			return
		}
		w.WriteHeader(rec.Code)
		_, _ = io.Copy(w, rec.Body)
	}))
	t.Cleanup(op.Close)
	reg := prometheus.NewRegistry()
	r, err := NewReporter(ReporterOptions{URL: op.URL, Token: "tok", Name: "gw-0", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Replica(), "gw-0-") || len(r.Replica()) != len("gw-0-")+12 {
		t.Fatalf("replica id %q", r.Replica())
	}
	t0 := time.Now().Add(-2 * time.Second)
	r.Add("i-1", accModel, 10, 20)
	r.BusyStart("i-1", t0)
	r.BusyEnd("i-1", t0.Add(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if p, c := ledgerTokens(l); p != 10 || c != 20 || posts.Load() != 2 || r.Acked() != 1 || r.Unacked() != 0 {
		t.Fatalf("ledger %d %d after %d posts, %d acked, %d unacked", p, c, posts.Load(), r.Acked(), r.Unacked())
	}
	want := `
# HELP tidegpu_gateway_usage_batches_total Usage batches sent to the operator, by outcome (acked, duplicate, failed).
# TYPE tidegpu_gateway_usage_batches_total counter
tidegpu_gateway_usage_batches_total{outcome="acked"} 0
tidegpu_gateway_usage_batches_total{outcome="duplicate"} 1
tidegpu_gateway_usage_batches_total{outcome="failed"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricReportBatches); err != nil {
		t.Fatal(err)
	}
	rep := l.Report("chat", cost.Window{To: time.Now().Add(time.Hour)})
	if len(rep) != 1 || rep[0].BusyHours*3600 < 0.999 || rep[0].BusyHours*3600 > 1.001 {
		t.Fatalf("busy time %v h, want 1 s", rep)
	}
	// Nothing gathered: a flush sends nothing.
	if err := r.Flush(ctx); err != nil || posts.Load() != 2 {
		t.Fatalf("empty flush: %v, %d posts", err, posts.Load())
	}
}

// The operator unreachable at shutdown: Flush says the usage is lost.
func TestReporterFlushGivesUp(t *testing.T) {
	r, err := NewReporter(ReporterOptions{URL: "http://127.0.0.1:1", Name: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	r.Add("i-1", accModel, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := r.Flush(ctx); err == nil || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("err %v", err)
	}
}

func TestReporterOptionsChecked(t *testing.T) {
	for _, tc := range []struct {
		o    ReporterOptions
		want string
	}{
		{ReporterOptions{URL: "operator:9090"}, "want the operator's admin API"},
		{ReporterOptions{URL: "http://10.0.0.5:9090"}, "needs a token"},
		{ReporterOptions{URL: "http://op:9090/api"}, "want the operator's admin API"},
	} {
		if _, err := NewReporter(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v", tc.o, err)
		}
	}
	for _, ok := range []ReporterOptions{{URL: "http://127.0.0.1:9090"}, {URL: "http://[::1]:9090"}, {URL: "http://localhost:9090"},
		{URL: "http://op.tidegpu-system:9090", Token: "t"}} {
		if _, err := NewReporter(ok); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// The ingest endpoint refuses bad batches with the reason.
func TestIngestHTTP(t *testing.T) {
	in := NewIngest(newTestLedger(t, "i-1"), nil, nil)
	var ready atomic.Bool
	in.Gate(ready.Load)
	srv := httptest.NewServer(in)
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"replica":"r","seq":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Fatalf("not ready: %d %v", resp.StatusCode, resp.Header)
	}
	ready.Store(true)
	resp, err = http.Post(srv.URL, "application/json", strings.NewReader(`{"replica":"r","seq":0}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !bytes.Contains(b, []byte("seq")) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	resp, err = http.Post(srv.URL, "application/json", strings.NewReader(`{"replica":"r","seq":1}`))
	if err != nil {
		t.Fatal(err)
	}
	var ack Ack
	_ = json.NewDecoder(resp.Body).Decode(&ack)
	resp.Body.Close()
	if resp.StatusCode != 200 || ack.Replica != "r" || ack.Seq != 1 {
		t.Fatalf("%d %+v", resp.StatusCode, ack)
	}
}
