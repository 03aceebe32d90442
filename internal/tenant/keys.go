// Package tenant authenticates the gateway's clients by API key and holds
// each key to its allowed models and pools and to its tenant's limits
// (requests per minute, tokens per minute, concurrent requests), which all
// the keys of a tenant share.
//
// Keys are configured as SHA-256 digests, never as plain keys: the file (a
// mounted Secret in a cluster) holds nothing a reader could use, and a
// presented key is hashed and compared with each digest in constant time.
// Plain keys never reach a log, a metric, an error or the backend (the
// key headers are removed before the request is forwarded, unless
// Options.ForwardKey).
package tenant

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"math/big"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tidegpu/tidegpu/internal/fairq"
)

// File is the keys file:
//
//	keys:
//	  - name: team-a-prod           # names the key in errors; not secret
//	    sha256: 9f86d08...          # hex SHA-256 of the key (tidegpu keys hash)
//	    tenant: team-a
//	    labels: {team: a, project: chat, env: prod}
//	    models: [llama3]            # empty: every model
//	    pools: [chat]               # empty: every pool
//	    limits:                     # the tenant's, shared by all its keys
//	      requestsPerMinute: 600    # 0 or absent: no limit
//	      tokensPerMinute: 100000
//	      concurrent: 8
//	      monthlyBudget: "250.00"   # USD a month for the tenant (Options.Spend)
//	    weight: 2                   # share in a saturated pool's queue (1-1000, default 1)
//	    priority: high              # low, normal (default) or high
//
// Limits belong to the tenant, not to the entry: every key of a tenant draws
// on one set of buckets. So the entries of one tenant that give limits must
// give the same limits; the others (no limits field) share them. Two entries
// of one tenant with different limits are refused, naming the second.
//
// forwardKey: true (top level) keeps the key headers on the requests to the
// backends (for backends that check keys themselves); by default they are
// removed.
type File struct {
	ForwardKey bool      `json:"forwardKey,omitempty"`
	Keys       []KeySpec `json:"keys"`
}

// KeySpec is one key of the file.
type KeySpec struct {
	Name   string            `json:"name"`
	SHA256 string            `json:"sha256"`
	Tenant string            `json:"tenant"`
	Labels map[string]string `json:"labels,omitempty"`
	Models []string          `json:"models,omitempty"`
	Pools  []string          `json:"pools,omitempty"`
	Limits Limits            `json:"limits,omitempty"`
	// Weight and Priority order the key's requests in the fair queue of a
	// saturated pool (package fairq; gateway.Tenant).
	Weight   int    `json:"weight,omitempty"`
	Priority string `json:"priority,omitempty"`
}

// Limits are a tenant's limits; zero means no limit.
type Limits struct {
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`
	TokensPerMinute   int64 `json:"tokensPerMinute,omitempty"`
	Concurrent        int64 `json:"concurrent,omitempty"`
	// MonthlyBudget is in US dollars, a decimal string ("250", "99.50").
	// The middleware refuses the key's requests (429 budget_exceeded) once
	// its tenant's spend this month reaches it, when given Options.Spend.
	MonthlyBudget string `json:"monthlyBudget,omitempty"`
}

// labelKeys are the labels a key may carry.
var labelKeys = map[string]bool{"team": true, "project": true, "env": true}

var (
	reName   = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)
	reDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)
	reBudget = regexp.MustCompile(`^[0-9]{1,12}(\.[0-9]{1,6})?$`)
)

// Key is a validated key.
type Key struct {
	Name, Tenant string
	Labels       map[string]string
	Models       []string
	Pools        []string
	// Limits are the tenant's (the same for every key of the tenant).
	Limits Limits
	// Budget is MonthlyBudget as a number (nil: none).
	Budget *big.Rat
	// Weight (1..fairq.MaxWeight) and Priority: the key's place in the
	// fair queue of a saturated pool.
	Weight   int
	Priority fairq.Priority
	digest   [sha256.Size]byte
}

// Keys is a validated set of keys.
type Keys struct {
	keys       []*Key
	forwardKey bool
}

// Len is the number of keys.
func (ks *Keys) Len() int { return len(ks.keys) }

// Tenants returns the configured tenant names, each once, in file order.
func (ks *Keys) Tenants() []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range ks.keys {
		if !seen[k.Tenant] {
			seen[k.Tenant] = true
			out = append(out, k.Tenant)
		}
	}
	return out
}

// Hash returns the hex SHA-256 of key, the form the keys file holds.
func Hash(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

// Lookup returns the key whose digest is the SHA-256 of presented, or nil.
// Every configured digest is compared, in constant time, so the time taken
// does not tell which key (or how much of one) matched.
func (ks *Keys) Lookup(presented string) *Key {
	d := sha256.Sum256([]byte(presented))
	var found *Key
	for _, k := range ks.keys {
		if subtle.ConstantTimeCompare(d[:], k.digest[:]) == 1 {
			found = k
		}
	}
	return found
}

// LoadFile reads and validates a keys file; flag names the option that gave
// it, for the errors.
func LoadFile(flag, path string) (*Keys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	ks, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return ks, nil
}

// Parse validates a keys file (outside input). Unknown fields are errors,
// and every error names the field and says what is wanted. The error never
// quotes a digest.
func Parse(b []byte) (*Keys, error) {
	var f File
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("not a keys file (keys: [{name, sha256, tenant, labels, models, pools, limits}]): %w", err)
	}
	if len(f.Keys) == 0 {
		return nil, fmt.Errorf("keys: no key: give at least one {name, sha256, tenant}")
	}
	ks := &Keys{forwardKey: f.ForwardKey}
	names := map[string]bool{}
	digests := map[[sha256.Size]byte]string{}
	type limitsFrom struct {
		key   *Key
		field string
	}
	tenants := map[string]limitsFrom{} // the first entry giving each tenant's limits
	weights := map[string]*Key{}       // the first key of each tenant
	for i, s := range f.Keys {
		field := fmt.Sprintf("keys[%d]", i)
		if !reName.MatchString(s.Name) {
			return nil, fmt.Errorf("%s.name: %q: want lower-case letters, digits, '.', '_' or '-' (1-63, starting and ending alphanumeric)", field, s.Name)
		}
		field = fmt.Sprintf("keys[%d] (%s)", i, s.Name)
		if names[s.Name] {
			return nil, fmt.Errorf("%s.name: used twice: give each key its own name", field)
		}
		names[s.Name] = true
		if !reDigest.MatchString(s.SHA256) {
			return nil, fmt.Errorf("%s.sha256: want the 64 lower-case hex digits of the key's SHA-256 (`tidegpu keys hash` prints it), not the key itself", field)
		}
		if !reName.MatchString(s.Tenant) {
			return nil, fmt.Errorf("%s.tenant: %q: want lower-case letters, digits, '.', '_' or '-' (1-63, starting and ending alphanumeric)", field, s.Tenant)
		}
		k := &Key{Name: s.Name, Tenant: s.Tenant, Labels: s.Labels, Models: s.Models, Pools: s.Pools, Limits: s.Limits}
		if _, err := hex.Decode(k.digest[:], []byte(s.SHA256)); err != nil {
			return nil, fmt.Errorf("%s.sha256: %v", field, err)
		}
		if other, dup := digests[k.digest]; dup {
			return nil, fmt.Errorf("%s.sha256: the same key as %s: give each entry its own key", field, other)
		}
		digests[k.digest] = s.Name
		for lk, lv := range s.Labels {
			if !labelKeys[lk] {
				return nil, fmt.Errorf("%s.labels.%s: unknown label: use team, project or env", field, lk)
			}
			if len(lv) == 0 || len(lv) > 63 || strings.ContainsAny(lv, "\r\n\t\"") {
				return nil, fmt.Errorf("%s.labels.%s: want 1-63 characters without quotes or control characters", field, lk)
			}
		}
		for j, m := range s.Models {
			if strings.TrimSpace(m) == "" || len(m) > 200 {
				return nil, fmt.Errorf("%s.models[%d]: want a model name (1-200 characters)", field, j)
			}
		}
		for j, p := range s.Pools {
			if !reName.MatchString(p) {
				return nil, fmt.Errorf("%s.pools[%d]: %q: want a pool name (a TidePool's metadata.name)", field, j, p)
			}
		}
		l := s.Limits
		for _, v := range []struct {
			name string
			n    int64
		}{{"requestsPerMinute", l.RequestsPerMinute}, {"tokensPerMinute", l.TokensPerMinute}, {"concurrent", l.Concurrent}} {
			if v.n < 0 || v.n > 1e12 {
				return nil, fmt.Errorf("%s.limits.%s: %d: want 0 (no limit) up to 1e12", field, v.name, v.n)
			}
		}
		if l.MonthlyBudget != "" {
			if !reBudget.MatchString(l.MonthlyBudget) {
				return nil, fmt.Errorf("%s.limits.monthlyBudget: %q: want US dollars as a decimal string, e.g. \"250\" or \"99.50\"", field, l.MonthlyBudget)
			}
			k.Budget, _ = new(big.Rat).SetString(l.MonthlyBudget)
		}
		if l != (Limits{}) {
			t, ok := tenants[s.Tenant]
			switch {
			case !ok:
				tenants[s.Tenant] = limitsFrom{k, field}
			case !sameLimits(t.key.Limits, t.key.Budget, l, k.Budget):
				return nil, fmt.Errorf("%s.limits: tenant %s already has the limits %s from %s; limits belong to the tenant (its keys share them): give every key of %s the same limits, or leave limits out on all but one",
					field, s.Tenant, t.key.Limits, t.field, s.Tenant)
			}
		}
		if err := parseFairShare(field, s, k, weights); err != nil {
			return nil, err
		}
		ks.keys = append(ks.keys, k)
	}
	// The entries without limits share their tenant's.
	for _, k := range ks.keys {
		if t, ok := tenants[k.Tenant]; ok {
			k.Limits, k.Budget = t.key.Limits, t.key.Budget
		}
	}
	return ks, nil
}

// sameLimits reports whether two entries give the same limits; budgets are
// compared as numbers ("50" is "50.00").
func sameLimits(a Limits, ab *big.Rat, b Limits, bb *big.Rat) bool {
	if a.RequestsPerMinute != b.RequestsPerMinute || a.TokensPerMinute != b.TokensPerMinute || a.Concurrent != b.Concurrent {
		return false
	}
	if ab == nil || bb == nil {
		return ab == nil && bb == nil
	}
	return ab.Cmp(bb) == 0
}

// String writes the limits as the keys file does, for errors.
func (l Limits) String() string {
	var parts []string
	for _, v := range []struct {
		name string
		n    int64
	}{{"requestsPerMinute", l.RequestsPerMinute}, {"tokensPerMinute", l.TokensPerMinute}, {"concurrent", l.Concurrent}} {
		if v.n != 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", v.name, v.n))
		}
	}
	if l.MonthlyBudget != "" {
		parts = append(parts, fmt.Sprintf("monthlyBudget: %q", l.MonthlyBudget))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// parseFairShare reads a key's weight and priority. A tenant is one flow
// of the fair queue, so its keys share one weight; their priorities may
// differ (a batch key at low beside an interactive one).
func parseFairShare(field string, s KeySpec, k *Key, first map[string]*Key) error {
	switch {
	case s.Weight == 0:
		k.Weight = fairq.DefaultWeight
	case s.Weight < 1 || s.Weight > fairq.MaxWeight:
		return fmt.Errorf("%s.weight: %d: want 1 to %d (the tenant's share when the pool is saturated; absent: %d)", field, s.Weight, fairq.MaxWeight, fairq.DefaultWeight)
	default:
		k.Weight = s.Weight
	}
	p, err := fairq.ParsePriority(s.Priority)
	if err != nil {
		return fmt.Errorf("%s.priority: %w (absent: normal)", field, err)
	}
	k.Priority = p
	if o := first[k.Tenant]; o == nil {
		first[k.Tenant] = k
	} else if o.Weight != k.Weight {
		return fmt.Errorf("%s.weight: %d, but key %s of tenant %s has %d: give every key of a tenant the same weight (the tenant shares one place in the queue)", field, k.Weight, o.Name, k.Tenant, o.Weight)
	}
	return nil
}
