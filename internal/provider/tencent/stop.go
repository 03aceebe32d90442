package tencent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
	"github.com/tidegpu/tidegpu/internal/provider"
)

// Warm standby: Stop and Start of pay-as-you-go instances, keeping their
// cloud disks (image and model). What the CVM API documents and this file
// relies on:
//
//   - StopInstances (https://www.tencentcloud.com/document/api/213/33235):
//     only RUNNING instances; STOPPING, then STOPPED. StopType SOFT (the
//     default), HARD or SOFT_FIRST (soft, forced if that fails; what we
//     send). StoppedMode KEEP_CHARGING (the default) or STOP_CHARGING (what
//     we send), "only valid for some pay-as-you-go instances using cloud
//     disks"; others answer UnsupportedOperation.StoppedModeStopCharging.
//   - No charges when shut down
//     (https://www.tencentcloud.com/document/product/213/19922): CPU and
//     memory stop billing, disks and images do not; the CPU and memory are
//     not reserved (a start can meet no capacity) and the public IP is
//     released, so a started instance has a new one.
//   - StartInstances (https://www.tencentcloud.com/document/api/213/33236):
//     only STOPPED instances; STARTING, then RUNNING.
//   - Neither call is idempotent: the wrong state answers
//     UnsupportedOperation.InstanceState<STATE> (the error code lists of
//     both actions in tencentcloud-sdk-go cvm/v20170312/client.go). Stop and
//     Start make them so: an instance already stopping/stopped (or
//     starting/running) is left alone, and those codes, met in a race,
//     count as success.
//
// The API key needs cvm:StopInstances and cvm:StartInstances.

// Values sent with StopInstances.
const (
	stopTypeSoftFirst    = "SOFT_FIRST"
	stoppedModeNoCharges = "STOP_CHARGING"
)

// Error codes of StopInstances and StartInstances.
const (
	codeNotFound          = "InvalidInstanceId.NotFound"
	codeStopChargingNotOK = "UnsupportedOperation.StoppedModeStopCharging"
	codeStatePrefix       = "UnsupportedOperation.InstanceState"
)

var _ provider.Stopper = (*Provider)(nil)

// ErrNotFound is returned (wrapped) by Stop and Start for an instance the
// API does not know.
var ErrNotFound = errors.New("instance not found")

// ErrNotOwned is returned (wrapped) by Stop and Start for an instance that
// does not carry this cluster's ownership tags.
var ErrNotOwned = errors.New("instance is not owned by this installation")

// ErrIncorrectState is returned (wrapped, with the API's
// UnsupportedOperation.InstanceState* error underneath when the API said
// so) when the instance's state does not allow the operation now, such as
// starting an instance that is still STOPPING.
var ErrIncorrectState = errors.New("instance is not in a state that allows this operation")

// NotStoppableError is provider.NotStoppableError: a spot or prepaid
// instance, or one the API refused STOP_CHARGING for. Kind is the
// instance's charge type.
type NotStoppableError = provider.NotStoppableError

// stopParams is the StopInstances request body.
type stopParams struct {
	InstanceIds []string `json:"InstanceIds"`
	StopType    string   `json:"StopType,omitempty"`
	StoppedMode string   `json:"StoppedMode,omitempty"`
}

// startParams is the StartInstances request body.
type startParams struct {
	InstanceIds []string `json:"InstanceIds"`
}

// describeOne asks the API about one instance (InstanceIds cannot be
// combined with Filters) and checks that it is ours.
func (p *Provider) describeOne(ctx context.Context, id string) (cvmInstance, error) {
	body, err := p.api.call(ctx, "DescribeInstances", describeParams{InstanceIds: []string{id}, Limit: 1})
	if err != nil {
		return cvmInstance{}, err
	}
	pg, err := parseDescribeInstances(body)
	if err != nil {
		return cvmInstance{}, fmt.Errorf("DescribeInstances %s: %w", id, err)
	}
	for _, c := range pg.Instances {
		if c.InstanceId != id {
			continue
		}
		if !owned(&c, p.opts.Cluster) {
			return cvmInstance{}, fmt.Errorf("%w (cluster %q)", ErrNotOwned, p.opts.Cluster)
		}
		return c, nil
	}
	return cvmInstance{}, ErrNotFound
}

// stateError maps an error of StopInstances or StartInstances: the
// instance unknown to ErrNotFound, a refusing state to ErrIncorrectState;
// anything else (throttling is a *provider.ThrottledError already) as is.
func stateError(err error) error {
	code := apiCode(err)
	switch {
	case code == codeNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case strings.HasPrefix(code, codeStatePrefix):
		return fmt.Errorf("%w: %w", ErrIncorrectState, err)
	}
	return err
}

// Stop implements provider.Stopper: StopInstances with StopType
// SOFT_FIRST and StoppedMode STOP_CHARGING. Only pay-as-you-go
// (POSTPAID_BY_HOUR) instances are stopped: spot and prepaid ones are
// refused with a *NotStoppableError before the API is asked. Stopping an
// instance that is already stopping or stopped is not an error.
func (p *Provider) Stop(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("tencent: stop: empty instance id")
	}
	c, err := p.describeOne(ctx, id)
	if err != nil {
		return fmt.Errorf("tencent: stopping %s: %w", id, err)
	}
	if c.InstanceChargeType != tidev1.ChargeOnDemand {
		return fmt.Errorf("tencent: stopping: %w", &NotStoppableError{ID: id, Kind: c.InstanceChargeType,
			Reason: "only pay-as-you-go (POSTPAID_BY_HOUR) instances stop without charges; terminate it instead"})
	}
	switch c.InstanceState {
	case cvmStopping, cvmStopped:
		return nil
	}
	_, err = p.api.call(ctx, "StopInstances", stopParams{
		InstanceIds: []string{id}, StopType: stopTypeSoftFirst, StoppedMode: stoppedModeNoCharges,
	})
	p.invalidate()
	switch code := apiCode(err); {
	case err == nil, code == codeStatePrefix+"Stopping", code == codeStatePrefix+"Stopped":
		return nil
	case code == codeStopChargingNotOK:
		return fmt.Errorf("tencent: stopping: %w", &NotStoppableError{ID: id, Kind: c.InstanceChargeType,
			Reason: "the API refused STOP_CHARGING", Err: err})
	}
	return fmt.Errorf("tencent: stopping %s (%s): %w", id, c.InstanceState, stateError(err))
}

// Start implements provider.Stopper with StartInstances and returns the
// instance as accepted: Pending (STARTING), or as it is when it was already
// starting or running (not an error). Its address appears in List once it
// runs and, when served by public IP, once the new public IP is assigned
// (the old one was released by the stop).
func (p *Provider) Start(ctx context.Context, id string) (provider.Instance, error) {
	if id == "" {
		return provider.Instance{}, errors.New("tencent: start: empty instance id")
	}
	c, err := p.describeOne(ctx, id)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("tencent: starting %s: %w", id, err)
	}
	now := p.clock.Now()
	switch c.InstanceState {
	case cvmPending, cvmStarting, cvmRunning:
		in, _ := toInstance(&c, now)
		return in, nil
	}
	_, err = p.api.call(ctx, "StartInstances", startParams{InstanceIds: []string{id}})
	p.invalidate()
	switch code := apiCode(err); {
	case err == nil, code == codeStatePrefix+"Starting", code == codeStatePrefix+"Running":
	default:
		return provider.Instance{}, fmt.Errorf("tencent: starting %s (%s): %w", id, c.InstanceState, stateError(err))
	}
	c.InstanceState = cvmStarting
	c.PublicIpAddresses = nil
	in, _ := toInstance(&c, now)
	return in, nil
}
