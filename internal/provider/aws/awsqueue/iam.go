package awsqueue

// IAMActions are the SQS API actions the queue's consumer calls (checked
// against the SQS fake's calls in the tests; deploy/iam/aws-policy.json
// is generated from them).
var IAMActions = []string{"sqs:DeleteMessage", "sqs:ReceiveMessage"}
