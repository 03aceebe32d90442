package kong

import (
	"crypto/tls"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	kongapi "github.com/tidegpu/tidegpu/internal/kong"
)

// The seed's names for what fronts the pool in Kong.
const (
	DefaultUpstream    = "llama2-YiFlow-upstream"
	DefaultService     = "ai-YiFlow-proxy"
	DefaultServicePath = "/api/chat"
	DefaultRoute       = "ollama-chat"
	DefaultRoutePath   = "~/ollama-chat$"
)

// Other defaults.
const (
	// DefaultAdminPort is the port of Kong's Admin API.
	DefaultAdminPort = 8001
	// DefaultEnsureInterval is how often the upstream, service and route are
	// re-checked for drift when nothing failed.
	DefaultEnsureInterval = 5 * time.Minute
	// DefaultConnectTimeout is the service's connect_timeout. Kong's own
	// default is 60 s: a request to a reclaimed instance whose address no
	// longer answers hangs that long before Kong tries another target.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultParallelism is how many target changes run at once.
	DefaultParallelism = 4
	// DefaultTargetWeight is the weight of a target whose Weight is 0.
	DefaultTargetWeight = 100
	// MaxTargetWeight is Kong's largest target weight.
	MaxTargetWeight = 65535
)

// ManagedTag marks every Kong entity TideGPU created or owns. A target is
// TideGPU's when it carries ManagedTag and its pool's tag.
const ManagedTag = "tidegpu-managed"

// AdminURLFor returns the Admin API URL for the TidePool field
// kongGatewayIP: an IP address or host name gets http:// and port 8001, a
// host:port gets http://, and a URL is kept as it is.
func AdminURLFor(kongGatewayIP string) string {
	a := strings.TrimSpace(kongGatewayIP)
	if strings.Contains(a, "://") {
		return a
	}
	if _, _, err := net.SplitHostPort(a); err == nil {
		return "http://" + a
	}
	return "http://" + net.JoinHostPort(strings.Trim(a, "[]"), fmt.Sprint(DefaultAdminPort))
}

// HealthCheckConfig configures one kind of Kong health check on the
// upstream (https://developer.konghq.com/gateway/traffic-control/health-checks-circuit-breakers/).
// The zero value means the defaults (DefaultPassiveHealthCheck,
// DefaultActiveHealthCheck); a non-zero value is used as given, where 0
// means off for that threshold or interval, as in Kong.
type HealthCheckConfig struct {
	// Disabled turns this kind of check off (every threshold and interval 0).
	Disabled bool
	// HTTPPath is probed with GET (active only).
	HTTPPath string
	// Interval between probes of healthy targets (active only); 0 probes
	// only unhealthy targets.
	Interval time.Duration
	// UnhealthyInterval between probes of unhealthy targets (active only);
	// this is what re-enables a target that a check ejected.
	UnhealthyInterval time.Duration
	// Timeout of one probe (active only).
	Timeout time.Duration
	// Successes in a row that mark a target healthy.
	Successes int
	// TCPFailures, Timeouts and HTTPFailures in a row that mark a target
	// unhealthy.
	TCPFailures, Timeouts, HTTPFailures int
	// HealthyStatuses and UnhealthyStatuses classify answers; empty means
	// Kong's defaults.
	HealthyStatuses, UnhealthyStatuses []int
}

// DefaultPassiveHealthCheck ejects a target after 2 connection failures, 2
// timeouts or 3 server errors in a row in the proxied traffic, so that Kong
// stops sending requests to an instance that died between two syncs. One
// success resets the counters. Passive checks never re-enable a target;
// the active check does.
func DefaultPassiveHealthCheck() HealthCheckConfig {
	return HealthCheckConfig{
		Successes:         1,
		TCPFailures:       2,
		Timeouts:          2,
		HTTPFailures:      3,
		UnhealthyStatuses: []int{500, 502, 503, 504},
	}
}

// DefaultActiveHealthCheck probes only unhealthy targets (every 5 s, GET /,
// healthy after 2 successes): it re-enables a target that the passive check
// ejected for a passing fault. Set Interval to probe healthy targets too.
func DefaultActiveHealthCheck() HealthCheckConfig {
	return HealthCheckConfig{
		HTTPPath:          "/",
		UnhealthyInterval: 5 * time.Second,
		Timeout:           2 * time.Second,
		Successes:         2,
		TCPFailures:       2,
		Timeouts:          2,
		HTTPFailures:      3,
	}
}

// Config configures a Registrar. Every name has the seed's default.
type Config struct {
	// AdminURL is the Admin API, e.g. http://10.0.0.5:8001 (required).
	AdminURL string
	// Token is sent as Kong-Admin-Token when set. Never logged or printed.
	Token string
	// TLS configures https Admin URLs (CA, client certificate for mTLS).
	TLS *tls.Config
	// Timeout bounds one Admin API call (default 10 s).
	Timeout time.Duration
	// UserAgent of the calls (default "tidegpu-kong-registrar").
	UserAgent string

	// Upstream, Service and Route are the names of Kong entities the
	// registrar keeps; ServicePath is the service's path and RoutePaths the
	// route's paths.
	Upstream, Service, ServicePath, Route string
	RoutePaths                            []string
	// ConnectTimeout is the service's connect_timeout (default 5 s).
	ConnectTimeout time.Duration

	// PoolTag identifies the pool among TideGPU's targets, e.g.
	// "tidegpu-pool:ns/name"; empty means "tidegpu-pool:" + the pool name
	// Sync is given. Characters outside [A-Za-z0-9._~-] are written as '~'
	// (Kong's tag filter accepts no others, and tags may not hold ',' or
	// '/'), so the example becomes "tidegpu-pool~ns~name".
	PoolTag string

	// Passive and Active are the upstream's health checks; zero values mean
	// DefaultPassiveHealthCheck and DefaultActiveHealthCheck.
	Passive, Active HealthCheckConfig

	// EnsureInterval is how often the upstream, service and route are
	// checked for drift when nothing failed (default 5 min). They are also
	// checked on the first sync and after any error.
	EnsureInterval time.Duration
	// PageSize of list calls (default 1000, Kong's maximum).
	PageSize int
	// Parallelism is how many target changes run at once (default 4).
	Parallelism int

	// Clock is injected for tests (default the real clock).
	Clock clock.Clock
	// Registry receives the registrar's metrics when set.
	Registry prometheus.Registerer
}

// String prints the configuration without the token.
func (c Config) String() string {
	tok := ""
	if c.Token != "" {
		tok = " token=[redacted]"
	}
	return fmt.Sprintf("kong registrar{admin=%s%s upstream=%s service=%s path=%s route=%s paths=%v poolTag=%s}",
		redactURL(c.AdminURL), tok, c.Upstream, c.Service, c.ServicePath, c.Route, c.RoutePaths, c.PoolTag)
}

// GoString is String, so that %#v does not print the token either.
func (c Config) GoString() string { return c.String() }

// redactURL hides a password in a URL's user info.
func redactURL(s string) string {
	if i := strings.Index(s, "@"); i >= 0 {
		if j := strings.Index(s, "://"); j >= 0 && j < i {
			return s[:j+3] + "[redacted]" + s[i:]
		}
	}
	return s
}

var (
	nameRe     = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)
	hostnameRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?)*$`)
	tagUnsafe  = regexp.MustCompile(`[^A-Za-z0-9._~-]`)
)

// TagFor turns s into a tag Kong accepts and can filter on.
func TagFor(s string) string { return tagUnsafe.ReplaceAllString(s, "~") }

// withDefaults fills the zero fields of c.
func (c Config) withDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Upstream, DefaultUpstream)
	def(&c.Service, DefaultService)
	def(&c.ServicePath, DefaultServicePath)
	def(&c.Route, DefaultRoute)
	def(&c.UserAgent, "tidegpu-kong-registrar")
	if len(c.RoutePaths) == 0 {
		c.RoutePaths = []string{DefaultRoutePath}
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if reflect.ValueOf(c.Passive).IsZero() {
		c.Passive = DefaultPassiveHealthCheck()
	}
	if reflect.ValueOf(c.Active).IsZero() {
		c.Active = DefaultActiveHealthCheck()
	}
	if c.EnsureInterval == 0 {
		c.EnsureInterval = DefaultEnsureInterval
	}
	if c.PageSize == 0 {
		c.PageSize = kongapi.MaxPageSize
	}
	if c.Parallelism == 0 {
		c.Parallelism = DefaultParallelism
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.PoolTag != "" {
		c.PoolTag = TagFor(c.PoolTag)
	}
	return c
}

// validate checks a configuration with defaults filled; errors name the
// field and what to write instead.
func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("kong registrar: Config.%s: %s", field, fmt.Sprintf(format, args...))
	}
	if strings.TrimSpace(c.AdminURL) == "" {
		return bad("AdminURL", "required (e.g. %s)", AdminURLFor("10.0.0.5"))
	}
	if !hostnameRe.MatchString(c.Upstream) || net.ParseIP(c.Upstream) != nil {
		return bad("Upstream", "%q is not a valid hostname (Kong upstream names are hostnames without port)", c.Upstream)
	}
	if !nameRe.MatchString(c.Service) {
		return bad("Service", "%q may only contain letters, digits and . - _ ~", c.Service)
	}
	if !nameRe.MatchString(c.Route) {
		return bad("Route", "%q may only contain letters, digits and . - _ ~", c.Route)
	}
	if !strings.HasPrefix(c.ServicePath, "/") || strings.Contains(c.ServicePath, "//") {
		return bad("ServicePath", "%q must start with / and have no empty segment", c.ServicePath)
	}
	for i, p := range c.RoutePaths {
		if !(strings.HasPrefix(p, "/") || strings.HasPrefix(p, "~/")) || strings.Contains(p, "//") {
			return bad(fmt.Sprintf("RoutePaths[%d]", i), "%q must start with / (prefix) or ~/ (regex)", p)
		}
	}
	if c.ConnectTimeout < time.Millisecond || c.ConnectTimeout.Milliseconds() > 1<<31-2 {
		return bad("ConnectTimeout", "%v must be between 1ms and about 24 days", c.ConnectTimeout)
	}
	if c.Timeout < 0 {
		return bad("Timeout", "%v must not be negative", c.Timeout)
	}
	if c.EnsureInterval < 0 {
		return bad("EnsureInterval", "%v must not be negative", c.EnsureInterval)
	}
	if c.PageSize < 1 || c.PageSize > kongapi.MaxPageSize {
		return bad("PageSize", "%d must be 1..%d", c.PageSize, kongapi.MaxPageSize)
	}
	if c.Parallelism < 1 || c.Parallelism > 64 {
		return bad("Parallelism", "%d must be 1..64", c.Parallelism)
	}
	if strings.ContainsAny(c.Token, "\r\n") {
		return bad("Token", "must not contain line breaks")
	}
	if err := c.Passive.validate(false); err != nil {
		return bad("Passive", "%v", err)
	}
	if err := c.Active.validate(true); err != nil {
		return bad("Active", "%v", err)
	}
	return nil
}

func (h HealthCheckConfig) validate(active bool) error {
	for _, f := range []struct {
		name string
		n    int
	}{{"Successes", h.Successes}, {"TCPFailures", h.TCPFailures}, {"Timeouts", h.Timeouts}, {"HTTPFailures", h.HTTPFailures}} {
		if f.n < 0 || f.n > 255 {
			return fmt.Errorf("%s %d must be 0..255", f.name, f.n)
		}
	}
	for _, s := range append(append([]int(nil), h.HealthyStatuses...), h.UnhealthyStatuses...) {
		if s < 100 || s > 999 {
			return fmt.Errorf("HTTP status %d must be 100..999", s)
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Interval", h.Interval}, {"UnhealthyInterval", h.UnhealthyInterval}, {"Timeout", h.Timeout}} {
		if f.d < 0 || f.d > 65535*time.Second {
			return fmt.Errorf("%s %v must be 0..65535s", f.name, f.d)
		}
		if !active && f.d != 0 {
			return fmt.Errorf("%s applies to active checks only", f.name)
		}
	}
	if active && h.HTTPPath != "" && !strings.HasPrefix(h.HTTPPath, "/") {
		return fmt.Errorf("HTTPPath %q must start with /", h.HTTPPath)
	}
	if !active && h.HTTPPath != "" {
		return fmt.Errorf("HTTPPath applies to active checks only")
	}
	return nil
}

// Kong's default status lists (the upstream schema's defaults).
var (
	kongActiveHealthy    = []int{200, 302}
	kongActiveUnhealthy  = []int{429, 404, 500, 501, 502, 503, 504, 505}
	kongPassiveHealthy   = []int{200, 201, 202, 203, 204, 205, 206, 207, 208, 226, 300, 301, 302, 303, 304, 305, 306, 307, 308}
	kongPassiveUnhealthy = []int{429, 500, 503}
)

func orDefault(s, def []int) []int {
	if len(s) == 0 {
		return append([]int(nil), def...)
	}
	return append([]int(nil), s...)
}

// healthchecks renders the upstream's healthchecks record.
func healthchecks(passive, active HealthCheckConfig) *kongapi.Healthchecks {
	p := &kongapi.PassiveHealthcheck{
		Type:      "http",
		Healthy:   kongapi.PassiveHealthy{HTTPStatuses: orDefault(passive.HealthyStatuses, kongPassiveHealthy)},
		Unhealthy: kongapi.PassiveUnhealthy{HTTPStatuses: orDefault(passive.UnhealthyStatuses, kongPassiveUnhealthy)},
	}
	if !passive.Disabled {
		p.Healthy.Successes = passive.Successes
		p.Unhealthy.TCPFailures = passive.TCPFailures
		p.Unhealthy.Timeouts = passive.Timeouts
		p.Unhealthy.HTTPFailures = passive.HTTPFailures
	}
	path := active.HTTPPath
	if path == "" {
		path = "/"
	}
	timeout := active.Timeout.Seconds()
	if timeout == 0 {
		timeout = 1
	}
	a := &kongapi.ActiveHealthcheck{
		Type:        "http",
		HTTPPath:    path,
		Timeout:     timeout,
		Concurrency: 10,
		Healthy:     kongapi.ActiveHealthy{HTTPStatuses: orDefault(active.HealthyStatuses, kongActiveHealthy)},
		Unhealthy:   kongapi.ActiveUnhealthy{HTTPStatuses: orDefault(active.UnhealthyStatuses, kongActiveUnhealthy)},
	}
	if !active.Disabled {
		a.Healthy.Interval = active.Interval.Seconds()
		a.Healthy.Successes = active.Successes
		a.Unhealthy.Interval = active.UnhealthyInterval.Seconds()
		a.Unhealthy.TCPFailures = active.TCPFailures
		a.Unhealthy.Timeouts = active.Timeouts
		a.Unhealthy.HTTPFailures = active.HTTPFailures
	}
	return &kongapi.Healthchecks{Active: a, Passive: p}
}
