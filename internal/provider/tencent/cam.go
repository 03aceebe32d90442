package tencent

// CAMActions are the CVM API actions this provider calls, as Tencent
// Cloud's CAM names them: the policy in deploy/iam/tencent-cam-policy.json
// is generated from this list, and a test checks it against the calls the
// CVM fake records while the provider launches, lists, prices, stops,
// starts and terminates.
var CAMActions = []string{
	"cvm:DescribeInstances",
	"cvm:InquiryPriceRunInstances",
	"cvm:RunInstances",
	"cvm:StartInstances",
	"cvm:StopInstances",
	"cvm:TerminateInstances",
}
