package aws

import (
	"errors"

	"github.com/aws/smithy-go"

	"github.com/tidegpu/tidegpu/internal/provider"
)

// EC2 error codes this package acts on
// (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html).
const (
	codeInstanceNotFound = "InvalidInstanceID.NotFound"
)

// capacityCodes say that an offering (zone x type x market) cannot be had
// now: a different zone, type or market may work.
var capacityCodes = map[string]bool{
	// Server error (HTTP 500): no capacity for the type in the zone.
	"InsufficientInstanceCapacity": true,
	// Server error: not enough capacity to fulfil the request.
	"InsufficientCapacity": true,
	// Spot: no spare capacity for the spot request.
	"UnfulfillableCapacity": true,
	// Spot: the maximum price is below the current spot price.
	"SpotMaxPriceTooLow": true,
	// Spot: the account's spot instance (vCPU) limit is reached.
	"MaxSpotInstanceCountExceeded": true,
	// The type is not offered in the requested zone.
	"Unsupported": true,
}

// throttleCodes say that EC2 refused the call for its rate
// (https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html).
var throttleCodes = map[string]bool{
	"RequestLimitExceeded": true,
	"Throttling":           true,
	"ThrottlingException":  true,
	"RequestThrottled":     true,
}

// errorCode is the EC2 error code carried by err, "" when none.
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func isCapacityCode(code string) bool { return capacityCodes[code] }

func isThrottleCode(code string) bool { return throttleCodes[code] }

// classify maps an EC2 error to the provider's typed errors: capacity codes
// to *provider.InsufficientCapacityError for the offering tried, throttling
// codes to *provider.ThrottledError; anything else is returned unchanged.
func classify(err error, zone, instanceType string, market provider.Market) error {
	if err == nil {
		return nil
	}
	code := errorCode(err)
	switch {
	case isCapacityCode(code):
		return &provider.InsufficientCapacityError{Zone: zone, InstanceType: instanceType, Market: market, Err: err}
	case isThrottleCode(code):
		return &provider.ThrottledError{Err: err}
	}
	return err
}
