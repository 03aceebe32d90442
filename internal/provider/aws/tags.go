package aws

import (
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// Tag keys and values that mark an instance as ours.
const (
	TagManagedBy   = "tidegpu.eja.dev/managed-by"
	TagCluster     = "tidegpu.eja.dev/cluster"
	TagPool        = "tidegpu.eja.dev/pool"
	TagLaunchToken = "tidegpu.eja.dev/launch-token"
	TagServingPort = "tidegpu.eja.dev/serving-port"
	TagServingIP   = "tidegpu.eja.dev/serving-ip"
	TagName        = "Name"

	// ManagedByValue is the value of TagManagedBy.
	ManagedByValue = "tidegpu"
	// Values of TagServingIP.
	ServingIPPrivate = "private"
	ServingIPPublic  = "public"
)

// maxTagValue is EC2's limit on a tag value's length
// (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_Tags.html#tag-restrictions).
const maxTagValue = 256

// owner is what an instance's tags say about who owns it and how it serves.
type owner struct {
	Managed    bool
	Cluster    string
	Pool       string
	Token      string
	Port       int32
	UsePrivate bool
}

// ownershipTags are the tags Launch puts on an instance and its volumes.
func ownershipTags(o owner) []types.Tag {
	ip := ServingIPPublic
	if o.UsePrivate {
		ip = ServingIPPrivate
	}
	kv := [][2]string{
		{TagManagedBy, ManagedByValue},
		{TagCluster, o.Cluster},
		{TagPool, o.Pool},
		{TagLaunchToken, o.Token},
		{TagServingPort, strconv.Itoa(int(o.Port))},
		{TagServingIP, ip},
		{TagName, truncate("tidegpu-"+o.Pool, maxTagValue)},
	}
	tags := make([]types.Tag, 0, len(kv))
	for _, t := range kv {
		tags = append(tags, types.Tag{Key: aws.String(t[0]), Value: aws.String(t[1])})
	}
	return tags
}

// ownerFromTags reads the ownership tags of an instance as EC2 reports
// them. Tags it does not know are ignored; a missing or unparsable port
// means DefaultServingPort, a missing serving-ip means public (the spec's
// default).
func ownerFromTags(tags []types.Tag) owner {
	o := owner{Port: DefaultServingPort}
	for _, t := range tags {
		k, v := aws.ToString(t.Key), aws.ToString(t.Value)
		switch k {
		case TagManagedBy:
			o.Managed = v == ManagedByValue
		case TagCluster:
			o.Cluster = v
		case TagPool:
			o.Pool = v
		case TagLaunchToken:
			o.Token = v
		case TagServingPort:
			if n, err := strconv.ParseUint(v, 10, 16); err == nil && n > 0 {
				o.Port = int32(n)
			}
		case TagServingIP:
			o.UsePrivate = v == ServingIPPrivate
		}
	}
	return o
}

// ours reports whether the tags mark the instance as owned by cluster.
func (o owner) ours(cluster string) bool { return o.Managed && o.Cluster == cluster }

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}
