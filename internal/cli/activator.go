package cli

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/tidegpu/tidegpu/internal/gateway"
)

// addActivatorFlags adds the bounds of the gateway's activator, which
// holds requests for a pool at zero while it wakes (up and gateway).
func addActivatorFlags(f *pflag.FlagSet, queue *int, wait *time.Duration) {
	f.IntVar(queue, "activator-queue", gateway.DefaultActivatorQueue,
		"requests held per pool while a pool at zero wakes; more are answered 429 with Retry-After")
	f.DurationVar(wait, "activator-wait", gateway.DefaultActivatorWait,
		"how long a held request waits for the pool's first instance before a 503 with Retry-After")
}
