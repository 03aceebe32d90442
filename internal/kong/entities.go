package kong

// Ref points at another entity by id (Kong's foreign-key shape
// {"id": "..."}).
type Ref struct {
	ID string `json:"id"`
}

// Upstream is a virtual hostname whose targets Kong balances over.
// Only the fields TideGPU manages are modelled; others keep Kong's values.
type Upstream struct {
	ID           string        `json:"id,omitempty"`
	Name         string        `json:"name,omitempty"`
	Tags         []string      `json:"tags,omitempty"`
	Healthchecks *Healthchecks `json:"healthchecks,omitempty"`
}

// Healthchecks is an upstream's health-check configuration
// (https://developer.konghq.com/gateway/traffic-control/health-checks-circuit-breakers/).
type Healthchecks struct {
	Active  *ActiveHealthcheck  `json:"active,omitempty"`
	Passive *PassiveHealthcheck `json:"passive,omitempty"`
}

// ActiveHealthcheck probes each target with GET http_path. An interval of 0
// turns probing off for targets in that state; thresholds of 0 turn that
// counter off.
type ActiveHealthcheck struct {
	Type        string          `json:"type,omitempty"`
	HTTPPath    string          `json:"http_path,omitempty"`
	Timeout     float64         `json:"timeout"`
	Concurrency int             `json:"concurrency,omitempty"`
	Healthy     ActiveHealthy   `json:"healthy"`
	Unhealthy   ActiveUnhealthy `json:"unhealthy"`
}

// ActiveHealthy says how often healthy targets are probed and how many
// successes mark a target healthy.
type ActiveHealthy struct {
	Interval     float64 `json:"interval"`
	HTTPStatuses []int   `json:"http_statuses,omitempty"`
	Successes    int     `json:"successes"`
}

// ActiveUnhealthy says how often unhealthy targets are probed and how many
// failures of each kind mark a target unhealthy.
type ActiveUnhealthy struct {
	Interval     float64 `json:"interval"`
	HTTPStatuses []int   `json:"http_statuses,omitempty"`
	TCPFailures  int     `json:"tcp_failures"`
	Timeouts     int     `json:"timeouts"`
	HTTPFailures int     `json:"http_failures"`
}

// PassiveHealthcheck (a circuit breaker) judges targets by the proxied
// traffic. It can only mark targets unhealthy; it never re-enables them.
type PassiveHealthcheck struct {
	Type      string           `json:"type,omitempty"`
	Healthy   PassiveHealthy   `json:"healthy"`
	Unhealthy PassiveUnhealthy `json:"unhealthy"`
}

// PassiveHealthy lists the statuses that count as successes.
type PassiveHealthy struct {
	HTTPStatuses []int `json:"http_statuses,omitempty"`
	Successes    int   `json:"successes"`
}

// PassiveUnhealthy lists the failure thresholds of the circuit breaker.
type PassiveUnhealthy struct {
	HTTPStatuses []int `json:"http_statuses,omitempty"`
	TCPFailures  int   `json:"tcp_failures"`
	Timeouts     int   `json:"timeouts"`
	HTTPFailures int   `json:"http_failures"`
}

// Service is an upstream service as Kong proxies to it. Host may name an
// Upstream, which makes Kong balance over that upstream's targets.
type Service struct {
	ID       string `json:"id,omitempty"`
	Name     string `json:"name,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Host     string `json:"host,omitempty"`
	Port     int    `json:"port,omitempty"`
	Path     string `json:"path,omitempty"`
	// ConnectTimeout is in milliseconds (Kong's default 60000).
	ConnectTimeout int      `json:"connect_timeout,omitempty"`
	Tags           []string `json:"tags,omitempty"`
}

// Route matches client requests and hands them to its Service.
type Route struct {
	ID      string   `json:"id,omitempty"`
	Name    string   `json:"name,omitempty"`
	Paths   []string `json:"paths,omitempty"`
	Service *Ref     `json:"service,omitempty"`
	Tags    []string `json:"tags,omitempty"`
}

// Target is one backend (host:port) of an upstream.
type Target struct {
	ID string `json:"id,omitempty"`
	// Target is host:port; Kong adds port 8000 when none is given.
	Target string `json:"target,omitempty"`
	// Weight is 0..65535; Kong's default is 100. Always sent, since 0 is
	// meaningful (the target takes no traffic).
	Weight   int      `json:"weight"`
	Tags     []string `json:"tags,omitempty"`
	Upstream *Ref     `json:"upstream,omitempty"`
}

// HasTags reports whether every tag in want is among have.
func HasTags(have, want []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
