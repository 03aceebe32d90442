package aws

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// ErrNotOwned is returned (wrapped) by Terminate for an instance that
// exists but does not carry this installation's ownership tags.
var ErrNotOwned = errors.New("instance is not owned by this installation")

// listTimeout bounds one shared DescribeInstances round, which outlives the
// context of the caller that started it (others may be waiting on it).
const listTimeout = 2 * time.Minute

// liveStates are the instance states List asks EC2 for: every state but
// terminated. Stopping and stopped are warm standbys (see Stop), listed so
// that they survive a controller restart.
var liveStates = []string{
	string(types.InstanceStateNamePending),
	string(types.InstanceStateNameRunning),
	string(types.InstanceStateNameShuttingDown),
	string(types.InstanceStateNameStopping),
	string(types.InstanceStateNameStopped),
}

// snapshot is every live instance we own, as one DescribeInstances round
// saw it.
type snapshot struct {
	at    time.Time
	gen   uint64
	items []provider.Instance
}

// recentLaunch is an instance Launch returned that DescribeInstances may
// not show yet (EC2 is eventually consistent:
// https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html).
type recentLaunch struct {
	inst provider.Instance
	at   time.Time
}

// List returns the live instances of pool ("" for every pool). All pools
// share one DescribeInstances round per ListCacheTTL: concurrent callers
// wait for the same request, and later ones reuse its answer.
func (p *Provider) List(ctx context.Context, pool string) ([]provider.Instance, error) {
	all, err := p.current(ctx)
	if err != nil {
		if pool == "" {
			return nil, fmt.Errorf("listing instances in %s: %w", p.opts.Region, err)
		}
		return nil, fmt.Errorf("listing instances of pool %q in %s: %w", pool, p.opts.Region, err)
	}
	return filterPool(all, pool), nil
}

// ListAll returns every live instance this installation owns, each with the
// pool its tags name, for garbage collection of pools that no longer exist.
func (p *Provider) ListAll(ctx context.Context) ([]provider.Instance, error) {
	return p.List(ctx, "")
}

func filterPool(all []provider.Instance, pool string) []provider.Instance {
	out := make([]provider.Instance, 0, len(all))
	for _, in := range all {
		if pool == "" || in.Pool == pool {
			out = append(out, in)
		}
	}
	return out
}

// current is the latest snapshot merged with launches it does not show yet.
func (p *Provider) current(ctx context.Context) ([]provider.Instance, error) {
	items, err := p.snapshotItems(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	merged, keep := mergeRecent(items, p.recent, p.clock.Now(), p.opts.LaunchGrace)
	p.recent = keep
	return merged, nil
}

// mergeRecent adds to a snapshot the recent launches it lacks that are
// younger than grace, and returns the launches still worth remembering
// (neither seen in the snapshot nor expired). The result is sorted by
// launch time, then ID.
func mergeRecent(items []provider.Instance, recent map[string]recentLaunch, now time.Time, grace time.Duration) ([]provider.Instance, map[string]recentLaunch) {
	seen := make(map[string]bool, len(items))
	out := make([]provider.Instance, 0, len(items)+len(recent))
	for _, in := range items {
		seen[in.ID] = true
		out = append(out, in)
	}
	keep := make(map[string]recentLaunch, len(recent))
	for id, r := range recent {
		if seen[id] || now.Sub(r.at) >= grace {
			continue
		}
		keep[id] = r
		out = append(out, r.inst)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LaunchedAt.Equal(out[j].LaunchedAt) {
			return out[i].LaunchedAt.Before(out[j].LaunchedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, keep
}

// snapshotItems returns a fresh enough snapshot, fetching one if needed.
// Fetches are shared per generation: a caller that comes after an
// invalidation (launch, terminate) never joins a fetch started before it.
func (p *Provider) snapshotItems(ctx context.Context) ([]provider.Instance, error) {
	p.mu.Lock()
	if s := p.snap; s != nil && s.gen == p.gen && p.opts.ListCacheTTL > 0 && p.clock.Since(s.at) < p.opts.ListCacheTTL {
		p.mu.Unlock()
		return s.items, nil
	}
	gen := p.gen
	p.mu.Unlock()

	ch := p.flight.DoChan(strconv.FormatUint(gen, 10), func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listTimeout)
		defer cancel()
		started := p.clock.Now()
		items, err := p.describeOwned(fctx)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		if p.gen == gen {
			p.snap = &snapshot{at: started, gen: gen, items: items}
		}
		p.mu.Unlock()
		return items, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.([]provider.Instance), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// describeOwned is one DescribeInstances round, every page, for the
// instances tagged as this installation's and in a live state.
func (p *Provider) describeOwned(ctx context.Context) ([]provider.Instance, error) {
	in := &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: aws.String("tag:" + TagManagedBy), Values: []string{ManagedByValue}},
		{Name: aws.String("tag:" + TagCluster), Values: []string{p.opts.Cluster}},
		{Name: aws.String("instance-state-name"), Values: liveStates},
	}}
	pages := ec2.NewDescribeInstancesPaginator(p.client, in, func(o *ec2.DescribeInstancesPaginatorOptions) {
		o.Limit = p.opts.ListPageSize
		o.StopOnDuplicateToken = true
	})
	now := p.clock.Now()
	var out []provider.Instance
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify(err, "", "", "")
		}
		for _, r := range page.Reservations {
			for _, raw := range r.Instances {
				o := ownerFromTags(raw.Tags)
				// The filter asked for this already; check again rather
				// than trust it with instances that are not ours.
				if !o.ours(p.opts.Cluster) {
					continue
				}
				if inst, live := instanceFrom(raw, o, now); live {
					out = append(out, inst)
				}
			}
		}
	}
	return out, nil
}

// invalidate drops the cached snapshot (and a terminated instance's launch
// record), so that the next List asks EC2 again.
func (p *Provider) invalidate(terminated string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	p.snap = nil
	if terminated != "" {
		delete(p.recent, terminated)
	}
}

func (p *Provider) rememberLaunch(inst provider.Instance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recent[inst.ID] = recentLaunch{inst: inst, at: p.clock.Now()}
	p.gen++
	p.snap = nil
}

// Terminate asks EC2 to terminate the instance. An instance that is
// already gone, or that EC2 does not know, is not an error. An instance
// that is not among our live ones is looked up first and left alone unless
// its tags say it is ours (ErrNotOwned otherwise).
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("terminating: %w: empty instance id", ErrInvalidRequest)
	}
	owned, err := p.owns(ctx, id)
	if err != nil {
		return fmt.Errorf("terminating %s in %s: %w", id, p.opts.Region, err)
	}
	if !owned {
		return nil
	}
	_, err = p.client.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	p.invalidate(id)
	if err != nil && errorCode(err) != codeInstanceNotFound {
		return fmt.Errorf("terminating %s in %s: %w", id, p.opts.Region, classify(err, "", "", ""))
	}
	return nil
}

// owns reports whether id is one of our instances that still needs
// terminating: yes when it is in the current list; otherwise EC2 is asked
// about that one instance (gone or unknown: false; not ours: ErrNotOwned).
func (p *Provider) owns(ctx context.Context, id string) (bool, error) {
	if all, err := p.current(ctx); err == nil {
		for _, in := range all {
			if in.ID == id {
				return true, nil
			}
		}
	}
	out, err := p.client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		if errorCode(err) == codeInstanceNotFound {
			return false, nil
		}
		return false, classify(err, "", "", "")
	}
	for _, r := range out.Reservations {
		for _, raw := range r.Instances {
			if aws.ToString(raw.InstanceId) != id {
				continue
			}
			if !ownerFromTags(raw.Tags).ours(p.opts.Cluster) {
				return false, fmt.Errorf("%w (cluster %q)", ErrNotOwned, p.opts.Cluster)
			}
			if raw.State != nil && raw.State.Name == types.InstanceStateNameTerminated {
				return false, nil
			}
			return true, nil
		}
	}
	return false, nil
}
