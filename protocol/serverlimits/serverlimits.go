package serverlimits

import (
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// HTTPTimeouts bound each connection to an HTTP server: a client that
// sends its headers too slowly, its body too slowly, reads the answer too
// slowly or idles on a kept-alive connection is cut off.
type HTTPTimeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// Server returns an HTTP server of h with these timeouts.
func (t HTTPTimeouts) Server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, WriteTimeout: t.Write, IdleTimeout: t.Idle}
}

// Keepalive of the daemons' gRPC servers.
const (
	// KeepaliveMinTime is the shortest interval between a client's pings a
	// server accepts; a client pinging faster is sent GOAWAY
	// (too_many_pings).
	KeepaliveMinTime = 5 * time.Second
	// KeepaliveTime and KeepaliveTimeout: a server pings an idle
	// connection every KeepaliveTime and drops it when the ping is not
	// answered within KeepaliveTimeout.
	KeepaliveTime    = time.Minute
	KeepaliveTimeout = 20 * time.Second
)

// GRPCServerOptions are the limits of a daemon's gRPC server: at most
// maxConcurrentStreams streams per connection, and the keepalive above.
func GRPCServerOptions(maxConcurrentStreams uint32) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
	}
}
