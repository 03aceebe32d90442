package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegpu/tidegpu/internal/events"
)

// receiver is a webhook endpoint that fails its first `fail` requests.
type receiver struct {
	*httptest.Server
	mu    sync.Mutex
	fail  int
	got   []*http.Request
	body  [][]byte
	done  chan struct{}
	count int
}

func newReceiver(t *testing.T, fail, want int) *receiver {
	r := &receiver{fail: fail, done: make(chan struct{}), count: want}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, req)
		r.body = append(r.body, b)
		if r.fail > 0 {
			r.fail--
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if r.count--; r.count == 0 {
			close(r.done)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func alert(msg string) events.Event {
	return events.Event{Seq: 1, Time: time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC), Type: "Warning", Reason: DefaultReason, Pool: "chat", Message: msg}
}

func TestDelivery(t *testing.T) {
	// Slack's incoming webhooks take {"text": ...}
	// (https://api.slack.com/messaging/webhooks).
	slack := newReceiver(t, 2, 1) // fails twice: delivered on the third attempt
	hook := newReceiver(t, 0, 1)
	var logs bytes.Buffer
	secret := []byte("s3cret-value")
	n, err := New(Options{Sinks: []Sink{{URL: slack.URL + "/services/T000/B000/XXXXTOKEN", Format: FormatSlack}, {URL: hook.URL + "/hook", Format: FormatJSON, Secret: secret}},
		Backoff: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan events.Event, 3)
	ch <- events.Event{Reason: "Launched", Pool: "chat", Message: "not an alert"}
	ch <- alert("pool chat crossed 50 % of its 100 USD budget for 2026-12: spent 50 USD (50 %)")
	close(ch)
	n.Run(context.Background(), ch)
	for _, r := range []*receiver{slack, hook} {
		select {
		case <-r.done:
		default:
			t.Fatalf("a sink got %d requests and no success", len(r.got))
		}
	}
	// Slack: three attempts, one delivery id, the text names the pool.
	if len(slack.got) != 3 || slack.got[0].Header.Get(HeaderDelivery) == "" || slack.got[0].Header.Get(HeaderDelivery) != slack.got[2].Header.Get(HeaderDelivery) {
		t.Fatalf("slack attempts %d, delivery ids %q / %q", len(slack.got), slack.got[0].Header.Get(HeaderDelivery), slack.got[len(slack.got)-1].Header.Get(HeaderDelivery))
	}
	var text struct{ Text string }
	if json.Unmarshal(slack.body[2], &text) != nil || !strings.Contains(text.Text, "pool chat") || !strings.Contains(text.Text, "50 %") {
		t.Fatalf("slack body %s", slack.body[2])
	}
	// Generic JSON: the signature verifies with the secret.
	req := hook.got[0]
	if want := Sign(secret, req.Header.Get(HeaderTimestamp), hook.body[0]); req.Header.Get(HeaderSignature) != want {
		t.Fatalf("signature %q, want %q", req.Header.Get(HeaderSignature), want)
	}
	if Sign([]byte("other"), req.Header.Get(HeaderTimestamp), hook.body[0]) == req.Header.Get(HeaderSignature) {
		t.Fatal("another secret gives the same signature")
	}
	var b Body
	if json.Unmarshal(hook.body[0], &b) != nil || b.Pool != "chat" || b.Reason != DefaultReason {
		t.Fatalf("json body %s", hook.body[0])
	}
	// Neither the Slack token in the URL path nor the secret is logged.
	if strings.Contains(logs.String(), "XXXXTOKEN") || strings.Contains(logs.String(), "s3cret") {
		t.Fatalf("a secret reached the logs:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "alert delivered") {
		t.Fatalf("no delivery logged:\n%s", logs.String())
	}
}

func TestGivesUpAfterItsAttempts(t *testing.T) {
	r := newReceiver(t, 100, 1)
	n, _ := New(Options{Sinks: []Sink{{URL: r.URL, Format: FormatJSON}}, Attempts: 3, Backoff: time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ch := make(chan events.Event, 1)
	ch <- alert("x")
	close(ch)
	n.Run(context.Background(), ch)
	if len(r.got) != 3 {
		t.Fatalf("%d attempts, want 3", len(r.got))
	}
}

func TestBadSinks(t *testing.T) {
	for _, s := range []Sink{{URL: "ftp://x/y", Format: FormatJSON}, {URL: "http:///nohost", Format: FormatJSON}, {URL: "https://hooks.example.com/x", Format: "teams"}} {
		if _, err := New(Options{Sinks: []Sink{s}}); err == nil || strings.Contains(err.Error(), s.URL) {
			t.Errorf("sink %+v: error %v (want one that does not repeat the URL)", s, err)
		}
	}
}

func TestPayloadAndID(t *testing.T) {
	e := alert("m")
	if !strings.HasPrefix(string(Payload(FormatSlack, e)), `{"text":`) {
		t.Errorf("slack payload %s", Payload(FormatSlack, e))
	}
	if DeliveryID(e) != DeliveryID(e) || DeliveryID(e) == DeliveryID(alert("other")) {
		t.Error("the delivery id must name one alert")
	}
}
