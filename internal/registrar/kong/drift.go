package kong

import (
	"reflect"
	"slices"

	kongapi "github.com/tidegpu/tidegpu/internal/kong"
)

// healthchecksDrift reports whether the upstream's health checks differ
// from want in a field TideGPU sets. Status lists compare as sets.
func healthchecksDrift(want, have *kongapi.Healthchecks) bool {
	if have == nil || have.Active == nil || have.Passive == nil {
		return true
	}
	norm := func(h *kongapi.Healthchecks) kongapi.Healthchecks {
		a, p := *h.Active, *h.Passive
		a.Healthy.HTTPStatuses = sortedInts(a.Healthy.HTTPStatuses)
		a.Unhealthy.HTTPStatuses = sortedInts(a.Unhealthy.HTTPStatuses)
		p.Healthy.HTTPStatuses = sortedInts(p.Healthy.HTTPStatuses)
		p.Unhealthy.HTTPStatuses = sortedInts(p.Unhealthy.HTTPStatuses)
		return kongapi.Healthchecks{Active: &a, Passive: &p}
	}
	return !reflect.DeepEqual(norm(want), norm(have))
}

func sortedInts(s []int) []int {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// serviceDrift reports whether the service differs from want in protocol,
// host, path or connect timeout.
func serviceDrift(want, have kongapi.Service) bool {
	return have.Protocol != want.Protocol || have.Host != want.Host || have.Path != want.Path ||
		have.ConnectTimeout != want.ConnectTimeout
}

// routeDrift reports whether the route differs from want in its paths (as a
// set) or its service.
func routeDrift(want, have kongapi.Route) bool {
	if have.Service == nil || want.Service == nil || have.Service.ID != want.Service.ID {
		return true
	}
	a, b := slices.Clone(want.Paths), slices.Clone(have.Paths)
	slices.Sort(a)
	slices.Sort(b)
	return !slices.Equal(slices.Compact(a), slices.Compact(b))
}
