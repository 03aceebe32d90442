package engine

import (
	"errors"
	"testing"
	"time"

	fakeclock "k8s.io/utils/clock/testing"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// A launch that failed without a definite answer is retried with the same
// idempotency token (on the same offering, within the TTL); a capacity
// refusal or a success is not.
func TestRetryTokens(t *testing.T) {
	clk := fakeclock.NewFakeClock(t0)
	p := newPool("p", &deps{clock: clk})
	const key = "spot|us-east-1a|p3.2xlarge"

	first := p.takeToken(key)
	p.settleToken(key, first, errors.New("timeout"))
	if got := p.takeToken(key); got != first {
		t.Fatalf("retry after a timeout used %q, want the first token %q", got, first)
	}
	if got := p.takeToken(key); got == first {
		t.Fatal("a token was reused twice")
	}

	second := p.takeToken(key)
	p.settleToken(key, second, &provider.InsufficientCapacityError{Zone: "us-east-1a"})
	if got := p.takeToken(key); got == second {
		t.Fatal("token reused after a capacity refusal (nothing was made)")
	}

	third := p.takeToken(key)
	p.settleToken(key, third, errors.New("reset"))
	if got := p.takeToken("on-demand|us-east-1a|p3.2xlarge"); got == third {
		t.Fatal("token reused on another offering (EC2 would answer IdempotentParameterMismatch)")
	}
	clk.Step(retryTokenTTL + time.Second)
	if got := p.takeToken(key); got == third {
		t.Fatal("token reused after its TTL")
	}
}
