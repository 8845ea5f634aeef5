package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
)

// ledger is a payment handler's side effect: the charges it recorded.
type ledger struct {
	mu      sync.Mutex
	charges int
}

func (l *ledger) charge() {
	l.mu.Lock()
	l.charges++
	l.mu.Unlock()
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.charges
}

// seenAttempt is what one attempt got from the server.
type seenAttempt struct {
	key      string
	status   int
	replayed bool
}

// attempts records every request that reaches the server and its answer.
type attempts struct {
	mu   sync.Mutex
	list []seenAttempt
}

func (a *attempts) get() []seenAttempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]seenAttempt(nil), a.list...)
}

func (a *attempts) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		defer func() { // also when next panics
			a.mu.Lock()
			a.list = append(a.list, seenAttempt{r.Header.Get(clientlib.HeaderIdempotencyKey), sw.code,
				w.Header().Get(idempotency.HeaderReplayed) == "true"})
			a.mu.Unlock()
		}()
		next.ServeHTTP(sw, r)
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// retryingClient is clientlib's RoundTripper with its default retries (no
// backoff wait, and an attempt timeout that a loaded machine cannot hit).
func retryingClient(t *testing.T) *http.Client {
	t.Helper()
	fb, err := clientlib.New(clientlib.Config{NoAgent: true, Service: "checkout", Instance: "checkout-1",
		Random: func() uint64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fb.Close() })
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: fb.RoundTripper(tr, clientlib.HTTPDependency("payments"),
		clientlib.HTTPCallOptions(clientlib.WithAttemptTimeout(30*time.Second)))}
}

// keyedCharge POSTs a charge through client as IdempotentWithKey (one key
// on every attempt) and returns the answer the caller gets.
func keyedCharge(t *testing.T, client *http.Client, url string) (int, string, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = clientlib.ContextWithClass(ctx, clientlib.IdempotentWithKey)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charges", bytes.NewReader([]byte("42 EUR")))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the call failed: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

// paymentsServer serves h behind a Deduper on loopback, recording each
// attempt.
func paymentsServer(t *testing.T, h http.Handler) (*httptest.Server, *attempts) {
	t.Helper()
	store, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dd, err := idempotency.New(store)
	if err != nil {
		t.Fatal(err)
	}
	seen := &attempts{}
	srv := httptest.NewUnstartedServer(seen.observe(dd.Middleware(h)))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic case's stack trace
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, seen
}

// TestRetriedFailureChargesOnce: a payment handler records the charge,
// then answers 503 (the ledger's confirmation timed out). clientlib
// retries 503 with the same key; every retry must get the stored 503, and
// the charge must be recorded once. NothingRan is how a handler that did
// nothing lets the retry run; a panic after the charge is stored as 500.
func TestRetriedFailureChargesOnce(t *testing.T) {
	t.Run("a charge answered 503 is replayed to every retry", func(t *testing.T) {
		var l ledger
		srv, seen := paymentsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l.charge()
			http.Error(w, "payments: charged, but the ledger did not confirm", http.StatusServiceUnavailable)
		}))
		code, body, hdr := keyedCharge(t, retryingClient(t), srv.URL)
		got := seen.get()
		if len(got) < 2 {
			t.Fatalf("the server saw %d attempts (%+v); want clientlib to retry the 503", len(got), got)
		}
		for i, a := range got {
			if a.key == "" || a.key != got[0].key || a.status != http.StatusServiceUnavailable || a.replayed != (i > 0) {
				t.Errorf("attempt %d: %+v; want the same key, 503, replayed after the first", i+1, a)
			}
		}
		if n := l.count(); n != 1 {
			t.Errorf("charged %d times over %d attempts, want once", n, len(got))
		}
		if code != http.StatusServiceUnavailable || body != "payments: charged, but the ledger did not confirm\n" ||
			hdr.Get(idempotency.HeaderReplayed) != "true" {
			t.Errorf("the caller got %d %q (replayed %q); want the stored 503", code, body, hdr.Get(idempotency.HeaderReplayed))
		}
	})

	t.Run("NothingRan lets the retry run", func(t *testing.T) {
		var (
			l     ledger
			mu    sync.Mutex
			first = true
		)
		srv, seen := paymentsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			refuse := first
			first = false
			mu.Unlock()
			if refuse { // the ledger refused before anything was charged
				idempotency.NothingRan(r.Context())
				http.Error(w, "payments: the ledger is busy", http.StatusServiceUnavailable)
				return
			}
			l.charge()
			w.WriteHeader(http.StatusCreated)
		}))
		code, _, hdr := keyedCharge(t, retryingClient(t), srv.URL)
		got := seen.get()
		if len(got) != 2 || got[0].key != got[1].key || got[0].status != 503 || got[1].status != 201 || got[1].replayed {
			t.Fatalf("attempts %+v; want a 503, then the retry run under the same key", got)
		}
		if code != http.StatusCreated || hdr.Get(idempotency.HeaderReplayed) != "" || l.count() != 1 {
			t.Fatalf("the caller got %d (replayed %q), %d charges; want 201 from the retry's run, one charge",
				code, hdr.Get(idempotency.HeaderReplayed), l.count())
		}
	})

	t.Run("a panic after the charge is stored as 500", func(t *testing.T) {
		var l ledger
		srv, seen := paymentsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l.charge()
			panic("payments: nil map after the charge")
		}))
		// The panic cuts the connection: clientlib retries, and the retry
		// gets the stored 500, which it does not retry.
		code, body, hdr := keyedCharge(t, retryingClient(t), srv.URL)
		got := seen.get()
		if len(got) != 2 || got[1].status != http.StatusInternalServerError || !got[1].replayed {
			t.Fatalf("attempts %+v; want the panicking one, then a replayed 500", got)
		}
		if code != http.StatusInternalServerError || hdr.Get(idempotency.HeaderStatus) != "panicked" ||
			!strings.Contains(body, "panicked after it started") || l.count() != 1 {
			t.Fatalf("the caller got %d %q %v, %d charges; want the stored 500, one charge", code, body, hdr, l.count())
		}
	})
}

// chargeServer is a gRPC payment service (the health service's Check
// stands for Charge): each run records a charge, then fails Unavailable.
type chargeServer struct {
	healthpb.UnimplementedHealthServer
	l ledger
}

func (s *chargeServer) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	s.l.charge()
	return nil, status.Error(codes.Unavailable, "payments: charged, but the ledger did not confirm")
}

// TestRetriedGRPCFailureChargesOnce: the same over gRPC, with clientlib's
// client interceptor retrying Unavailable.
func TestRetriedGRPCFailureChargesOnce(t *testing.T) {
	dir, err := os.MkdirTemp("", "idem") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.NewMemoryStore(idempotency.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	dd, err := idempotency.New(store, idempotency.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		calls []codes.Code
	)
	observe := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		mu.Lock()
		calls = append(calls, status.Code(err))
		mu.Unlock()
		return resp, err
	}
	cs := &chargeServer{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(observe, dd.UnaryServerInterceptor()))
	healthpb.RegisterHealthServer(srv, cs)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	fb, err := clientlib.New(clientlib.Config{NoAgent: true, Service: "checkout", Instance: "checkout-1",
		Random: func() uint64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fb.Close() })
	cc, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(fb.UnaryClientInterceptor(clientlib.GRPCDependency("payments"),
			clientlib.GRPCMethods(clientlib.IdempotentWithKey, healthpb.Health_Check_FullMethodName),
			clientlib.GRPCCallOptions(clientlib.WithAttemptTimeout(30*time.Second)))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "charge 42 EUR"})
	mu.Lock()
	got := append([]codes.Code(nil), calls...)
	mu.Unlock()
	if len(got) < 2 {
		t.Fatalf("the server saw %d attempts (%v); want clientlib to retry Unavailable", len(got), got)
	}
	for i, c := range got {
		if c != codes.Unavailable {
			t.Errorf("attempt %d got %v, want Unavailable", i+1, c)
		}
	}
	if n := cs.l.count(); n != 1 {
		t.Errorf("charged %d times over %d attempts, want once", n, len(got))
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "charged, but the ledger did not confirm") {
		t.Errorf("the caller got %v, want the stored Unavailable", err)
	}
	if r := replayed(t, reg); r != float64(len(got)-1) {
		t.Errorf("%v answers replayed, want %d (every retry)", r, len(got)-1)
	}
}

// replayed reads fusebox_idempotency_requests_total{outcome="replayed"}.
func replayed(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fusebox_idempotency_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == "replayed" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
