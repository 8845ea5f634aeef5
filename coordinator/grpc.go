package coordinator

import (
	"context"
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/coordinator/internal/auth"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/serverlimits"
)

// adminRoles is the role each Admin method needs: viewer reads, admin
// writes (policies, overrides). Every method of fuseboxv1.Admin is listed;
// a method missing here is refused to every caller, and
// TestEveryAdminMethodHasARole walks the service descriptor so a new
// method without a role fails the tests, and calls every method as a
// viewer and as an admin.
var adminRoles = map[string]auth.Role{
	fuseboxv1.Admin_GetPolicy_FullMethodName:          auth.RoleViewer,
	fuseboxv1.Admin_GetEffectivePolicy_FullMethodName: auth.RoleViewer,
	fuseboxv1.Admin_ListPolicies_FullMethodName:       auth.RoleViewer,
	fuseboxv1.Admin_PutPolicy_FullMethodName:          auth.RoleAdmin,
	fuseboxv1.Admin_DeletePolicy_FullMethodName:       auth.RoleAdmin,
	fuseboxv1.Admin_ValidatePolicy_FullMethodName:     auth.RoleViewer,
	fuseboxv1.Admin_ForceOpen_FullMethodName:          auth.RoleAdmin,
	fuseboxv1.Admin_ForceClosed_FullMethodName:        auth.RoleAdmin,
	fuseboxv1.Admin_ClearOverride_FullMethodName:      auth.RoleAdmin,
	fuseboxv1.Admin_ListOverrides_FullMethodName:      auth.RoleViewer,
	fuseboxv1.Admin_ListAudit_FullMethodName:          auth.RoleViewer,
	fuseboxv1.Admin_ListMembers_FullMethodName:        auth.RoleViewer,
	fuseboxv1.Admin_GetFleet_FullMethodName:           auth.RoleViewer,
	fuseboxv1.Admin_Watch_FullMethodName:              auth.RoleViewer,
	fuseboxv1.Admin_SimulatePolicy_FullMethodName:     auth.RoleViewer,
}

// MaxSnapshotBytes bounds an Admin response (GetFleet of every dependency
// with every node is the large one); clients should accept as much.
const MaxSnapshotBytes = 64 << 20

// healthPrefix is the gRPC health service, served without credentials.
const healthPrefix = "/grpc.health.v1.Health/"

func (c *Coordinator) newGRPCServer() *grpc.Server {
	opts := []grpc.ServerOption{
		// A fleet snapshot of every dependency with per-node rows is large.
		grpc.MaxSendMsgSize(MaxSnapshotBytes),
		grpc.ChainUnaryInterceptor(c.unaryInterceptor),
		grpc.ChainStreamInterceptor(c.streamInterceptor),
	}
	opts = append(opts, serverlimits.GRPCServerOptions(MaxConcurrentStreams)...)
	if c.tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(c.tlsConf)))
	}
	s := grpc.NewServer(opts...)
	fuseboxv1.RegisterAdminServer(s, &adminServer{c: c})
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(fuseboxv1.Admin_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	return s
}

type identityKey struct{}

// identityFrom returns the caller authenticated by the interceptor.
func identityFrom(ctx context.Context) auth.Identity {
	id, _ := ctx.Value(identityKey{}).(auth.Identity)
	return id
}

// authenticate checks the caller of fullMethod and returns ctx carrying
// its identity.
func (c *Coordinator) authenticate(ctx context.Context, fullMethod string) (context.Context, error) {
	if strings.HasPrefix(fullMethod, healthPrefix) {
		return ctx, nil
	}
	var authz string
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) > 0 {
		authz = v[0]
	}
	if c.authn().LoopbackOnly() {
		if h := proxyHeader(slices.Collect(maps.Keys(md))); h != "" {
			c.metrics.authFailures.WithLabelValues("grpc", "permission_denied").Inc()
			return ctx, fmt.Errorf("%w: this coordinator has no tokens file and trusts loopback callers, so it refuses calls a proxy forwards (metadata %s): configure --tokens-file to serve through a proxy", auth.ErrPermissionDenied, h)
		}
	}
	var addr net.Addr
	p, ok := peer.FromContext(ctx)
	if ok {
		addr = p.Addr
	}
	id, err := c.authn().Authenticate(authz, addr)
	if err != nil {
		c.metrics.authFailures.WithLabelValues("grpc", "unauthenticated").Inc()
		return ctx, err
	}
	if cn := clientCertName(p); cn != "" {
		id.Name += " cert:" + cn
	}
	need, ok := adminRoles[fullMethod]
	if !ok {
		c.metrics.authFailures.WithLabelValues("grpc", "permission_denied").Inc()
		return ctx, fmt.Errorf("%w: %s has no role in the coordinator's table", auth.ErrPermissionDenied, fullMethod)
	}
	if err := auth.Authorize(id, need); err != nil {
		c.metrics.authFailures.WithLabelValues("grpc", "permission_denied").Inc()
		return ctx, err
	}
	return context.WithValue(ctx, identityKey{}, id), nil
}

// clientCertName is the common name of a verified client certificate (mTLS).
func clientCertName(p *peer.Peer) string {
	if p == nil {
		return ""
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return ""
	}
	return ti.State.VerifiedChains[0][0].Subject.CommonName
}

func (c *Coordinator) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	ctx, err := c.authenticate(ctx, info.FullMethod)
	var resp any
	if err == nil {
		resp, err = handler(ctx, req)
	}
	err = toStatus(err)
	c.observe(info.FullMethod, err, time.Since(start))
	return resp, err
}

func (c *Coordinator) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	ctx, err := c.authenticate(ss.Context(), info.FullMethod)
	if err == nil {
		err = handler(srv, &identityStream{ServerStream: ss, ctx: ctx})
	}
	err = toStatus(err)
	c.observe(info.FullMethod, err, time.Since(start))
	return err
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identityStream) Context() context.Context { return s.ctx }

func (c *Coordinator) observe(fullMethod string, err error, d time.Duration) {
	method := path.Base(fullMethod)
	code := status.Code(err)
	c.metrics.requests.WithLabelValues(method, code.String()).Inc()
	c.metrics.duration.WithLabelValues(method).Observe(d.Seconds())
	switch code {
	case codes.Internal, codes.Unavailable, codes.FailedPrecondition:
		c.log.Warn("admin request failed", "method", method, "code", code.String(), "err", status.Convert(err).Message())
	}
}
