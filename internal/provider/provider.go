// Package provider defines the seam between the pool engine and whatever
// runs instances: a cloud (AWS EC2, Tencent CVM), the spot-market simulator,
// or OS processes on this machine. Only implementations of Provider know a
// cloud; the engine sees instances as plain data.
package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/market"
)

// Market is the purchasing option of an instance (market.Market).
type Market = market.Market

// Markets.
const (
	MarketSpot     = market.Spot
	MarketOnDemand = market.OnDemand
)

// MarketFor maps the seed's instanceChargeType to a Market (spot unless the
// charge type says on-demand).
func MarketFor(chargeType string) Market { return market.For(chargeType) }

// State is the provider-side lifecycle state of an instance. Whether its
// inference server answers is the engine's business (readiness probes), not
// the provider's.
type State string

// States. Pending and Running count as "running" for the pool's watermarks,
// like the seed's RUNNING, PENDING and STARTING.
const (
	// StatePending: accepted by the provider, not yet running.
	StatePending State = "Pending"
	// StateRunning: running; Address is set once known.
	StateRunning State = "Running"
	// StateTerminating: termination requested, not yet gone.
	StateTerminating State = "Terminating"
	// StateStopping: a stop was requested; the instance is shutting down
	// but keeps its disk (see Stopper).
	StateStopping State = "Stopping"
	// StateStopped: the instance is stopped; it keeps its disk (image and
	// model), costs only its storage, serves nothing, and can be started
	// again (see Stopper). Stopped and Stopping instances do not count as
	// running.
	StateStopped State = "Stopped"
)

// Instance is one instance as a provider reports it.
type Instance struct {
	// ID is unique within the provider.
	ID string `json:"id"`
	// Pool is the name of the pool that owns the instance (from the
	// provider's ownership tags).
	Pool string `json:"pool"`
	// Zone, InstanceType and Market describe the offering it runs on.
	Zone         string `json:"zone,omitempty"`
	InstanceType string `json:"instanceType,omitempty"`
	Market       Market `json:"market,omitempty"`
	// State is the provider-side lifecycle state.
	State State `json:"state"`
	// PrivateIP and PublicIP as the provider reports them.
	PrivateIP string `json:"privateIP,omitempty"`
	PublicIP  string `json:"publicIP,omitempty"`
	// Address is host:port of the inference server, empty until known.
	Address string `json:"address,omitempty"`
	// LaunchedAt is when the launch was accepted.
	LaunchedAt time.Time `json:"launchedAt"`
	// InterruptAt is set when the provider announced it will reclaim the
	// instance at that time (a spot interruption notice).
	InterruptAt *time.Time `json:"interruptAt,omitempty"`
}

// LaunchRequest asks for one instance for a pool.
type LaunchRequest struct {
	// Pool names the owning pool; providers tag the instance with it.
	Pool string
	// Spec is the pool's spec (instance type, image, network, local command).
	Spec *tidev1.TidePoolSpec
	// Token makes the launch idempotent: a provider that sees the same
	// token twice returns the first instance instead of making a second.
	Token string
	// Zone, InstanceType and Market choose the offering; empty means the
	// spec's own.
	Zone         string
	InstanceType string
	Market       Market
	// UserData is the instance's raw user data (cloud-init), rendered from
	// spec.bootstrap; the cloud providers base64-encode it. It can hold the
	// pool's notice token: never log it.
	UserData []byte
}

// Provider launches, lists and terminates instances.
type Provider interface {
	// Name is the provider's name as written in TidePoolSpec.Provider.
	Name() string
	// Launch starts one instance and returns it as accepted (usually
	// Pending). It must not block until the instance serves.
	Launch(ctx context.Context, req LaunchRequest) (Instance, error)
	// Terminate asks for the instance to go away. Terminating an instance
	// that is already gone is not an error.
	Terminate(ctx context.Context, id string) error
	// List returns the live instances owned by pool ("" for every pool).
	List(ctx context.Context, pool string) ([]Instance, error)
}

// EventType names what happened to an instance.
type EventType string

// Event types a provider reports.
const (
	// EventChanged: the instance changed state or address.
	EventChanged EventType = "Changed"
	// EventGone: the instance vanished (exited, killed, reclaimed).
	EventGone EventType = "Gone"
	// EventInterruption: the provider announced a reclaim (InterruptAt set).
	EventInterruption EventType = "Interruption"
)

// Event is a change a provider observed on its own, so that the engine can
// react at once instead of waiting for its next look.
type Event struct {
	Type     EventType
	Instance Instance
	Message  string
}

// EventSource is implemented by providers that report changes as they happen.
type EventSource interface {
	// Events delivers instance events until the provider is closed.
	Events() <-chan Event
}

// Reclaimer is implemented by simulated providers (local, sim) to play the
// cloud's part in a spot reclaim: with notice > 0 an EventInterruption is
// reported at once and the instance is killed when the notice runs out; with
// 0 it is killed at once.
type Reclaimer interface {
	Reclaim(ctx context.Context, id string, notice time.Duration) error
}

// Stopper is implemented by providers that can stop an instance and start
// it again later, keeping its disk: a warm standby, like the Stopped
// instances of an EC2 Auto Scaling warm pool
// (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-warm-pools.html)
// or Tencent CVM's StopInstances with StoppedMode STOP_CHARGING. A started
// standby instance serves after a warm start (boot, and the model loaded
// from its own disk) instead of a cold one. Only on-demand instances are
// stopped. List reports stopped instances with StateStopped (or
// StateStopping on the way), so that they survive a controller restart.
type Stopper interface {
	// Stop asks for the instance to stop, keeping its disk. Stopping an
	// instance that is already stopped or stopping is not an error.
	Stop(ctx context.Context, id string) error
	// Start asks for a stopped instance to run again and returns it as
	// accepted (usually Pending; its address may change). Starting an
	// instance that is already running is not an error.
	Start(ctx context.Context, id string) (Instance, error)
}

// ErrNotSupported is returned by an optional operation the provider lacks,
// such as a simulated reclaim on a real cloud.
var ErrNotSupported = errors.New("not supported by this provider")

// InsufficientCapacityError says an offering has no capacity now.
type InsufficientCapacityError struct {
	Zone, InstanceType string
	Market             Market
	Err                error
}

func (e *InsufficientCapacityError) Error() string {
	return fmt.Sprintf("insufficient %s capacity for %s in %s: %v", e.Market, e.InstanceType, e.Zone, e.Err)
}

func (e *InsufficientCapacityError) Unwrap() error { return e.Err }

// IsInsufficientCapacity reports whether err is or wraps an InsufficientCapacityError.
func IsInsufficientCapacity(err error) bool {
	var ice *InsufficientCapacityError
	return errors.As(err, &ice)
}

// ThrottledError says the provider's API refused the call for its rate.
type ThrottledError struct{ Err error }

func (e *ThrottledError) Error() string { return fmt.Sprintf("throttled: %v", e.Err) }

func (e *ThrottledError) Unwrap() error { return e.Err }

// IsThrottled reports whether err is or wraps a ThrottledError.
func IsThrottled(err error) bool {
	var te *ThrottledError
	return errors.As(err, &te)
}

// Price sources, so that every price shown says where it came from (the
// constants of package market).
const (
	PriceCatalog  = market.PriceCatalog  // the embedded offline table
	PriceLive     = market.PriceLive     // the provider's price API, just now
	PriceOverride = market.PriceOverride // the pool's own setting
	PriceFallback = market.PriceFallback // no spot price known: the on-demand price stands in
)

// Offering is one way to run an instance: type x zone x market, with its
// price per hour and whether capacity is there now (market.Offering).
type Offering = market.Offering

// OfferingSource is implemented by providers that can list offerings for a
// pool's spec (instance types x zones x markets) with live prices.
type OfferingSource interface {
	Offerings(ctx context.Context, spec *tidev1.TidePoolSpec) ([]Offering, error)
}

// NotStoppableError says that one instance cannot be stopped (and kept as
// a warm standby) while the provider can stop others: a spot instance,
// which EC2 does not stop, or one whose billing cannot stop (a prepaid CVM
// instance). It unwraps to ErrNotSupported and the cloud's answer, if any,
// so a caller can terminate that instance instead.
type NotStoppableError struct {
	ID string
	// Kind is what the instance is: its market or its charge type.
	Kind string
	// Reason says why, for people.
	Reason string
	// Err is the cloud's answer when it refused; nil when refused before
	// asking.
	Err error
}

func (e *NotStoppableError) Error() string {
	s := fmt.Sprintf("instance %s (%s) cannot be stopped: %s", e.ID, e.Kind, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrNotSupported and the cloud's error, if any.
func (e *NotStoppableError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrNotSupported}
	}
	return []error{ErrNotSupported, e.Err}
}

// Unwrapper is implemented by decorators: a provider around another one
// (metering, counting, a different event feed). Unwrap returns the
// provider it decorates.
type Unwrapper interface {
	Unwrap() Provider
}

// As finds an optional capability of p (EventSource, Reclaimer,
// OfferingSource, Stopper, or a concrete provider type such as
// *local.Provider) through any decorators around it, as errors.As finds an
// error in a chain. Walking from p inwards through Unwrap, it returns the
// first layer that
//
//   - implements T itself, or
//   - has a method As(target any) bool that, given a *T, sets it and
//     returns true.
//
// So a decorator implements itself only what it truly adds, whatever it
// decorates. One that intercepts an optional method of the provider inside
// (to meter it, say) does so in its As method instead: it looks the
// capability up in what it decorates (with As), and only when that has it
// returns a small adapter that does the intercepting and calls on. When it
// does not, As says false and the search goes on inwards, finds nothing,
// and the capability is absent: a decorator never claims a capability its
// provider lacks. Always use As, never a type assertion, on a Provider
// that may be decorated.
func As[T any](p Provider) (T, bool) {
	for p != nil {
		if t, ok := p.(T); ok {
			return t, true
		}
		if a, ok := p.(interface{ As(target any) bool }); ok {
			var t T
			if a.As(&t) {
				return t, true
			}
		}
		u, ok := p.(Unwrapper)
		if !ok {
			break
		}
		p = u.Unwrap()
	}
	var zero T
	return zero, false
}
