package awsqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/logging"
	"k8s.io/utils/clock"
)

// Sources reported with the notices.
const (
	SourceInterruption = "aws-eventbridge"
	SourceRebalance    = "aws-eventbridge-rebalance"
)

// Deliverer takes a notice (notice.Router).
type Deliverer interface {
	Deliver(pool, id string, at time.Time, source string) (bool, error)
}

// Options configure a Queue.
type Options struct {
	// QueueURL is the SQS queue's URL (required); the endpoint is its
	// scheme and host, the region the host's (sqs.REGION.amazonaws.com),
	// else Region, else $AWS_REGION.
	QueueURL string
	Region   string
	// Router takes the notices (required).
	Router Deliverer
	// Locate finds an instance's pool (required).
	Locate func(ctx context.Context, id string) (pool string, ok bool, err error)
	// Round wakes a pool (required).
	Round func(pool string) error
	// RebalanceDeadline is the interruption time given to a rebalance
	// recommendation, after it (default 2 min, as the agent's); negative
	// ignores rebalance recommendations.
	RebalanceDeadline time.Duration
	// WaitSeconds is the long poll (default 20, SQS's maximum).
	WaitSeconds int32
	Clock       clock.PassiveClock
	Logger      *slog.Logger
	// SQSOptions adjust the client (credentials come from the SDK's
	// default chain: environment, IRSA, instance role).
	SQSOptions []func(*sqs.Options)
}

// Queue polls the interruption queue. It implements manager.Runnable.
type Queue struct {
	o      Options
	client *sqs.Client
}

// New checks o and builds the SQS client.
func New(ctx context.Context, o Options) (*Queue, error) {
	u, err := url.Parse(o.QueueURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Trim(u.Path, "/") == "" {
		return nil, fmt.Errorf("queue URL %q: want https://sqs.REGION.amazonaws.com/ACCOUNT/NAME", o.QueueURL)
	}
	if o.Router == nil || o.Locate == nil || o.Round == nil {
		return nil, errors.New("awsqueue: Router, Locate and Round are required")
	}
	region := o.Region
	if parts := strings.Split(u.Hostname(), "."); len(parts) >= 4 && parts[0] == "sqs" {
		region = parts[1]
	}
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	if region == "" {
		return nil, fmt.Errorf("queue URL %q names no region: use the queue's https://sqs.REGION.amazonaws.com/... URL or set AWS_REGION", o.QueueURL)
	}
	if o.RebalanceDeadline == 0 {
		o.RebalanceDeadline = 2 * time.Minute
	}
	if o.WaitSeconds <= 0 || o.WaitSeconds > 20 {
		o.WaitSeconds = 20
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region), config.WithLogger(logging.Nop{}))
	if err != nil {
		return nil, fmt.Errorf("loading AWS configuration: %w", err)
	}
	endpoint := u.Scheme + "://" + u.Host
	opts := append([]func(*sqs.Options){func(so *sqs.Options) { so.BaseEndpoint = aws.String(endpoint) }}, o.SQSOptions...)
	return &Queue{o: o, client: sqs.NewFromConfig(cfg, opts...)}, nil
}

// NeedLeaderElection: only the leader consumes the queue (a follower has
// no pools to hand notices to, and a message it took would be hidden from
// the leader for the visibility timeout).
func (q *Queue) NeedLeaderElection() bool { return true }

// Start polls until ctx ends; errors are logged and retried with backoff.
func (q *Queue) Start(ctx context.Context) error {
	q.o.Logger.Info("polling the AWS interruption queue", "queue", q.o.QueueURL)
	backoff := time.Second
	for ctx.Err() == nil {
		if err := q.Poll(ctx); err != nil && ctx.Err() == nil {
			q.o.Logger.Warn("interruption queue", "err", err, "retryIn", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			backoff = min(2*backoff, time.Minute)
			continue
		}
		backoff = time.Second
	}
	return nil
}

// Poll makes one long-poll receive and handles what it returns.
func (q *Queue) Poll(ctx context.Context) error {
	out, err := q.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:            aws.String(q.o.QueueURL),
		MaxNumberOfMessages: 10,
		WaitTimeSeconds:     q.o.WaitSeconds,
	})
	if err != nil {
		return fmt.Errorf("ReceiveMessage: %w", err)
	}
	var errs []error
	for _, m := range out.Messages {
		if err := q.handle(ctx, aws.ToString(m.Body)); err != nil {
			// Kept: the message comes back after its visibility timeout.
			errs = append(errs, fmt.Errorf("message %s: %w", aws.ToString(m.MessageId), err))
			continue
		}
		if _, err := q.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.o.QueueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
			errs = append(errs, fmt.Errorf("DeleteMessage %s: %w", aws.ToString(m.MessageId), err))
		}
	}
	return errors.Join(errs...)
}

// handle acts on one message body. nil means done with it (delete it):
// acted on, or nothing to act on. An error keeps it for another try.
func (q *Queue) handle(ctx context.Context, body string) error {
	ev, err := Parse([]byte(body))
	if err != nil {
		// A message that cannot be read never will be: drop it.
		q.o.Logger.Warn("interruption queue: dropping a message that is not an EC2 event", "err", err)
		return nil
	}
	if ev.Kind == KindOther || (ev.Kind == KindRebalance && q.o.RebalanceDeadline < 0) {
		return nil
	}
	pool, ok, err := q.o.Locate(ctx, ev.InstanceID)
	if err != nil && !ok {
		return fmt.Errorf("finding the pool of %s: %w", ev.InstanceID, err)
	}
	if !ok {
		q.o.Logger.Debug("interruption queue: instance of no pool here", "instance", ev.InstanceID, "event", string(ev.Kind))
		return nil
	}
	switch ev.Kind {
	case KindInterruption, KindRebalance:
		at, src := ev.Time.Add(InterruptionNotice), SourceInterruption
		if ev.Kind == KindRebalance {
			at, src = ev.Time.Add(q.o.RebalanceDeadline), SourceRebalance
		}
		if now := q.o.Clock.Now(); at.Before(now) {
			at = now
		}
		handed, err := q.o.Router.Deliver(pool, ev.InstanceID, at, src)
		if err != nil {
			return err
		}
		q.o.Logger.Info("interruption queue: notice", "pool", pool, "instance", ev.InstanceID, "kind", string(ev.Kind),
			"interruptAt", at.Format(time.RFC3339), "new", handed)
	case KindStateChange:
		if Leaving(ev.State) {
			q.o.Logger.Info("interruption queue: instance leaving", "pool", pool, "instance", ev.InstanceID, "state", ev.State)
			if err := q.o.Round(pool); err != nil {
				return err
			}
		}
	}
	return nil
}
