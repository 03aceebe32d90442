package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind says what a notice announces.
type Kind string

const (
	// KindInterruption is the cloud's interruption notice: the instance
	// will be stopped, hibernated or terminated at Notice.At.
	KindInterruption Kind = "interruption"
	// KindRebalance is AWS's rebalance recommendation: the instance is at
	// elevated risk of interruption; Notice.At is the deadline the agent's
	// rebalance policy chose.
	KindRebalance Kind = "rebalance"
)

// Source names reported to the controller (the notice body's "source").
const (
	SourceAWS          = "aws-imds"
	SourceAWSRebalance = "aws-imds-rebalance"
	SourceTencent      = "tencent-metadata"
)

// Notice is one interruption notice read from the metadata service.
type Notice struct {
	Kind Kind
	// Action is what the cloud will do: terminate, stop or hibernate on AWS;
	// terminate on Tencent; rebalance for a rebalance recommendation.
	Action string
	// At is when the cloud takes the instance back (for a rebalance
	// recommendation: the deadline chosen by the policy).
	At time.Time
	// Source is reported to the controller: SourceAWS, SourceAWSRebalance
	// or SourceTencent.
	Source string
}

// String describes the notice for logs.
func (n Notice) String() string {
	return fmt.Sprintf("%s %s at %s (%s)", n.Kind, n.Action, n.At.UTC().Format(time.RFC3339), n.Source)
}

// ParseError is an answer of the metadata service that could not be read.
type ParseError struct {
	// What names the metadata item.
	What string
	Err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("parsing %s: %v", e.What, e.Err) }

// Unwrap returns the cause.
func (e *ParseError) Unwrap() error { return e.Err }

// maxAction bounds the length of an instance-action action.
const maxAction = 32

// ParseInstanceAction reads AWS's spot/instance-action item:
// {"action": "terminate|stop|hibernate", "time": "2017-09-18T08:22:00Z"},
// the time in UTC. Unknown fields are ignored (AWS may add some); an
// unknown action is accepted as long as it is a lower-case word, since it
// still announces an interruption.
func ParseInstanceAction(body []byte) (action string, at time.Time, err error) {
	var v struct {
		Action string `json:"action"`
		Time   string `json:"time"`
	}
	if err := decodeOne(body, &v); err != nil {
		return "", time.Time{}, &ParseError{What: "spot/instance-action", Err: err}
	}
	if !isWord(v.Action) {
		return "", time.Time{}, &ParseError{What: "spot/instance-action", Err: fmt.Errorf("action %q: want terminate, stop or hibernate", truncate(v.Action))}
	}
	at, err = time.Parse(time.RFC3339, v.Time)
	if err != nil {
		return "", time.Time{}, &ParseError{What: "spot/instance-action", Err: fmt.Errorf("time %q: %v", truncate(v.Time), err)}
	}
	return v.Action, at.UTC(), nil
}

// ParseRebalance reads AWS's events/recommendations/rebalance item:
// {"noticeTime": "2020-10-27T08:22:00Z"}, the time the recommendation was
// emitted, in UTC.
func ParseRebalance(body []byte) (time.Time, error) {
	var v struct {
		NoticeTime string `json:"noticeTime"`
	}
	if err := decodeOne(body, &v); err != nil {
		return time.Time{}, &ParseError{What: "events/recommendations/rebalance", Err: err}
	}
	at, err := time.Parse(time.RFC3339, v.NoticeTime)
	if err != nil {
		return time.Time{}, &ParseError{What: "events/recommendations/rebalance", Err: fmt.Errorf("noticeTime %q: %v", truncate(v.NoticeTime), err)}
	}
	return at.UTC(), nil
}

// tencentZone is the zone of Tencent's termination time: "the OS time of
// the spot instance when it's terminated (in UTC+8)".
var tencentZone = time.FixedZone("UTC+8", 8*60*60)

// TencentTimeLayout is the documented form of Tencent's
// spot/termination-time item, in UTC+8 ("2018-08-18 12:05:33").
const TencentTimeLayout = "2006-01-02 15:04:05"

// ParseTencentTermination reads Tencent Cloud's spot/termination-time item:
// a plain-text time "2018-08-18 12:05:33" in UTC+8, as documented. An RFC
// 3339 time (with its own offset) is accepted too.
func ParseTencentTermination(body []byte) (time.Time, error) {
	s := strings.TrimSpace(string(body))
	if len(s) > 64 {
		return time.Time{}, &ParseError{What: "spot/termination-time", Err: errors.New("longer than 64 bytes: not a time")}
	}
	if at, err := time.ParseInLocation(TencentTimeLayout, s, tencentZone); err == nil {
		return at.UTC(), nil
	}
	if at, err := time.Parse(time.RFC3339, s); err == nil {
		return at.UTC(), nil
	}
	return time.Time{}, &ParseError{What: "spot/termination-time", Err: fmt.Errorf("%q: want %q (UTC+8) or RFC 3339", truncate(s), TencentTimeLayout)}
}

// ParseInstanceID checks an instance-id item: one token of printable ASCII
// without spaces or slashes (i-0123456789abcdef0, ins-3g445roi).
func ParseInstanceID(body []byte) (string, error) {
	s := strings.TrimSpace(string(body))
	if s == "" || len(s) > 128 {
		return "", &ParseError{What: "instance-id", Err: fmt.Errorf("%q: not an instance id", truncate(s))}
	}
	for _, r := range s {
		if r <= ' ' || r > '~' || r == '/' {
			return "", &ParseError{What: "instance-id", Err: fmt.Errorf("%q: not an instance id", truncate(s))}
		}
	}
	return s, nil
}

// decodeOne decodes exactly one JSON object.
func decodeOne(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func isWord(s string) bool {
	if s == "" || len(s) > maxAction {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '-' {
			return false
		}
	}
	return true
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
