package awsqueue

import (
	"strings"
	"testing"
	"time"
)

// The events as the EC2 User Guide shows them:
// https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
// (EC2 Spot Instance Interruption Warning),
// https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html
// (EC2 Instance Rebalance Recommendation),
// https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/monitoring-instance-state-changes.html
// (EC2 Instance State-change Notification); ids and times are ours.
const (
	interruptionEvent = `{"version":"0","id":"12345678-1234-1234-1234-123456789012","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-03-01T12:00:00Z","region":"us-east-2","resources":["arn:aws:ec2:us-east-2a:instance/i-1234567890abcdef0"],"detail":{"instance-id":"i-1234567890abcdef0","instance-action":"terminate"}}`
	rebalanceEvent    = `{"version":"0","id":"12345678-1234-1234-1234-123456789012","detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","account":"123456789012","time":"2026-03-01T12:00:00Z","region":"us-east-2","resources":["arn:aws:ec2:us-east-2:123456789012:instance/i-1234567890abcdef0"],"detail":{"instance-id":"i-1234567890abcdef0"}}`
	stateEvent        = `{"id":"7bf73129-1428-4cd3-a780-95db273d1602","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","account":"123456789012","time":"2026-03-01T12:00:00Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1:123456789012:instance/i-1234567890abcdef0"],"detail":{"instance-id":"i-1234567890abcdef0","state":"shutting-down"}}`
)

func TestParse(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		body string
		want Event
		err  string
	}{
		{"interruption", interruptionEvent, Event{Kind: KindInterruption, InstanceID: "i-1234567890abcdef0", Time: t0, Action: "terminate", Region: "us-east-2"}, ""},
		{"rebalance", rebalanceEvent, Event{Kind: KindRebalance, InstanceID: "i-1234567890abcdef0", Time: t0, Region: "us-east-2"}, ""},
		{"state change", stateEvent, Event{Kind: KindStateChange, InstanceID: "i-1234567890abcdef0", Time: t0, State: "shutting-down", Region: "us-east-1"}, ""},
		{"other source", `{"source":"aws.s3","detail-type":"Object Created","detail":{}}`, Event{Kind: KindOther}, ""},
		{"other ec2 detail-type", `{"source":"aws.ec2","detail-type":"EBS Snapshot Notification","detail":{}}`, Event{Kind: KindOther}, ""},
		{"not json", `hello`, Event{}, "not an EventBridge event"},
		{"trailing", interruptionEvent + `{}`, Event{}, "trailing"},
		{"bad time", strings.Replace(interruptionEvent, "2026-03-01T12:00:00Z", "noon", 1), Event{}, "time"},
		{"no detail", `{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","time":"2026-03-01T12:00:00Z"}`, Event{}, "no detail"},
		{"bad id", strings.Replace(interruptionEvent, `"instance-id":"i-1234567890abcdef0"`, `"instance-id":"../etc"`, 1), Event{}, "instance-id"},
		{"bad state", strings.Replace(stateEvent, "shutting-down", "Shutting Down!", 1), Event{}, "detail.state"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse([]byte(c.body))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Parse = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestLeaving(t *testing.T) {
	for s, want := range map[string]bool{"pending": false, "running": false, "shutting-down": true, "terminated": true, "stopping": true, "stopped": true} {
		if Leaving(s) != want {
			t.Errorf("Leaving(%s) = %v", s, !want)
		}
	}
}

// Parse never panics, and what it accepts is well formed.
func FuzzParse(f *testing.F) {
	for _, s := range []string{interruptionEvent, rebalanceEvent, stateEvent, `{}`, `{"source":"aws.ec2"}`, `[]`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := Parse(body)
		if err != nil || ev.Kind == KindOther {
			return
		}
		if !validID(ev.InstanceID) || ev.Time.IsZero() {
			t.Fatalf("accepted %+v from %q", ev, body)
		}
		if ev.Kind == KindStateChange && !word(ev.State) {
			t.Fatalf("accepted state %q", ev.State)
		}
	})
}
