package coordinator

import (
	"slices"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/serverlimits"
)

// HTTPTimeouts bound each connection to the coordinator's HTTP server: a
// client that sends its headers or body too slowly, reads an answer too
// slowly or idles on a kept-alive connection is cut off. The event stream
// (/api/v1/events) lifts the write timeout for itself.
type HTTPTimeouts = serverlimits.HTTPTimeouts

// DefaultHTTPTimeouts are the coordinator's HTTP timeouts.
var DefaultHTTPTimeouts = HTTPTimeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: time.Minute, Idle: 2 * time.Minute}

// WithHTTPTimeouts replaces DefaultHTTPTimeouts (tests shorten them).
func WithHTTPTimeouts(t HTTPTimeouts) Option { return func(o *options) { o.httpTimeouts = &t } }

func (c *Coordinator) httpTimeouts() HTTPTimeouts {
	if c.opts.httpTimeouts != nil {
		return *c.opts.httpTimeouts
	}
	return DefaultHTTPTimeouts
}

// Limits of the Admin API's gRPC server.
const (
	// MaxConcurrentStreams is the most streams (calls, Watch streams) one
	// connection may have open at once.
	MaxConcurrentStreams = 128
	// KeepaliveMinTime is the shortest interval between a client's pings the
	// coordinator accepts; a client pinging faster is sent GOAWAY
	// (too_many_pings).
	KeepaliveMinTime = serverlimits.KeepaliveMinTime
)

// proxyHeader returns the name of the first proxy header among names
// (Forwarded, X-Forwarded-*, X-Real-IP; any case), "" when there is none.
// Without a tokens file the coordinator trusts loopback callers, and a
// reverse proxy on the same host is one: a request it forwards for someone
// else is refused.
func proxyHeader(names []string) string {
	slices.Sort(names)
	for _, n := range names {
		l := strings.ToLower(n)
		if l == "forwarded" || strings.HasPrefix(l, "x-forwarded-") || l == "x-real-ip" {
			return n
		}
	}
	return ""
}
