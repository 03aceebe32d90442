package admin

import (
	"fmt"
	"net"
	"strings"
)

// CheckExposure refuses an admin address that listens beyond loopback when
// no token guards it: the admin API reclaims instances and takes agents'
// notices, so anyone who can reach it can empty a pool. flag names the
// setting for the message. An address whose host is empty, a wildcard
// (0.0.0.0, ::), a name other than localhost or an IP that is not loopback
// is beyond loopback.
func CheckExposure(flag, addr, token string) error {
	if addr == "" || addr == "0" || strings.TrimSpace(token) != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %v (want host:port, such as 127.0.0.1:9090)", flag, addr, err)
	}
	if isLoopback(host) {
		return nil
	}
	return fmt.Errorf("%s %s listens beyond loopback without a token, so anyone who reaches it can reclaim instances: "+
		"set TIDEGPU_ADMIN_TOKEN to require one, or listen on 127.0.0.1", flag, addr)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
