package ec2test

import (
	"encoding/xml"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// Wire format of the EC2 Query API as this fake speaks it.
//
// Requests (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/Query-Requests.html):
// a form-encoded POST with Action=NAME and Version=2016-11-15; lists are
// flattened with 1-based indexes (InstanceId.1, Filter.1.Name,
// Filter.1.Value.1, TagSpecification.1.Tag.1.Key) and structures with dots
// (Placement.AvailabilityZone, InstanceMarketOptions.SpotOptions.SpotInstanceType).
//
// Responses: an XML document <ACTIONResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
// carrying a <requestId>, lists as <xxxSet><item>…</item></xxxSet>
// (http://docs.amazonwebservices.com/AWSEC2/latest/UserGuide/api-responses.html;
// element names as in the API reference, for example
// https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Instance.html).
//
// Errors (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html#api-error-response):
// <Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>,
// with a 4xx status for client errors and 5xx for server errors
// (InsufficientInstanceCapacity, RequestLimitExceeded, ...).

// Namespace is the XML namespace of every EC2 response for API version 2016-11-15.
const Namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"

// APIVersion is the only Version the fake accepts.
const APIVersion = "2016-11-15"

type xmlError struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlGroup struct {
	GroupID string `xml:"groupId"`
}

type xmlPlacement struct {
	AvailabilityZone string `xml:"availabilityZone"`
	Tenancy          string `xml:"tenancy"`
}

type xmlInstance struct {
	InstanceID            string       `xml:"instanceId"`
	ImageID               string       `xml:"imageId"`
	State                 xmlState     `xml:"instanceState"`
	PrivateIPAddress      string       `xml:"privateIpAddress,omitempty"`
	IPAddress             string       `xml:"ipAddress,omitempty"`
	AMILaunchIndex        int          `xml:"amiLaunchIndex"`
	InstanceType          string       `xml:"instanceType"`
	LaunchTime            string       `xml:"launchTime"`
	Placement             xmlPlacement `xml:"placement"`
	SubnetID              string       `xml:"subnetId,omitempty"`
	GroupSet              []xmlGroup   `xml:"groupSet>item"`
	ClientToken           string       `xml:"clientToken,omitempty"`
	InstanceLifecycle     string       `xml:"instanceLifecycle,omitempty"`
	SpotInstanceRequestID string       `xml:"spotInstanceRequestId,omitempty"`
	TagSet                []xmlTag     `xml:"tagSet>item"`
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	GroupSet      []xmlGroup    `xml:"groupSet>item"`
	InstancesSet  []xmlInstance `xml:"instancesSet>item"`
}

type xmlRunInstancesResponse struct {
	XMLName       xml.Name      `xml:"RunInstancesResponse"`
	Xmlns         string        `xml:"xmlns,attr"`
	RequestID     string        `xml:"requestId"`
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	GroupSet      []xmlGroup    `xml:"groupSet>item"`
	InstancesSet  []xmlInstance `xml:"instancesSet>item"`
}

type xmlDescribeInstancesResponse struct {
	XMLName        xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns          string           `xml:"xmlns,attr"`
	RequestID      string           `xml:"requestId"`
	ReservationSet []xmlReservation `xml:"reservationSet>item"`
	NextToken      string           `xml:"nextToken,omitempty"`
}

type xmlStateChange struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  xmlState `xml:"currentState"`
	PreviousState xmlState `xml:"previousState"`
}

type xmlTerminateInstancesResponse struct {
	XMLName      xml.Name         `xml:"TerminateInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	InstancesSet []xmlStateChange `xml:"instancesSet>item"`
}

// xmlStopInstancesResponse is StopInstances' answer: StoppingInstances, on
// the wire an instancesSet of state changes
// (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StopInstances.html).
type xmlStopInstancesResponse struct {
	XMLName      xml.Name         `xml:"StopInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	InstancesSet []xmlStateChange `xml:"instancesSet>item"`
}

// xmlStartInstancesResponse is StartInstances' answer: StartingInstances,
// on the wire an instancesSet of state changes
// (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StartInstances.html).
type xmlStartInstancesResponse struct {
	XMLName      xml.Name         `xml:"StartInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	InstancesSet []xmlStateChange `xml:"instancesSet>item"`
}

type xmlSpotPrice struct {
	InstanceType       string `xml:"instanceType"`
	ProductDescription string `xml:"productDescription"`
	SpotPrice          string `xml:"spotPrice"`
	Timestamp          string `xml:"timestamp"`
	AvailabilityZone   string `xml:"availabilityZone"`
}

type xmlDescribeSpotPriceHistoryResponse struct {
	XMLName             xml.Name       `xml:"DescribeSpotPriceHistoryResponse"`
	Xmlns               string         `xml:"xmlns,attr"`
	RequestID           string         `xml:"requestId"`
	SpotPriceHistorySet []xmlSpotPrice `xml:"spotPriceHistorySet>item"`
	NextToken           string         `xml:"nextToken,omitempty"`
}

// stateCodes are the documented instance state codes
// (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceState.html).
var stateCodes = map[string]int{
	StatePending:      0,
	StateRunning:      16,
	StateShuttingDown: 32,
	StateTerminated:   48,
	StateStopping:     64,
	StateStopped:      80,
}

func xmlStateOf(name string) xmlState { return xmlState{Code: stateCodes[name], Name: name} }

// filter is one Filter.N of a Describe call.
type filter struct {
	Name   string
	Values []string
}

// indexed returns the sorted 1-based indexes n for which prefix+n+suffix
// (or prefix+n+"."...) appears among the form's keys.
func indexed(form url.Values, prefix string) []int {
	seen := map[int]bool{}
	for k := range form {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 {
			continue
		}
		seen[n] = true
	}
	out := make([]int, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// list reads a flattened list of scalars: prefix.1, prefix.2, ...
func list(form url.Values, prefix string) []string {
	var out []string
	for _, n := range indexed(form, prefix+".") {
		out = append(out, form.Get(fmt.Sprintf("%s.%d", prefix, n)))
	}
	return out
}

// filters reads Filter.N.Name / Filter.N.Value.M.
func filters(form url.Values) []filter {
	var out []filter
	for _, n := range indexed(form, "Filter.") {
		p := fmt.Sprintf("Filter.%d", n)
		out = append(out, filter{Name: form.Get(p + ".Name"), Values: list(form, p+".Value")})
	}
	return out
}

// tagSpecs reads TagSpecification.N.ResourceType / .Tag.M.Key / .Tag.M.Value.
func tagSpecs(form url.Values) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, n := range indexed(form, "TagSpecification.") {
		p := fmt.Sprintf("TagSpecification.%d", n)
		rt := form.Get(p + ".ResourceType")
		tags := out[rt]
		if tags == nil {
			tags = map[string]string{}
			out[rt] = tags
		}
		for _, m := range indexed(form, p+".Tag.") {
			q := fmt.Sprintf("%s.Tag.%d", p, m)
			tags[form.Get(q+".Key")] = form.Get(q + ".Value")
		}
	}
	return out
}

func sortedTags(tags map[string]string) []xmlTag {
	out := make([]xmlTag, 0, len(tags))
	for k, v := range tags {
		out = append(out, xmlTag{Key: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
