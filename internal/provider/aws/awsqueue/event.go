// Package awsqueue is the agentless notice path on AWS, the one Karpenter
// and the Node Termination Handler use: EventBridge rules send EC2 Spot
// Instance Interruption Warnings, Instance Rebalance Recommendations and
// Instance State-change Notifications to an SQS queue; the operator long-
// polls it, maps each instance to its pool, hands interruption notices to
// the same router as the agent's (so a notice is handled once, whichever
// arrives first), wakes the pool on a state change to shutting-down,
// terminated, stopping or stopped, and deletes each message once handled.
package awsqueue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind is what an event says.
type Kind string

// Kinds of event.
const (
	KindInterruption Kind = "interruption"
	KindRebalance    Kind = "rebalance"
	KindStateChange  Kind = "state-change"
	// KindOther is an event of another source or detail-type: deleted
	// without effect.
	KindOther Kind = "other"
)

// The detail-types, as EventBridge sends them
// (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html,
// https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html,
// https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/monitoring-instance-state-changes.html).
const (
	DetailInterruption = "EC2 Spot Instance Interruption Warning"
	DetailRebalance    = "EC2 Instance Rebalance Recommendation"
	DetailStateChange  = "EC2 Instance State-change Notification"
)

// InterruptionNotice is how long after the warning EC2 interrupts: "two
// minutes prior to the actual interruption".
const InterruptionNotice = 2 * time.Minute

// Event is one parsed EventBridge event about an instance.
type Event struct {
	Kind       Kind
	InstanceID string
	// Time is the event's time (when EC2 emitted it).
	Time time.Time
	// Action is the interruption's instance-action (terminate, stop,
	// hibernate); State the state-change's new state.
	Action, State string
	Region        string
}

// Parse reads an EventBridge event as its SQS target delivers it (the
// event JSON as the message body). An event of another source or
// detail-type is KindOther with no error; a malformed one is an error.
func Parse(body []byte) (Event, error) {
	var e struct {
		Source     string          `json:"source"`
		DetailType string          `json:"detail-type"`
		Time       string          `json:"time"`
		Region     string          `json:"region"`
		Detail     json.RawMessage `json:"detail"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&e); err != nil {
		return Event{}, fmt.Errorf("not an EventBridge event: %v", err)
	}
	if dec.More() {
		return Event{}, errors.New("not an EventBridge event: trailing data after the JSON object")
	}
	var kind Kind
	switch {
	case e.Source != "aws.ec2":
		return Event{Kind: KindOther}, nil
	case e.DetailType == DetailInterruption:
		kind = KindInterruption
	case e.DetailType == DetailRebalance:
		kind = KindRebalance
	case e.DetailType == DetailStateChange:
		kind = KindStateChange
	default:
		return Event{Kind: KindOther}, nil
	}
	at, err := time.Parse(time.RFC3339, e.Time)
	if err != nil {
		return Event{}, fmt.Errorf("%s: time %q: %v", e.DetailType, truncate(e.Time), err)
	}
	var d struct {
		InstanceID string `json:"instance-id"`
		Action     string `json:"instance-action"`
		State      string `json:"state"`
	}
	if len(e.Detail) == 0 {
		return Event{}, fmt.Errorf("%s: no detail", e.DetailType)
	}
	if err := json.Unmarshal(e.Detail, &d); err != nil {
		return Event{}, fmt.Errorf("%s: detail: %v", e.DetailType, err)
	}
	if !validID(d.InstanceID) {
		return Event{}, fmt.Errorf("%s: detail.instance-id %q: not an instance id", e.DetailType, truncate(d.InstanceID))
	}
	if kind == KindStateChange && !word(d.State) {
		return Event{}, fmt.Errorf("%s: detail.state %q: not a state", e.DetailType, truncate(d.State))
	}
	if kind == KindInterruption && d.Action != "" && !word(d.Action) {
		return Event{}, fmt.Errorf("%s: detail.instance-action %q: not an action", e.DetailType, truncate(d.Action))
	}
	return Event{Kind: kind, InstanceID: d.InstanceID, Time: at.UTC(), Action: d.Action, State: d.State, Region: e.Region}, nil
}

// Leaving says whether a state change means the instance is going away
// or no longer serves.
func Leaving(state string) bool {
	switch state {
	case "shutting-down", "terminated", "stopping", "stopped":
		return true
	}
	return false
}

// validID: EC2 ids are "i-" and hex.
func validID(s string) bool {
	if !strings.HasPrefix(s, "i-") || len(s) < 3 || len(s) > 64 {
		return false
	}
	for _, r := range s[2:] {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

func word(s string) bool {
	if s == "" || len(s) > 32 {
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
