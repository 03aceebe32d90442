// Package sqstest is a fake Amazon SQS endpoint for tests: an httptest
// server that speaks the AWS JSON 1.0 protocol the current SDK for Go v2
// sends (POST /, Content-Type application/x-amz-json-1.0, X-Amz-Target
// AmazonSQS.<Action>), for the calls an interruption-queue consumer makes:
// SendMessage (to fill the queue, as EventBridge does), ReceiveMessage
// and DeleteMessage.
//
// It follows the documented behaviour:
//
//   - the protocol: https://smithy.io/2.0/aws/protocols/aws-json-1_0-protocol.html
//     and https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-making-api-requests-json.html
//   - ReceiveMessage: at most MaxNumberOfMessages (1..10, default 1)
//     visible messages; WaitTimeSeconds (0..20) long-polls until one is
//     visible; each receive hides the message for VisibilityTimeout
//     (default the queue's, 30 s) and gives it a new receipt handle; its
//     MD5OfBody is the hex MD5 of the body, which the SDK checks:
//     https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html
//   - DeleteMessage with the latest receipt handle deletes; a handle that
//     is not of this queue's form is ReceiptHandleIsInvalid; an older
//     handle of a message received again succeeds and deletes nothing
//     ("the request succeeds, but the message might not be deleted"):
//     https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html
//   - visibility timeout: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html
//   - an unknown QueueUrl is QueueDoesNotExist.
//
// Every call is recorded.
package sqstest

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// DefaultVisibilityTimeout is SQS's default for a new queue.
const DefaultVisibilityTimeout = 30 * time.Second

// Call is one request the fake answered.
type Call struct {
	Action string
	Body   map[string]any
	// Code is the error code sent, "" on success.
	Code string
}

// Message is a message as the fake stores it.
type Message struct {
	ID       string
	Body     string
	Receives int
	Deleted  bool
}

type message struct {
	Message
	visibleAt time.Time
	handle    string
}

// Server is the fake endpoint. Safe for concurrent use.
type Server struct {
	// URL is the endpoint (BaseEndpoint); QueueURL the one queue's URL.
	URL, QueueURL string

	ts         *httptest.Server
	visibility time.Duration

	mu      sync.Mutex
	cond    chan struct{} // closed and replaced when a message is sent
	msgs    []*message
	seq     int
	handles int
	calls   []Call
}

// Options configure a Server.
type Options struct {
	// Queue names the one queue (default "tidegpu-interruptions").
	Queue string
	// VisibilityTimeout is the queue's default (DefaultVisibilityTimeout).
	VisibilityTimeout time.Duration
}

// NewServer starts the fake; Close it when done.
func NewServer(o Options) *Server {
	if o.Queue == "" {
		o.Queue = "tidegpu-interruptions"
	}
	if o.VisibilityTimeout <= 0 {
		o.VisibilityTimeout = DefaultVisibilityTimeout
	}
	s := &Server{visibility: o.VisibilityTimeout, cond: make(chan struct{})}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.ts.URL
	s.QueueURL = s.ts.URL + "/123456789012/" + o.Queue
	return s
}

// Close stops the server.
func (s *Server) Close() { s.ts.CloseClientConnections(); s.ts.Close() }

// Send puts a message on the queue (what EventBridge's target does) and
// returns its id.
func (s *Server) Send(body string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sendLocked(body)
}

func (s *Server) sendLocked(body string) string {
	s.seq++
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", s.seq)
	s.msgs = append(s.msgs, &message{Message: Message{ID: id, Body: body}})
	close(s.cond)
	s.cond = make(chan struct{})
	return id
}

// Messages returns every message sent, deleted ones included.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.msgs))
	for i, m := range s.msgs {
		out[i] = m.Message
	}
	return out
}

// Calls returns the calls so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Actions returns the distinct actions called, in first-call order.
func (s *Server) Actions() []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range s.Calls() {
		if !seen[c.Action] {
			seen[c.Action] = true
			out = append(out, c.Action)
		}
	}
	return out
}

type apiError struct {
	status int
	code   string
	msg    string
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	action, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	if r.Method != http.MethodPost || !ok || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-amz-json-1.0") {
		writeErr(w, apiError{400, "InvalidAction", "want POST with X-Amz-Target: AmazonSQS.<Action> and Content-Type application/x-amz-json-1.0"})
		return
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		writeErr(w, apiError{400, "InvalidParameterValue", "body is not a JSON object: " + err.Error()})
		return
	}
	var (
		out  any
		aerr *apiError
	)
	if q, _ := body["QueueUrl"].(string); q != s.QueueURL {
		aerr = &apiError{400, "QueueDoesNotExist", "The specified queue does not exist."}
	} else {
		switch action {
		case "SendMessage":
			b, _ := body["MessageBody"].(string)
			if b == "" {
				aerr = &apiError{400, "MissingParameter", "MessageBody is required"}
				break
			}
			id := s.Send(b)
			out = map[string]any{"MessageId": id, "MD5OfMessageBody": md5hex(b)}
		case "ReceiveMessage":
			out, aerr = s.receive(r, body)
		case "DeleteMessage":
			aerr = s.delete(body)
			out = map[string]any{}
		default:
			aerr = &apiError{400, "InvalidAction", "the fake does not serve " + action}
		}
	}
	s.mu.Lock()
	c := Call{Action: action, Body: body}
	if aerr != nil {
		c.Code = aerr.code
	}
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	if aerr != nil {
		writeErr(w, *aerr)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

func number(body map[string]any, key string, def, lo, hi int) (int, *apiError) {
	v, ok := body[key]
	if !ok {
		return def, nil
	}
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) || int(f) < lo || int(f) > hi {
		return 0, &apiError{400, "InvalidParameterValue", fmt.Sprintf("%s: %v is not an integer from %d to %d", key, v, lo, hi)}
	}
	return int(f), nil
}

func (s *Server) receive(r *http.Request, body map[string]any) (any, *apiError) {
	max, err := number(body, "MaxNumberOfMessages", 1, 1, 10)
	if err != nil {
		return nil, err
	}
	wait, err := number(body, "WaitTimeSeconds", 0, 0, 20)
	if err != nil {
		return nil, err
	}
	vis, err := number(body, "VisibilityTimeout", int(s.visibility/time.Second), 0, 43200)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		s.mu.Lock()
		now := time.Now()
		var got []map[string]any
		var nextVisible time.Time
		for _, m := range s.msgs {
			if m.Deleted {
				continue
			}
			if m.visibleAt.After(now) {
				if nextVisible.IsZero() || m.visibleAt.Before(nextVisible) {
					nextVisible = m.visibleAt
				}
				continue
			}
			if len(got) == max {
				break
			}
			s.handles++
			m.handle = fmt.Sprintf("rh-%s-%d", m.ID, s.handles)
			m.Receives++
			m.visibleAt = now.Add(time.Duration(vis) * time.Second)
			got = append(got, map[string]any{"MessageId": m.ID, "ReceiptHandle": m.handle, "MD5OfBody": md5hex(m.Body), "Body": m.Body,
				"Attributes": map[string]string{"ApproximateReceiveCount": fmt.Sprint(m.Receives)}})
		}
		cond := s.cond
		s.mu.Unlock()
		if len(got) > 0 || !now.Before(deadline) {
			if got == nil {
				return map[string]any{}, nil
			}
			return map[string]any{"Messages": got}, nil
		}
		wake := deadline
		if !nextVisible.IsZero() && nextVisible.Before(wake) {
			wake = nextVisible
		}
		t := time.NewTimer(time.Until(wake))
		select {
		case <-cond:
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return map[string]any{}, nil
		}
		t.Stop()
	}
}

func (s *Server) delete(body map[string]any) *apiError {
	h, _ := body["ReceiptHandle"].(string)
	if !strings.HasPrefix(h, "rh-") {
		return &apiError{400, "ReceiptHandleIsInvalid", fmt.Sprintf("The input receipt handle %q is not a valid receipt handle.", h)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs {
		if m.handle == h {
			m.Deleted = true
		}
	}
	return nil
}

func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func writeErr(w http.ResponseWriter, e apiError) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("x-amzn-query-error", e.code+";Sender")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": e.code, "message": e.msg})
}
