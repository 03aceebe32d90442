package sqstest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/tidegpu/tidegpu/internal/provider/aws/sqstest"
)

func client(s *sqstest.Server) *sqs.Client {
	return sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(s.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "not-a-real-secret", "")})
}

// The real SDK against the fake: receipt handles, visibility timeout,
// delete, long polling, the SDK's MD5 check, errors.
func TestProtocolWithTheSDK(t *testing.T) {
	s := sqstest.NewServer(sqstest.Options{})
	defer s.Close()
	c, ctx := client(s), context.Background()
	q := aws.String(s.QueueURL)
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	r1, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, VisibilityTimeout: 1})
	if err != nil || len(r1.Messages) != 1 || aws.ToString(r1.Messages[0].Body) != `{"a":1}` {
		t.Fatalf("receive: %+v, %v", r1, err)
	}
	// Hidden while its visibility timeout runs.
	r, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q})
	if err != nil || len(r.Messages) != 0 {
		t.Fatalf("received a hidden message: %+v, %v", r, err)
	}
	// Long polling: waits for it to be visible again, with a new handle.
	start := time.Now()
	r2, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, WaitTimeSeconds: 5})
	if err != nil || len(r2.Messages) != 1 {
		t.Fatalf("long poll: %+v, %v", r2, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("long poll returned after %s, want about the 1 s visibility timeout", d)
	}
	if aws.ToString(r2.Messages[0].ReceiptHandle) == aws.ToString(r1.Messages[0].ReceiptHandle) {
		t.Error("the second receive has the first receipt handle")
	}
	// The old handle deletes nothing; the new one deletes.
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q, ReceiptHandle: r1.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if s.Messages()[0].Deleted {
		t.Error("an outdated receipt handle deleted the message")
	}
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q, ReceiptHandle: r2.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if !s.Messages()[0].Deleted {
		t.Error("the latest receipt handle did not delete the message")
	}
	var ae smithy.APIError
	_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q, ReceiptHandle: aws.String("nope")})
	if !errors.As(err, &ae) || ae.ErrorCode() != "ReceiptHandleIsInvalid" {
		t.Errorf("bad handle: %v", err)
	}
	_, err = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(s.URL + "/1/other")})
	if !errors.As(err, &ae) || ae.ErrorCode() != "QueueDoesNotExist" {
		t.Errorf("unknown queue: %v", err)
	}
}
