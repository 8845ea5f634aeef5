package clientlib

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const healthCheck = "/grpc.health.v1.Health/Check"

// scriptedHealth answers Check with a script of codes (the last repeats),
// optionally with a pushback trailer, and records the metadata it got.
type scriptedHealth struct {
	healthpb.UnimplementedHealthServer
	mu       sync.Mutex
	codes    []codes.Code
	pushback string
	replayed bool // answers as a server's deduplication replaying them
	hits     int
	owners   []string
	keys     []string
	nested   []string // RetryOwner seen by the handler (server interceptor)
}

func (h *scriptedHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	owner, _ := RetryOwner(ctx)
	h.mu.Lock()
	code := h.codes[min(h.hits, len(h.codes)-1)]
	h.hits++
	h.owners = append(h.owners, first(md.Get(metadataRetryOwner)))
	h.keys = append(h.keys, first(md.Get(metadataIdempotencyKey)))
	h.nested = append(h.nested, owner)
	pb, replayed := h.pushback, h.replayed
	h.mu.Unlock()
	if replayed {
		grpc.SetHeader(ctx, metadata.Pairs(metadataReplayed, "true"))
	}
	if code == codes.OK {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	}
	if pb != "" {
		grpc.SetTrailer(ctx, metadata.Pairs(pushbackKey, pb))
	}
	return nil, status.Error(code, "scripted")
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// startHealth serves h on a real gRPC server (loopback TCP), with the
// server interceptor of srvClient when given, and returns a connection
// whose calls go through c's client interceptor.
func startHealth(t *testing.T, h *scriptedHealth, c *Client, srvClient *Client, opts ...GRPCOption) healthpb.HealthClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var sopts []grpc.ServerOption
	if srvClient != nil {
		sopts = append(sopts, grpc.UnaryInterceptor(srvClient.UnaryServerInterceptor()))
	}
	srv := grpc.NewServer(sopts...)
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(c.UnaryClientInterceptor(opts...)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func TestGRPCPerMethodClassification(t *testing.T) {
	for _, tc := range []struct {
		name     string
		codes    []codes.Code
		replayed bool
		opts     []GRPCOption
		ctx      func(context.Context) context.Context
		hits     int
		code     codes.Code
	}{
		{name: "default non-retryable", codes: []codes.Code{codes.Unavailable}, hits: 1, code: codes.Unavailable},
		{name: "idempotent method retried", codes: []codes.Code{codes.Unavailable, codes.ResourceExhausted, codes.OK},
			opts: []GRPCOption{GRPCMethods(Idempotent, healthCheck)}, hits: 3, code: codes.OK},
		{name: "aborted retried", codes: []codes.Code{codes.Aborted, codes.OK},
			opts: []GRPCOption{GRPCMethodClass(func(string) Class { return Idempotent })}, hits: 2, code: codes.OK},
		{name: "invalid argument not retried", codes: []codes.Code{codes.InvalidArgument},
			opts: []GRPCOption{GRPCMethods(Idempotent, healthCheck)}, hits: 1, code: codes.InvalidArgument},
		{name: "internal not retried", codes: []codes.Code{codes.Internal},
			opts: []GRPCOption{GRPCMethods(Idempotent, healthCheck)}, hits: 1, code: codes.Internal},
		{name: "a replayed error not retried", codes: []codes.Code{codes.Unavailable}, replayed: true,
			opts: []GRPCOption{GRPCMethods(Idempotent, healthCheck)}, hits: 1, code: codes.Unavailable},
		{name: "class from context", codes: []codes.Code{codes.Unavailable, codes.OK},
			ctx: func(ctx context.Context) context.Context { return ContextWithClass(ctx, IdempotentWithKey) }, hits: 2, code: codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := localClient(t)
			h := &scriptedHealth{codes: tc.codes, replayed: tc.replayed}
			hc := startHealth(t, h, c, nil, append(tc.opts, GRPCDependency("health"))...)
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx(ctx)
			}
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			if status.Code(err) != tc.code || h.hits != tc.hits {
				t.Errorf("code %v after %d attempts, want %v after %d", status.Code(err), h.hits, tc.code, tc.hits)
			}
			for i, o := range h.owners {
				if o != "test-svc" {
					t.Errorf("attempt %d: owner metadata %q", i+1, o)
				}
			}
			if tc.ctx != nil && (h.keys[0] == "" || h.keys[0] != h.keys[len(h.keys)-1]) {
				t.Errorf("keys %q: want one key on every attempt", h.keys)
			}
		})
	}
}

func TestGRPCPushback(t *testing.T) {
	t.Run("negative: no retry", func(t *testing.T) {
		c := localClient(t)
		h := &scriptedHealth{codes: []codes.Code{codes.Unavailable, codes.OK}, pushback: "-1"}
		hc := startHealth(t, h, c, nil, GRPCMethods(Idempotent, healthCheck))
		if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable || h.hits != 1 {
			t.Errorf("code %v after %d attempts, want Unavailable after 1", status.Code(err), h.hits)
		}
	})
	t.Run("positive: wait that long", func(t *testing.T) {
		// In a bubble, the interceptor over a scripted invoker (a real
		// connection's reader would keep the bubble's time from moving).
		synctest.Test(t, func(t *testing.T) {
			c := localClient(t)
			call := c.UnaryClientInterceptor(GRPCDependency("health"), GRPCMethods(Idempotent, healthCheck),
				GRPCCallOptions(WithAttemptTimeout(0)))
			var at []time.Time
			invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				at = append(at, time.Now())
				if len(at) > 1 {
					return nil
				}
				for _, o := range opts {
					if tr, ok := o.(grpc.TrailerCallOption); ok {
						*tr.TrailerAddr = metadata.Pairs(pushbackKey, "1500")
					}
				}
				return status.Error(codes.Unavailable, "scripted")
			}
			err := call(context.Background(), healthCheck, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}, nil, invoker)
			if err != nil || len(at) != 2 {
				t.Fatalf("err %v after %d attempts, want success on the second", err, len(at))
			}
			if got := at[1].Sub(at[0]); got != 1500*time.Millisecond {
				t.Errorf("waited %v, want the pushback's 1.5s", got)
			}
		})
	})
}

// The server interceptor marks the handler's context, so its own nested
// calls make single attempts.
func TestGRPCServerInterceptorMarksContext(t *testing.T) {
	c := localClient(t)
	server := newClient(t, Config{NoAgent: true, Service: "backend"})
	h := &scriptedHealth{codes: []codes.Code{codes.OK}}
	hc := startHealth(t, h, c, server)
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if h.nested[0] != "test-svc" {
		t.Errorf("handler saw retry owner %q, want test-svc", h.nested[0])
	}
}
