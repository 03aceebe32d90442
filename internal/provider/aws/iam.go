package aws

// IAMActions are the EC2 API actions this provider calls, as IAM names
// them: the policy in deploy/iam/aws-policy.json is generated from this
// list, and a test checks it against the calls the EC2 fake records while
// the provider launches, lists, prices, stops, starts and terminates.
// ec2:CreateTags is needed because RunInstances tags the instance and its
// volumes at launch (TagSpecifications); the fake sees no call of its own
// for it.
var IAMActions = []string{
	"ec2:CreateTags",
	"ec2:DescribeInstances",
	"ec2:DescribeSpotPriceHistory",
	"ec2:RunInstances",
	"ec2:StartInstances",
	"ec2:StopInstances",
	"ec2:TerminateInstances",
}

// ImpliedIAMActions are the IAMActions that no call of their own makes.
var ImpliedIAMActions = []string{"ec2:CreateTags"}
