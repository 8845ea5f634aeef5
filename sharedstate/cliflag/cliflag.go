package cliflag

import (
	"net"
	"strings"
)

// SplitList splits a comma-separated flag value ("a, b,,c") into its
// non-empty, trimmed items (["a" "b" "c"]); nil when there are none.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

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
