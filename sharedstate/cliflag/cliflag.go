package cliflag

import "net"

// IsLoopback reports whether a listen address, host:port, names a loopback
// host: "localhost" or an IP in 127.0.0.0/8 or ::1. An empty host (all
// interfaces), 0.0.0.0, every other name and a malformed address are not
// loopback.
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
