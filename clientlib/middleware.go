package clientlib

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// MaxPropagatedTimeout bounds the Fusebox-Timeout-Ms a server accepts.
const MaxPropagatedTimeout = 24 * time.Hour

// MaxRetryOwnerLen bounds a retry owner (WithRetryOwner, Fusebox-Retry-Owner)
// in bytes.
const MaxRetryOwnerLen = 256

type retryOwnerKey struct{}

// ContextWithRetryOwner marks ctx as part of a request whose retries the
// service owner owns: clientlib calls made with it make a single attempt
// (unless NestedRetries(true)) and pass owner on in Fusebox-Retry-Owner.
// Middleware and the server interceptors do this; call it yourself for
// other transports (queues, custom RPC).
func ContextWithRetryOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, retryOwnerKey{}, owner)
}

// RetryOwner returns the owner ContextWithRetryOwner put in ctx.
func RetryOwner(ctx context.Context) (string, bool) {
	o, ok := ctx.Value(retryOwnerKey{}).(string)
	return o, ok
}

// ValidRetryOwner reports whether o may name a retry owner: 1 to
// MaxRetryOwnerLen bytes of printable ASCII without spaces.
func ValidRetryOwner(o string) bool { return o != "" && len(o) <= MaxRetryOwnerLen && headerSafe(o) }

// Middleware wraps an HTTP handler so that the one-retrying-layer rule and
// deadline propagation work across services:
//
//   - a request carrying Fusebox-Retry-Owner (its caller retries) gets a
//     context on which nested clientlib calls make a single attempt and fail
//     fast upward (NestedRetries(true) opts a call out);
//   - a request carrying Fusebox-Timeout-Ms gets that deadline (measured on
//     from its arrival) on its context.
func (c *Client) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if o := r.Header.Get(HeaderRetryOwner); ValidRetryOwner(o) {
			ctx = ContextWithRetryOwner(ctx, o)
		}
		if v := r.Header.Get(HeaderTimeoutMs); v != "" {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 && time.Duration(ms) <= MaxPropagatedTimeout/time.Millisecond {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
				defer cancel()
			}
		}
		if ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

// serverContext marks ctx from the incoming gRPC metadata.
func serverContext(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	if v := md.Get(metadataRetryOwner); len(v) > 0 && ValidRetryOwner(v[0]) {
		return ContextWithRetryOwner(ctx, v[0])
	}
	return ctx
}

// UnaryServerInterceptor is Middleware for gRPC unary handlers: a request
// whose metadata carries fusebox-retry-owner gets a context on which
// nested clientlib calls make a single attempt. (gRPC propagates deadlines
// itself.)
func (c *Client) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(serverContext(ctx), req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming handlers.
func (c *Client) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := serverContext(ss.Context())
		if ctx == ss.Context() {
			return handler(srv, ss)
		}
		return handler(srv, &markedStream{ServerStream: ss, ctx: ctx})
	}
}

type markedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *markedStream) Context() context.Context { return s.ctx }
