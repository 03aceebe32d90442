package kong

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	kongapi "github.com/tidegpu/tidegpu/internal/kong"
	"github.com/tidegpu/tidegpu/internal/registrar"
)

// kongDefaultPort is the port Kong gives a target written without one.
const kongDefaultPort = "8000"

// Plan is what one sync changes among the upstream's targets. It is applied
// in field order: every removal before any addition, then weight updates.
type Plan struct {
	// Deletes are our targets that are no longer wanted (or duplicates).
	Deletes []kongapi.Target
	// Creates are wanted targets Kong does not have: Target, Weight, Tags.
	Creates []kongapi.Target
	// Updates are our targets whose weight must change: ID, Target, Weight.
	Updates []kongapi.Target
	// Invalid are wanted targets whose address cannot be a Kong target.
	Invalid []InvalidTarget
	// Want is how many targets the upstream holds for us afterwards.
	Want int
}

// Empty reports whether the plan changes nothing.
func (p Plan) Empty() bool { return len(p.Deletes)+len(p.Creates)+len(p.Updates) == 0 }

// InvalidTarget is a wanted target that was skipped.
type InvalidTarget struct {
	ID, Address string
	Err         error
}

// PlanTargets compares the upstream's current targets with the wanted ones.
// Only current targets carrying every tag in tags are considered: the
// others belong to someone else and are never touched. Addresses are
// compared in canonical form (IP addresses parsed, host names lower-cased,
// Kong's port 8000 for a current target without one); a wanted address
// needs an explicit port. Weight 0 means DefaultTargetWeight; weights above
// MaxTargetWeight are capped. Of duplicate wanted addresses the first wins.
func PlanTargets(current []kongapi.Target, wanted []registrar.Target, tags []string) Plan {
	var p Plan
	want := map[string]int{} // canonical address → weight
	for _, t := range wanted {
		addr, err := canonicalAddress(t.Address, "")
		if err != nil {
			p.Invalid = append(p.Invalid, InvalidTarget{ID: t.ID, Address: t.Address, Err: err})
			continue
		}
		if _, dup := want[addr]; !dup {
			want[addr] = targetWeight(t.Weight)
		}
	}
	p.Want = len(want)

	have := map[string]bool{}
	mine := make([]kongapi.Target, 0, len(current))
	for _, t := range current {
		if kongapi.HasTags(t.Tags, tags) {
			mine = append(mine, t)
		}
	}
	slices.SortFunc(mine, func(a, b kongapi.Target) int { return cmp.Compare(a.ID, b.ID) })
	for _, t := range mine {
		addr, err := canonicalAddress(t.Target, kongDefaultPort)
		if err != nil { // ours but unusable: remove it
			p.Deletes = append(p.Deletes, t)
			continue
		}
		w, wanted := want[addr]
		switch {
		case !wanted || have[addr]:
			p.Deletes = append(p.Deletes, t)
		case t.Weight != w:
			p.Updates = append(p.Updates, kongapi.Target{ID: t.ID, Target: t.Target, Weight: w})
		}
		have[addr] = true
	}
	for addr, w := range want {
		if !have[addr] {
			p.Creates = append(p.Creates, kongapi.Target{Target: addr, Weight: w, Tags: slices.Clone(tags)})
		}
	}
	byTarget := func(a, b kongapi.Target) int { return cmp.Or(cmp.Compare(a.Target, b.Target), cmp.Compare(a.ID, b.ID)) }
	slices.SortFunc(p.Deletes, byTarget)
	slices.SortFunc(p.Creates, byTarget)
	slices.SortFunc(p.Updates, byTarget)
	return p
}

// targetWeight maps a registrar weight to Kong's range.
func targetWeight(w int) int {
	switch {
	case w <= 0:
		return DefaultTargetWeight
	case w > MaxTargetWeight:
		return MaxTargetWeight
	}
	return w
}

// canonicalAddress returns host:port in one form for comparison: IPs as Go
// prints them (Kong may expand IPv6), host names lower-cased. defPort is
// used when the address has no port; "" makes a missing port an error.
func canonicalAddress(addr, defPort string) (string, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return "", errors.New("empty address")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if defPort == "" || strings.Count(addr, ":") == 1 {
			return "", fmt.Errorf("address %q: want host:port", addr)
		}
		host, port = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"), defPort
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("address %q: port must be 1..65535", addr)
	}
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	} else if hostnameRe.MatchString(host) {
		host = strings.ToLower(host)
	} else {
		return "", fmt.Errorf("address %q: host is neither an IP address nor a host name", addr)
	}
	return net.JoinHostPort(host, strconv.Itoa(n)), nil
}
