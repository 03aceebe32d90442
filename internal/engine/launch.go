package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/placement"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// launched is the outcome of one launch.
type launched struct {
	in  provider.Instance
	err error
	// steered: the capacity memory took the refusal, so the next round
	// places elsewhere and it holds no launch back.
	steered bool
}

// launch performs the decision's launches and returns the accepted
// instances; it forgets the lost instances they replace, and folds the
// failures into the launch backoff and the CapacityAvailable condition.
func (p *Pool) launch(ctx context.Context, spec *tidev1.TidePoolSpec, ls []Launch, lost []string) []provider.Instance {
	p.mu.Lock()
	p.steered = false
	p.mu.Unlock()
	if len(ls) == 0 {
		return nil
	}
	p.mu.Lock()
	for _, id := range lost {
		delete(p.lost, id)
	}
	p.mu.Unlock()
	outs := make([]launched, len(ls))
	p.each(len(ls), func(i int) { outs[i] = p.launchOne(ctx, spec, ls[i]) })
	var ok []provider.Instance
	for _, o := range outs {
		if o.err == nil {
			ok = append(ok, o.in)
		}
	}
	p.foldLaunches(outs)
	return ok
}

// launchOne launches one instance with the offering's retry token and
// tells the capacity memory what the provider said.
func (p *Pool) launchOne(ctx context.Context, spec *tidev1.TidePoolSpec, l Launch) launched {
	d := p.deps
	key := string(l.Market) + "|" + l.Zone + "|" + l.InstanceType
	req := provider.LaunchRequest{Pool: p.name, Spec: spec, Token: p.takeToken(key), Market: l.Market,
		Zone: l.Zone, InstanceType: l.InstanceType}
	in, err := d.provider.Launch(ctx, req)
	p.settleToken(key, req.Token, err)
	p.mu.Lock()
	mem := p.capMem
	p.mu.Unlock()
	out := launched{in: in, err: err}
	out.steered = mem != nil && l.Zone != "" &&
		mem.Observe(placement.Key{Zone: l.Zone, InstanceType: l.InstanceType, Market: l.Market}, err)
	if err != nil {
		d.metrics.launchFailures.WithLabelValues(p.name).Inc()
		d.recorder.Eventf(events.TypeWarning, "LaunchFailed", p.name, "", "launch failed (%s): %v", l.Reason, err)
		return out
	}
	note := ""
	if l.Replacing != "" {
		note = " replacing " + l.Replacing
	}
	d.metrics.launches.WithLabelValues(p.name, string(in.Market)).Inc()
	d.recorder.Eventf(events.TypeNormal, "Launched", p.name, in.ID, "launched %s at %s (%s market)%s: %s", in.ID, orDash(in.Address), in.Market, note, l.Reason)
	return out
}

// foldLaunches backs launches off after failures the capacity memory did
// not take (a refusal it took is placed elsewhere at once), and sets the
// CapacityAvailable condition.
func (p *Pool) foldLaunches(outs []launched) {
	var failures, steered int
	var lastErr error
	for _, o := range outs {
		if o.steered {
			steered++
		}
		if o.err != nil {
			failures++
			lastErr = o.err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.steered = steered > 0
	if failures > steered {
		p.launchFails++
		p.blocked = p.deps.clock.Now().Add(backoff(p.launchFails))
	}
	if failures == 0 {
		p.launchFails = 0
		p.blocked = time.Time{}
		p.setConditionLocked(tidev1.ConditionCapacityAvailable, metav1.ConditionTrue, "Launched", "the last launches succeeded")
		return
	}
	reason := "LaunchFailed"
	if provider.IsInsufficientCapacity(lastErr) {
		reason = "InsufficientCapacity"
	}
	p.setConditionLocked(tidev1.ConditionCapacityAvailable, metav1.ConditionFalse, reason, lastErr.Error())
}

// retryToken is a launch token kept for a retry.
type retryToken struct {
	token string
	at    time.Time
}

// retryTokenTTL bounds how long a token is reused (EC2 honours one for
// 24 h; a retry comes within seconds or minutes).
const retryTokenTTL = 10 * time.Minute

// takeToken returns the token to launch on an offering with: one kept from
// an unanswered launch there, else a new one.
func (p *Pool) takeToken(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.retryTokens[key]; ok {
		delete(p.retryTokens, key)
		if p.deps.clock.Since(t.at) < retryTokenTTL {
			return t.token
		}
	}
	return newToken()
}

// settleToken keeps the token when the launch failed without a definite
// "no" (a capacity refusal is definite: nothing was made).
func (p *Pool) settleToken(key, token string, err error) {
	if err == nil || provider.IsInsufficientCapacity(err) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.retryTokens == nil {
		p.retryTokens = map[string]retryToken{}
	}
	if _, ok := p.retryTokens[key]; !ok {
		p.retryTokens[key] = retryToken{token: token, at: p.deps.clock.Now()}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
