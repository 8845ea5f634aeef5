package clientlib

import (
	"context"
	"maps"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// GRPCOption configures Client.UnaryClientInterceptor.
type GRPCOption struct {
	name    string
	nameFn  func(method string, cc *grpc.ClientConn) string
	classFn func(method string) Class
	methods map[string]Class
	options []CallOption
}

// GRPCDependency names the dependency every call of the interceptor
// belongs to (optional, default: the connection's target, characters
// outside [A-Za-z0-9._:/-] replaced by '_').
func GRPCDependency(name string) GRPCOption { return GRPCOption{name: name} }

// GRPCDependencyFunc names the dependency of each call (optional).
func GRPCDependencyFunc(f func(method string, cc *grpc.ClientConn) string) GRPCOption {
	return GRPCOption{nameFn: f}
}

// GRPCMethodClass gives the class of each full method name
// ("/pkg.Service/Method") (optional, default NonRetryable for every method
// not listed with GRPCMethods: gRPC says nothing about idempotency).
func GRPCMethodClass(f func(method string) Class) GRPCOption { return GRPCOption{classFn: f} }

// GRPCMethods sets the class of the listed full method names (optional).
func GRPCMethods(class Class, methods ...string) GRPCOption {
	m := make(map[string]Class, len(methods))
	for _, name := range methods {
		m[name] = class
	}
	return GRPCOption{methods: m}
}

// GRPCCallOptions applies opts to every call of the interceptor (optional).
func GRPCCallOptions(opts ...CallOption) GRPCOption { return GRPCOption{options: opts} }

// pushbackKey is gRPC's server pushback trailer (gRFC A6).
const pushbackKey = "grpc-retry-pushback-ms"

// UnaryClientInterceptor returns an interceptor that sends each unary call
// through the breaker of its dependency, with retries as the method's class
// allows (see GRPCMethodClass, GRPCMethods; ContextWithClass overrides per
// call). Unavailable, ResourceExhausted, Aborted and the attempt's own
// DeadlineExceeded are retried; a grpc-retry-pushback-ms trailer is honoured
// within the deadline (negative: no retry); an error that came with the
// header metadata idempotent-replayed: true (a server's deduplication
// replaying a stored error, package idempotency) is final. Each attempt carries the
// fusebox-retry-owner metadata and, when keyed, idempotency-key. Leave
// gRPC's own retry policy off on this connection: one retrying layer.
func (c *Client) UnaryClientInterceptor(opts ...GRPCOption) grpc.UnaryClientInterceptor {
	var cfg GRPCOption
	methods := map[string]Class{}
	for _, o := range opts {
		if o.name != "" {
			cfg.name = o.name
		}
		if o.nameFn != nil {
			cfg.nameFn = o.nameFn
		}
		if o.classFn != nil {
			cfg.classFn = o.classFn
		}
		maps.Copy(methods, o.methods)
		cfg.options = append(cfg.options, o.options...)
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		var name string
		switch {
		case cfg.nameFn != nil:
			name = cfg.nameFn(method, cc)
		case cfg.name != "":
			name = cfg.name
		default:
			name = sharedstate.HostDependencyName(cc.Target())
		}
		st := c.depState(name)
		class, ok := classFromContext(ctx)
		if !ok {
			if class, ok = methods[method]; !ok && cfg.classFn != nil {
				class = cfg.classFn(method)
			}
		}
		return st.run(ctx, class, func(actx context.Context, a Attempt) error {
			pairs := []string{metadataRetryOwner, a.owner}
			if a.IdempotencyKey != "" {
				pairs = append(pairs, metadataIdempotencyKey, a.IdempotencyKey)
			}
			actx = metadata.AppendToOutgoingContext(actx, pairs...)
			var header, trailer metadata.MD
			err := invoker(actx, method, req, reply, cc, append(callOpts[:len(callOpts):len(callOpts)], grpc.Header(&header), grpc.Trailer(&trailer))...)
			if err != nil {
				if v := header.Get(metadataReplayed); len(v) > 0 && v[0] == "true" {
					// A server's deduplication replayed a stored error:
					// every retry under the key would get it again.
					return &RetryAfterError{Err: err, After: -1}
				}
				if v := trailer.Get(pushbackKey); len(v) > 0 {
					// gRFC A6: a negative or malformed pushback means "do not retry".
					after := time.Duration(-1)
					if ms, perr := strconv.ParseInt(v[0], 10, 64); perr == nil && ms >= 0 {
						after = time.Duration(ms) * time.Millisecond
					}
					return &RetryAfterError{Err: err, After: after}
				}
			}
			return err
		}, cfg.options, optionsFromContext(ctx), false)
	}
}
