// Package notify delivers alerts to people through webhooks: a budget
// alert event (engine.AlertBudget: a threshold of the month's budget
// crossed, or the forecast overrun) becomes one POST to every sink, in
// Slack's incoming-webhook JSON ({"text": ...},
// https://api.slack.com/messaging/webhooks) or as generic JSON signed with
// HMAC-SHA256 over the timestamp and the body (the scheme GitHub and
// Stripe webhooks use: the receiver recomputes it with the shared secret).
// A delivery is retried with exponential backoff until the sink answers
// 2xx or the attempts run out; every attempt of one alert carries the same
// X-Tidegpu-Delivery id, so a receiver that saw it already can drop it.
// Webhook URLs (Slack's carry their token) and the secret are never
// logged: logs name the sink by scheme and host only.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tidegpu/tidegpu/internal/events"
)

// Formats of a sink.
const (
	FormatSlack = "slack"
	FormatJSON  = "json"
)

// Headers of a delivery.
const (
	HeaderDelivery  = "X-Tidegpu-Delivery"
	HeaderTimestamp = "X-Tidegpu-Timestamp"
	// HeaderSignature is "sha256=" + hex(HMAC-SHA256(secret, timestamp + "." + body)).
	HeaderSignature = "X-Tidegpu-Signature"
)

// Sink is one webhook.
type Sink struct {
	URL    string
	Format string // FormatSlack or FormatJSON
	// Secret signs FormatJSON deliveries; empty sends them unsigned.
	Secret []byte
}

// Options configure a Notifier.
type Options struct {
	Sinks []Sink
	// Reasons are the event reasons delivered (default: the budget alert).
	Reasons []string
	// Attempts per delivery (default 6) and the first backoff (default 1s,
	// doubling, at most 1 min).
	Attempts int
	Backoff  time.Duration
	Client   *http.Client
	Logger   *slog.Logger
}

// DefaultReason is the event reason notifiers deliver by default.
const DefaultReason = "BudgetAlert"

// ReasonCostReport is the scheduled cost report's event reason (package
// costreport), delivered as type "tidegpu.report".
const ReasonCostReport = "CostReport"

// Notifier delivers events to its sinks.
type Notifier struct {
	o       Options
	reasons map[string]bool
	log     *slog.Logger
}

// New checks the sinks: each URL http(s) with a host, each format known.
func New(o Options) (*Notifier, error) {
	var errs []error
	for i, s := range o.Sinks {
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("alert webhook %d: want an http(s)://host/... URL", i+1))
		}
		if s.Format != FormatSlack && s.Format != FormatJSON {
			errs = append(errs, fmt.Errorf("alert webhook %d: format %q: want %s or %s", i+1, s.Format, FormatSlack, FormatJSON))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if o.Attempts <= 0 {
		o.Attempts = 6
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if len(o.Reasons) == 0 {
		o.Reasons = []string{DefaultReason}
	}
	n := &Notifier{o: o, reasons: map[string]bool{}, log: o.Logger}
	for _, r := range o.Reasons {
		n.reasons[r] = true
	}
	return n, nil
}

// Run delivers the events of ch until ctx ends or ch closes; deliveries
// run one at a time, in order.
func (n *Notifier) Run(ctx context.Context, ch <-chan events.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-ch:
			if !ok {
				return
			}
			if n.reasons[e.Reason] {
				for _, s := range n.o.Sinks {
					n.deliver(ctx, s, e)
				}
			}
		}
	}
}

// Body is a FormatJSON delivery.
type Body struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Pool    string    `json:"pool,omitempty"`
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
}

// Payload renders e for a sink's format. Pure.
func Payload(format string, e events.Event) []byte {
	var v any
	// Tenants' budget alerts and cost reports are about no one pool.
	subject, icon, typ := "", ":warning:", "tidegpu.alert"
	if e.Pool != "" {
		subject = " for pool " + e.Pool
	}
	if e.Reason == ReasonCostReport {
		icon, typ = ":bar_chart:", "tidegpu.report"
	}
	if format == FormatSlack {
		v = struct {
			Text string `json:"text"`
		}{fmt.Sprintf("%s TideGPU %s%s: %s", icon, e.Reason, subject, e.Message)}
	} else {
		v = Body{Type: typ, Reason: e.Reason, Pool: e.Pool, Message: e.Message, Time: e.Time.UTC()}
	}
	b, _ := json.Marshal(v)
	return b
}

// Sign is the signature header value of body at ts. Pure.
func Sign(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// DeliveryID names one alert across the attempts of its delivery. Pure.
func DeliveryID(e events.Event) string {
	h := sha256.Sum256([]byte(e.Pool + "\x00" + e.Reason + "\x00" + e.Message + "\x00" + e.Time.UTC().Format(time.RFC3339Nano)))
	return hex.EncodeToString(h[:12])
}

func (n *Notifier) deliver(ctx context.Context, s Sink, e events.Event) {
	body := Payload(s.Format, e)
	id := DeliveryID(e)
	name := sinkName(s.URL)
	wait := n.o.Backoff
	for attempt := 1; ; attempt++ {
		err := n.post(ctx, s, id, body)
		if err == nil {
			n.log.Info("alert delivered", "sink", name, "pool", e.Pool, "reason", e.Reason, "attempt", attempt)
			return
		}
		if attempt >= n.o.Attempts || ctx.Err() != nil {
			n.log.Warn("alert not delivered", "sink", name, "pool", e.Pool, "reason", e.Reason, "attempts", attempt, "err", err)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, time.Minute)
	}
}

func (n *Notifier) post(ctx context.Context, s Sink, id string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("bad request") // the URL is not repeated: it may hold a token
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderDelivery, id)
	if s.Format == FormatJSON && len(s.Secret) > 0 {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req.Header.Set(HeaderTimestamp, ts)
		req.Header.Set(HeaderSignature, Sign(s.Secret, ts, body))
	}
	resp, err := n.o.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err // without the URL
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// sinkName is what logs say of a sink: scheme and host, never the path or
// query (a Slack webhook's path is its secret).
func sinkName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "webhook"
	}
	return u.Scheme + "://" + u.Host
}
