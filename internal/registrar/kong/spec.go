package kong

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	tidev1 "github.com/tidegpu/tidegpu/api/v1"
)

// Secrets holds what a pool's Kong settings reference: the admin token and
// TLS material (PEM), read by the caller from a Secret (operator) or files
// (embedded).
type Secrets struct {
	Token               string
	CA, ClientCert, Key []byte
}

// ConfigFromSpec turns a pool's Kong settings (spec.kong, or the seed's
// spec.kongGatewayIP) into a registrar Config. ok is false when the pool
// uses no Kong.
func ConfigFromSpec(pool string, spec *tidev1.TidePoolSpec, s Secrets) (cfg Config, ok bool, err error) {
	k := spec.Kong
	if k == nil && spec.KongGatewayIP == "" {
		return Config{}, false, nil
	}
	if k == nil {
		k = &tidev1.KongSpec{}
	}
	cfg = Config{
		AdminURL: k.AdminURL, Token: s.Token, PoolTag: "tidegpu-pool:" + pool,
		Upstream: k.Upstream, Service: k.Service, ServicePath: k.ServicePath, Route: k.Route, RoutePaths: k.RoutePaths,
		Passive: DefaultPassiveHealthCheck(),
	}
	if cfg.AdminURL == "" {
		if spec.KongGatewayIP == "" {
			return Config{}, false, errors.New("spec.kong.adminURL: set it, or spec.kongGatewayIP")
		}
		cfg.AdminURL = AdminURLFor(spec.KongGatewayIP)
	}
	if k.ActiveHealthCheckPath != "" {
		cfg.Active = DefaultActiveHealthCheck()
		cfg.Active.HTTPPath = k.ActiveHealthCheckPath
	}
	if len(s.CA) > 0 || len(s.ClientCert) > 0 {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if len(s.CA) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(s.CA) {
				return Config{}, false, errors.New("spec.kong.tlsSecretRef: ca.crt holds no PEM certificate")
			}
			tc.RootCAs = pool
		}
		if len(s.ClientCert) > 0 {
			cert, err := tls.X509KeyPair(s.ClientCert, s.Key)
			if err != nil {
				return Config{}, false, fmt.Errorf("spec.kong.tlsSecretRef: tls.crt/tls.key: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		cfg.TLS = tc
	}
	return cfg, true, nil
}
