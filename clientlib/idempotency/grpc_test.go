package idempotency

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// healthServer stands for a state-changing gRPC service: each Check that
// runs is a side effect, and the requested service name scripts the
// answer.
type healthServer struct {
	healthpb.UnimplementedHealthServer
	runs atomic.Int64
	mu   sync.Mutex
	seen map[string]int
	gate chan struct{}
}

func (h *healthServer) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.runs.Add(1)
	h.mu.Lock()
	h.seen[r.GetService()]++
	n := h.seen[r.GetService()]
	h.mu.Unlock()
	if h.gate != nil {
		<-h.gate
	}
	switch r.GetService() {
	case "unavailable":
		return nil, status.Errorf(codes.Unavailable, "charged, then the ledger timed out (run %d)", n)
	case "nothing-ran-once":
		if n == 1 {
			NothingRan(ctx)
			return nil, status.Error(codes.Unavailable, "the ledger refused before charging")
		}
	case "context":
		return nil, context.Canceled
	case "panic":
		panic("charged, then a nil map")
	case "not-found":
		return nil, status.Errorf(codes.NotFound, "no such order (run %d)", n)
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_ServingStatus(n)}, nil
}

func (h *healthServer) runsOf(service string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[service]
}

// grpcPair starts a gRPC server with the outer interceptors, then d's, on a
// unix socket and returns a client.
func grpcPair(t *testing.T, d *Deduper, h *healthServer, outer ...grpc.UnaryServerInterceptor) healthpb.HealthClient {
	t.Helper()
	dir, err := os.MkdirTemp("", "idem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(append(outer, d.UnaryServerInterceptor())...))
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

func keyed(key, owner string) context.Context {
	md := metadata.Pairs("idempotency-key", key)
	if owner != "" {
		md.Append("fusebox-retry-owner", owner)
	}
	return metadata.NewOutgoingContext(context.Background(), md)
}

func TestGRPCSemantics(t *testing.T) {
	h := &healthServer{seen: map[string]int{}}
	c := grpcPair(t, newDeduper(t, memStore(t, MemoryConfig{})), h)
	call := func(ctx context.Context, service string) (*healthpb.HealthCheckResponse, metadata.MD, error) {
		var hdr metadata.MD
		r, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.Header(&hdr))
		return r, hdr, err
	}

	// A completed call is replayed, marked in the header metadata.
	first, hdr1, err := call(keyed("k1", "svc"), "orders")
	if err != nil || len(hdr1.Get(metadataReplayed)) != 0 {
		t.Fatalf("first: %v, %v", err, hdr1)
	}
	second, hdr2, err := call(keyed("k1", "svc"), "orders")
	if err != nil || second.GetStatus() != first.GetStatus() || hdr2.Get(metadataReplayed)[0] != "true" {
		t.Fatalf("second: %v %v %v, want the replay of %v", second, hdr2, err, first)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	// Another message under the same key is refused.
	if _, _, err := call(keyed("k1", "svc"), "refunds"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("mismatch: %v, want InvalidArgument", err)
	}
	// Another caller's key is its own.
	if _, hdr, err := call(keyed("k1", "other-svc"), "orders"); err != nil || len(hdr.Get(metadataReplayed)) != 0 || h.runs.Load() != 2 {
		t.Fatalf("other scope: %v %v, runs %d", hdr, err, h.runs.Load())
	}
	// Without a key every call runs.
	call(context.Background(), "orders")
	call(context.Background(), "orders")
	if n := h.runs.Load(); n != 4 {
		t.Fatalf("handler ran %d times, want 4", n)
	}
	// A retryable error is stored too: the handler started, what it did
	// is unknown.
	_, _, err1 := call(keyed("k2", ""), "unavailable")
	_, hdr, err2 := call(keyed("k2", ""), "unavailable")
	if status.Code(err2) != codes.Unavailable || err1.Error() != err2.Error() || hdr.Get(metadataReplayed)[0] != "true" {
		t.Fatalf("retry after Unavailable: %v (header %v), want the replay of %v", err2, hdr, err1)
	}
	// Unless the handler said NothingRan: then the retry runs.
	if _, _, err := call(keyed("k2n", ""), "nothing-ran-once"); status.Code(err) != codes.Unavailable {
		t.Fatalf("first: %v, want Unavailable", err)
	}
	if r, hdr, err := call(keyed("k2n", ""), "nothing-ran-once"); err != nil || len(hdr.Get(metadataReplayed)) != 0 || r.GetStatus() != 2 {
		t.Fatalf("retry after NothingRan: %v %v %v, want a second run", r, hdr, err)
	}
	// A context error is stored as the server sends it.
	_, _, err1 = call(keyed("k2c", ""), "context")
	_, hdr, err2 = call(keyed("k2c", ""), "context")
	if status.Code(err1) != codes.Canceled || status.Code(err2) != codes.Canceled || hdr.Get(metadataReplayed)[0] != "true" || h.runsOf("context") != 1 {
		t.Fatalf("context error: %v then %v (header %v), runs %d; want Canceled replayed", err1, err2, hdr, h.runsOf("context"))
	}
	// A final error is pinned and replayed with its message.
	_, _, err1 = call(keyed("k3", ""), "not-found")
	_, hdr, err2 = call(keyed("k3", ""), "not-found")
	if status.Code(err2) != codes.NotFound || err1.Error() != err2.Error() || hdr.Get(metadataReplayed)[0] != "true" {
		t.Fatalf("replayed error %v (header %v), want %v", err2, hdr, err1)
	}
	// A bad key is refused.
	if _, _, err := call(keyed(strings.Repeat("k", MaxKeyLength+1), ""), "orders"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad key: %v, want InvalidArgument", err)
	}
}

func TestGRPCInProgressAndStoreDown(t *testing.T) {
	h := &healthServer{seen: map[string]int{}, gate: make(chan struct{})}
	c := grpcPair(t, newDeduper(t, memStore(t, MemoryConfig{}), MaxWait(0)), h)
	done := make(chan error, 1)
	go func() {
		_, err := c.Check(keyed("k", ""), &healthpb.HealthCheckRequest{Service: "slow"})
		done <- err
	}()
	sstest.Eventually(t, 10*time.Second, "the first call to run", func() bool { return h.runs.Load() == 1 })
	var trailer metadata.MD
	_, err := c.Check(keyed("k", ""), &healthpb.HealthCheckRequest{Service: "slow"}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Aborted || trailer.Get(metadataPushback)[0] != "1000" {
		t.Fatalf("duplicate in progress: %v (trailer %v), want Aborted with pushback", err, trailer)
	}
	close(h.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	down := grpcPair(t, newDeduper(t, brokenStore{}), &healthServer{seen: map[string]int{}})
	if _, err := down.Check(keyed("k", ""), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("store down: %v, want Unavailable", err)
	}
}

func TestGRPCLargeResponseNotStored(t *testing.T) {
	h := &healthServer{seen: map[string]int{}}
	c := grpcPair(t, newDeduper(t, memStore(t, MemoryConfig{}), MaxResponseBytes(1)), h)
	if _, err := c.Check(keyed("k", ""), &healthpb.HealthCheckRequest{Service: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(keyed("k", ""), &healthpb.HealthCheckRequest{Service: "x"}); status.Code(err) != codes.FailedPrecondition || h.runs.Load() != 1 {
		t.Fatalf("duplicate of a too-large answer: %v, runs %d; want FailedPrecondition, one run", err, h.runs.Load())
	}
}

// recoverPanics turns a handler's panic into Internal, as a recovery
// interceptor in front of the Deduper does (without one, the process
// ends).
func recoverPanics(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "recovered: %v", p)
		}
	}()
	return handler(ctx, req)
}

func TestGRPCPanicIsStored(t *testing.T) {
	h := &healthServer{seen: map[string]int{}}
	c := grpcPair(t, newDeduper(t, memStore(t, MemoryConfig{})), h, recoverPanics)
	if _, err := c.Check(keyed("k", ""), &healthpb.HealthCheckRequest{Service: "panic"}); status.Code(err) != codes.Internal ||
		!strings.Contains(err.Error(), "recovered: charged, then a nil map") {
		t.Fatalf("first: %v, want the recovered panic", err)
	}
	var hdr metadata.MD
	_, err := c.Check(keyed("k", ""), &healthpb.HealthCheckRequest{Service: "panic"}, grpc.Header(&hdr))
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "panicked after it started") ||
		hdr.Get(metadataReplayed)[0] != "true" || h.runsOf("panic") != 1 {
		t.Fatalf("retry after a panic: %v (header %v), runs %d; want Internal replayed, one run", err, hdr, h.runsOf("panic"))
	}
}
