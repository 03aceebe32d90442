package tencent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	tcerr "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/errors"
	tchttp "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/http"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// APIError is an error the CVM API (or the SDK on its behalf) returned.
type APIError struct {
	// Action is the API action called.
	Action string
	// Code is the error code, e.g. ResourceInsufficient.SpecifiedInstanceType.
	Code string
	// Message is the API's explanation.
	Message string
	// RequestID identifies the call for Tencent Cloud support.
	RequestID string

	cause error
}

func (e *APIError) Error() string {
	s := "cvm"
	if e.Action != "" {
		s += " " + e.Action
	}
	s += ": " + e.Code
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RequestID != "" {
		s += " (request " + e.RequestID + ")"
	}
	return s
}

// Unwrap returns the SDK error underneath, if any.
func (e *APIError) Unwrap() error { return e.cause }

// rawResponse captures an answer's body for our own parsers; the SDK has
// already turned an `Error` object into an error by then.
type rawResponse struct{ body []byte }

// ParseErrorFromHTTPResponse implements tchttp.Response.
func (r *rawResponse) ParseErrorFromHTTPResponse(body []byte) error {
	return tchttp.ParseErrorFromHTTPResponse(body)
}

// UnmarshalJSON keeps a copy of the body.
func (r *rawResponse) UnmarshalJSON(b []byte) error {
	r.body = append(r.body[:0], b...)
	return nil
}

// caller sends CVM API calls through the SDK's common client: client-side
// rate limit, retries with exponential backoff and jitter on throttling and
// transient failures, never on anything else.
type caller struct {
	sdk         *common.Client
	clock       clock.Clock
	limiter     *rate.Limiter
	maxAttempts int
	base, max   time.Duration

	mu  sync.Mutex
	rnd *rand.Rand
}

func (c *caller) jitter() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rnd.Float64()
}

// wait takes a token from the rate limiter, sleeping on the injected clock.
func (c *caller) wait(ctx context.Context) error {
	now := c.clock.Now()
	r := c.limiter.ReserveN(now, 1)
	if !r.OK() {
		return errors.New("cvm: rate limiter refuses calls (burst 0)")
	}
	d := r.DelayFrom(now)
	if d <= 0 {
		return nil
	}
	return c.sleep(ctx, d, func() { r.CancelAt(c.clock.Now()) })
}

func (c *caller) sleep(ctx context.Context, d time.Duration, onCancel func()) error {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		if onCancel != nil {
			onCancel()
		}
		return ctx.Err()
	}
}

// call sends action with params (a JSON-marshalable struct) and returns the
// answer's body. Errors are *APIError, *provider.ThrottledError wrapping an
// *APIError when throttling outlasted the retries, or the context's error.
func (c *caller) call(ctx context.Context, action string, params any) ([]byte, error) {
	body, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("cvm %s: encoding request: %w", action, err)
	}
	var last *APIError
	for attempt := 0; attempt < c.maxAttempts; attempt++ {
		if attempt > 0 {
			if err := c.sleep(ctx, backoff(attempt-1, c.base, c.max, c.jitter()), nil); err != nil {
				return nil, fmt.Errorf("cvm %s: %w (last error: %v)", action, err, last)
			}
		}
		if err := c.wait(ctx); err != nil {
			return nil, fmt.Errorf("cvm %s: %w", action, err)
		}
		out, err := c.send(ctx, action, body)
		if err == nil {
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("cvm %s: %w", action, ctx.Err())
		}
		var ae *APIError
		if !errors.As(err, &ae) {
			return nil, err
		}
		last = ae
		switch classify(ae.Code) {
		case kindThrottled, kindTransient:
			continue
		default:
			return nil, ae
		}
	}
	if classify(last.Code) == kindThrottled {
		return nil, &provider.ThrottledError{Err: last}
	}
	return nil, last
}

// send makes one attempt.
func (c *caller) send(ctx context.Context, action string, body []byte) ([]byte, error) {
	req := tchttp.NewCommonRequest(cvmService, cvmVersion, action)
	if err := req.SetActionParameters(body); err != nil {
		return nil, fmt.Errorf("cvm %s: encoding request: %w", action, err)
	}
	req.SetContext(ctx)
	resp := &rawResponse{}
	if err := c.sdk.Send(req, resp); err != nil {
		var se *tcerr.TencentCloudSDKError
		if errors.As(err, &se) {
			msg := se.Message
			if u := errors.Unwrap(se); u != nil {
				msg += ": " + u.Error()
			}
			return nil, &APIError{Action: action, Code: se.Code, Message: msg, RequestID: se.RequestId, cause: err}
		}
		return nil, &APIError{Action: action, Code: "ClientError.Unknown", Message: err.Error(), cause: err}
	}
	return resp.body, nil
}

// apiCode returns the API error code inside err, or "".
func apiCode(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}
