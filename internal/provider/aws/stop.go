package aws

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// Warm standby: Stop and Start of on-demand instances, keeping their EBS
// root volume (image and model on disk). What EC2 documents and this file
// relies on:
//
//   - StopInstances (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StopInstances.html)
//     moves running → stopping → stopped; stopping an instance that is
//     already stopping or stopped succeeds again (the answer's
//     PreviousState says so); a pending instance ("has never reached the
//     'running' state"), a shutting-down or terminated one fails with
//     IncorrectInstanceState
//     (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html).
//   - A spot instance of a one-time request cannot be stopped
//     (UnsupportedOperation); only persistent spot requests can be
//     (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/stopping-a-spot-instance.html).
//     Launch makes one-time spot requests, so Stop refuses spot up front.
//   - StartInstances (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StartInstances.html)
//     moves stopped → pending → running; starting a pending or running
//     instance succeeds again; a stopping one fails with
//     IncorrectInstanceState until it is stopped.
//   - A stopped instance loses its public IPv4 address and gets a new one
//     when it starts; its private address stays
//     (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-instance-addressing.html#concepts-public-addresses).
//   - The lifecycle: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html.
//
// The credentials additionally need ec2:StopInstances and ec2:StartInstances.

// EC2 error codes of stop and start.
const (
	codeIncorrectInstanceState = "IncorrectInstanceState"
	codeUnsupportedOperation   = "UnsupportedOperation"
)

var _ provider.Stopper = (*Provider)(nil)

// ErrNotFound is returned (wrapped) by Stop and Start for an instance EC2
// does not know.
var ErrNotFound = errors.New("instance not found")

// ErrIncorrectState is returned (wrapped, with EC2's IncorrectInstanceState
// underneath when EC2 said so) when the instance's state does not allow the
// operation now: stopping a pending or terminated instance, starting one
// that is still stopping. Starting a stopping instance works once it is
// stopped.
var ErrIncorrectState = errors.New("instance is not in a state that allows this operation")

// NotStoppableError is provider.NotStoppableError: a spot instance, which
// EC2 does not stop, or a stop EC2 refused as unsupported. Kind is the
// instance's market.
type NotStoppableError = provider.NotStoppableError

// described is one instance as DescribeInstances reports it, with the
// ownership its tags say.
type described struct {
	raw   types.Instance
	owner owner
}

func (d described) state() types.InstanceStateName {
	if d.raw.State == nil {
		return ""
	}
	return d.raw.State.Name
}

func (d described) market() provider.Market {
	if d.raw.InstanceLifecycle == types.InstanceLifecycleTypeSpot {
		return provider.MarketSpot
	}
	return provider.MarketOnDemand
}

// describeOwned1 asks EC2 about one instance (through the same client,
// rate limit and retries as every call) and checks that it is ours.
func (p *Provider) describeOwned1(ctx context.Context, id string) (described, error) {
	out, err := p.client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		if errorCode(err) == codeInstanceNotFound {
			return described{}, fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		return described{}, classify(err, "", "", "")
	}
	for _, r := range out.Reservations {
		for _, raw := range r.Instances {
			if aws.ToString(raw.InstanceId) != id {
				continue
			}
			o := ownerFromTags(raw.Tags)
			if !o.ours(p.opts.Cluster) {
				return described{}, fmt.Errorf("%w (cluster %q)", ErrNotOwned, p.opts.Cluster)
			}
			return described{raw: raw, owner: o}, nil
		}
	}
	return described{}, ErrNotFound
}

// stopAPIError maps an error of StopInstances or StartInstances: throttling
// to *provider.ThrottledError, IncorrectInstanceState to ErrIncorrectState,
// InvalidInstanceID.NotFound to ErrNotFound.
func stopAPIError(err error) error {
	switch errorCode(err) {
	case codeIncorrectInstanceState:
		return fmt.Errorf("%w: %w", ErrIncorrectState, err)
	case codeInstanceNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return classify(err, "", "", "")
}

// Stop implements provider.Stopper with StopInstances. Only on-demand
// instances are stopped: a spot instance is refused with a
// *NotStoppableError before EC2 is asked. Stopping an instance that is
// already stopping or stopped is not an error (and makes no StopInstances
// call). An instance whose tags name another installation is refused with
// ErrNotOwned.
func (p *Provider) Stop(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("stopping: %w: empty instance id", ErrInvalidRequest)
	}
	d, err := p.describeOwned1(ctx, id)
	if err != nil {
		return fmt.Errorf("stopping %s in %s: %w", id, p.opts.Region, err)
	}
	if m := d.market(); m != provider.MarketOnDemand {
		return fmt.Errorf("stopping in %s: %w", p.opts.Region,
			&NotStoppableError{ID: id, Kind: string(m), Reason: "EC2 does not stop one-time spot instances; terminate it instead"})
	}
	switch d.state() {
	case types.InstanceStateNameStopping, types.InstanceStateNameStopped:
		return nil
	}
	_, err = p.client.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
	p.invalidate("")
	if err != nil {
		if errorCode(err) == codeUnsupportedOperation {
			return fmt.Errorf("stopping in %s: %w", p.opts.Region,
				&NotStoppableError{ID: id, Kind: string(d.market()), Reason: "EC2 refused the stop", Err: err})
		}
		return fmt.Errorf("stopping %s (%s) in %s: %w", id, d.state(), p.opts.Region, stopAPIError(err))
	}
	return nil
}

// Start implements provider.Stopper with StartInstances and returns the
// instance as EC2 accepted it: Pending (or Running when it already was).
// Its address is the one known now: with a private serving address it is
// known at once; a public one is new after every start and appears in List
// once EC2 assigns it. Starting a pending or running instance is not an
// error (and makes no StartInstances call); starting one that is still
// stopping fails with ErrIncorrectState (try again once it is stopped).
func (p *Provider) Start(ctx context.Context, id string) (provider.Instance, error) {
	if id == "" {
		return provider.Instance{}, fmt.Errorf("starting: %w: empty instance id", ErrInvalidRequest)
	}
	d, err := p.describeOwned1(ctx, id)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("starting %s in %s: %w", id, p.opts.Region, err)
	}
	now := p.clock.Now()
	switch d.state() {
	case types.InstanceStateNamePending, types.InstanceStateNameRunning:
		inst, _ := instanceFrom(d.raw, d.owner, now)
		return inst, nil
	}
	out, err := p.client.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
	p.invalidate("")
	if err != nil {
		return provider.Instance{}, fmt.Errorf("starting %s (%s) in %s: %w", id, d.state(), p.opts.Region, stopAPIError(err))
	}
	raw := d.raw
	raw.State = &types.InstanceState{Name: types.InstanceStateNamePending}
	for _, c := range out.StartingInstances {
		if aws.ToString(c.InstanceId) == id && c.CurrentState != nil {
			raw.State = c.CurrentState
		}
	}
	// The public address from before the stop is gone for good.
	raw.PublicIpAddress = nil
	inst, live := instanceFrom(raw, d.owner, now)
	if !live {
		return provider.Instance{}, fmt.Errorf("starting %s in %s: %w: StartInstances answered %s", id, p.opts.Region, ErrIncorrectState, stateName(raw))
	}
	return inst, nil
}
