package tencent

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Wire shapes of the CVM API 3.0 (version 2017-03-12) actions this package
// calls. Field names follow the API reference; only the fields we send or
// read are declared. References:
//   - RunInstances: https://intl.cloud.tencent.com/document/product/213/33237
//   - DescribeInstances: https://www.tencentcloud.com/document/api/213/33258
//   - InquiryPriceRunInstances: https://www.tencentcloud.com/document/api/213/33248
//   - Responses: https://intl.cloud.tencent.com/document/api/213/15694

// cvmVersion is the CVM API version every action is called with.
const cvmVersion = "2017-03-12"

// cvmService is the service name in the endpoint and the TC3 credential scope.
const cvmService = "cvm"

type placement struct {
	Zone string `json:"Zone"`
}

type virtualPrivateCloud struct {
	VpcId    string `json:"VpcId"`
	SubnetId string `json:"SubnetId"`
}

type internetAccessible struct {
	InternetChargeType      string `json:"InternetChargeType,omitempty"`
	InternetMaxBandwidthOut int    `json:"InternetMaxBandwidthOut"`
	PublicIpAssigned        bool   `json:"PublicIpAssigned"`
}

type spotMarketOptions struct {
	MaxPrice         string `json:"MaxPrice,omitempty"`
	SpotInstanceType string `json:"SpotInstanceType"`
}

type instanceMarketOptions struct {
	MarketType  string            `json:"MarketType"`
	SpotOptions spotMarketOptions `json:"SpotOptions"`
}

type tag struct {
	Key   string `json:"Key"`
	Value string `json:"Value"`
}

type tagSpecification struct {
	ResourceType string `json:"ResourceType"`
	Tags         []tag  `json:"Tags"`
}

// runInstancesParams is the RunInstances request body.
type runInstancesParams struct {
	InstanceChargeType    string                 `json:"InstanceChargeType"`
	Placement             placement              `json:"Placement"`
	InstanceType          string                 `json:"InstanceType"`
	ImageId               string                 `json:"ImageId"`
	VirtualPrivateCloud   *virtualPrivateCloud   `json:"VirtualPrivateCloud,omitempty"`
	SecurityGroupIds      []string               `json:"SecurityGroupIds,omitempty"`
	InternetAccessible    *internetAccessible    `json:"InternetAccessible,omitempty"`
	InstanceCount         int                    `json:"InstanceCount"`
	InstanceName          string                 `json:"InstanceName,omitempty"`
	ClientToken           string                 `json:"ClientToken,omitempty"`
	TagSpecification      []tagSpecification     `json:"TagSpecification,omitempty"`
	InstanceMarketOptions *instanceMarketOptions `json:"InstanceMarketOptions,omitempty"`
	// UserData is base64-encoded (at most 16 KB encoded).
	UserData string `json:"UserData,omitempty"`
}

// inquiryPriceParams is the InquiryPriceRunInstances request body.
type inquiryPriceParams struct {
	InstanceChargeType    string                 `json:"InstanceChargeType"`
	Placement             placement              `json:"Placement"`
	InstanceType          string                 `json:"InstanceType"`
	ImageId               string                 `json:"ImageId"`
	InstanceCount         int                    `json:"InstanceCount"`
	InstanceMarketOptions *instanceMarketOptions `json:"InstanceMarketOptions,omitempty"`
}

type filter struct {
	Name   string   `json:"Name"`
	Values []string `json:"Values"`
}

// describeParams is the DescribeInstances request body.
type describeParams struct {
	InstanceIds []string `json:"InstanceIds,omitempty"`
	Filters     []filter `json:"Filters,omitempty"`
	Offset      int      `json:"Offset"`
	Limit       int      `json:"Limit"`
}

// terminateParams is the TerminateInstances request body.
type terminateParams struct {
	InstanceIds []string `json:"InstanceIds"`
}

// cvmInstance is one entry of DescribeInstances' InstanceSet, reduced to
// what the provider reads.
type cvmInstance struct {
	InstanceId         string    `json:"InstanceId"`
	InstanceType       string    `json:"InstanceType"`
	InstanceState      string    `json:"InstanceState"`
	InstanceChargeType string    `json:"InstanceChargeType"`
	Placement          placement `json:"Placement"`
	PrivateIpAddresses []string  `json:"PrivateIpAddresses"`
	PublicIpAddresses  []string  `json:"PublicIpAddresses"`
	CreatedTime        string    `json:"CreatedTime"`
	Tags               []tag     `json:"Tags"`
}

// tagValue returns the value of the tag key and whether it is present.
func (c *cvmInstance) tagValue(key string) (string, bool) {
	for _, t := range c.Tags {
		if t.Key == key {
			return t.Value, true
		}
	}
	return "", false
}

// describePage is one page of a DescribeInstances answer.
type describePage struct {
	TotalCount int
	Instances  []cvmInstance
}

// errMalformed marks an answer that does not have the documented shape.
var errMalformed = errors.New("malformed CVM API answer")

// unwrap decodes body's Response object into out, refusing answers that
// carry an error or lack the Response wrapper.
func unwrap(body []byte, out any) error {
	var env struct {
		Response json.RawMessage `json:"Response"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	if len(env.Response) == 0 || string(env.Response) == "null" {
		return fmt.Errorf("%w: no Response object", errMalformed)
	}
	var head struct {
		Error *struct {
			Code    string `json:"Code"`
			Message string `json:"Message"`
		} `json:"Error"`
		RequestId string `json:"RequestId"`
	}
	if err := json.Unmarshal(env.Response, &head); err != nil {
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	if head.Error != nil && head.Error.Code != "" {
		return &APIError{Code: head.Error.Code, Message: head.Error.Message, RequestID: head.RequestId}
	}
	if err := json.Unmarshal(env.Response, out); err != nil {
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	return nil
}

// parseDescribeInstances parses a DescribeInstances answer. Every instance
// must have an InstanceId; TotalCount must not be negative.
func parseDescribeInstances(body []byte) (describePage, error) {
	var r struct {
		TotalCount  *int          `json:"TotalCount"`
		InstanceSet []cvmInstance `json:"InstanceSet"`
	}
	if err := unwrap(body, &r); err != nil {
		return describePage{}, err
	}
	if r.TotalCount == nil {
		return describePage{}, fmt.Errorf("%w: DescribeInstances without TotalCount", errMalformed)
	}
	if *r.TotalCount < 0 {
		return describePage{}, fmt.Errorf("%w: negative TotalCount %d", errMalformed, *r.TotalCount)
	}
	for i, in := range r.InstanceSet {
		if in.InstanceId == "" {
			return describePage{}, fmt.Errorf("%w: InstanceSet[%d] without InstanceId", errMalformed, i)
		}
	}
	return describePage{TotalCount: *r.TotalCount, Instances: r.InstanceSet}, nil
}

// parseRunInstances parses a RunInstances answer: the ids of the instances
// it accepted.
func parseRunInstances(body []byte) ([]string, error) {
	var r struct {
		InstanceIdSet []string `json:"InstanceIdSet"`
	}
	if err := unwrap(body, &r); err != nil {
		return nil, err
	}
	for i, id := range r.InstanceIdSet {
		if id == "" {
			return nil, fmt.Errorf("%w: InstanceIdSet[%d] is empty", errMalformed, i)
		}
	}
	return r.InstanceIdSet, nil
}

// parseInquiryPrice parses an InquiryPriceRunInstances answer and returns
// the instance's hourly price: the discounted unit price when given, else
// the list unit price.
func parseInquiryPrice(body []byte) (float64, error) {
	var r struct {
		Price *struct {
			InstancePrice *struct {
				UnitPrice         *float64 `json:"UnitPrice"`
				UnitPriceDiscount *float64 `json:"UnitPriceDiscount"`
				ChargeUnit        string   `json:"ChargeUnit"`
			} `json:"InstancePrice"`
		} `json:"Price"`
	}
	if err := unwrap(body, &r); err != nil {
		return 0, err
	}
	if r.Price == nil || r.Price.InstancePrice == nil {
		return 0, fmt.Errorf("%w: no Price.InstancePrice", errMalformed)
	}
	ip := r.Price.InstancePrice
	if ip.ChargeUnit != "" && ip.ChargeUnit != "HOUR" {
		return 0, fmt.Errorf("%w: charge unit %q, want HOUR", errMalformed, ip.ChargeUnit)
	}
	var p float64
	switch {
	case ip.UnitPriceDiscount != nil && *ip.UnitPriceDiscount > 0:
		p = *ip.UnitPriceDiscount
	case ip.UnitPrice != nil:
		p = *ip.UnitPrice
	default:
		return 0, fmt.Errorf("%w: no unit price", errMalformed)
	}
	if p < 0 {
		return 0, fmt.Errorf("%w: price %v", errMalformed, p)
	}
	return p, nil
}
