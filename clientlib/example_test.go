package clientlib_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/fusebox-dev/fusebox/clientlib"
)

// The examples run without an agent (Config.NoAgent): every call is
// decided by the client's local breaker and retry budget, exactly as when
// a service's agent is away. A service leaves Config empty and gets the
// agent at $FUSEBOX_AGENT or unix:///run/fusebox/agent.sock; with no agent
// there, calls go on the same way until it answers.

// errUnavailable is what a dependency that sheds load answers: retryable.
var errUnavailable = &clientlib.HTTPStatusError{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable"}

// Do runs the attempt function once per attempt: an Idempotent call is
// retried on a retryable error (here two 503s), with backoff, under the
// retry budget.
func ExampleDependency_Do() {
	fb, err := clientlib.New(clientlib.Config{Service: "checkout", NoAgent: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fb.Close()
	shipping := fb.Dependency("shipping-api")

	err = shipping.Do(context.Background(), clientlib.Idempotent,
		func(ctx context.Context, a clientlib.Attempt) error {
			fmt.Println("attempt", a.Number)
			if a.Number < 3 {
				return errUnavailable
			}
			return nil
		})
	fmt.Println("err:", err)
	// Output:
	// attempt 1
	// attempt 2
	// attempt 3
	// err: <nil>
}

// A NonRetryable call (the zero Class: a POST without an idempotency key)
// makes one attempt whatever the error.
func ExampleDependency_Do_nonRetryable() {
	fb, err := clientlib.New(clientlib.Config{Service: "checkout", NoAgent: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fb.Close()

	attempts := 0
	err = fb.Dependency("payments").Do(context.Background(), clientlib.NonRetryable,
		func(ctx context.Context, a clientlib.Attempt) error {
			attempts++
			return errUnavailable
		})
	fmt.Println(attempts, err)
	// Output: 1 fusebox: http status 503 Service Unavailable
}

// Call is Do for an attempt function that returns a value. A call that
// changes state and that the server deduplicates is IdempotentWithKey:
// every attempt carries the same key.
func ExampleCall() {
	fb, err := clientlib.New(clientlib.Config{Service: "checkout", NoAgent: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fb.Close()
	payments := fb.Dependency("payments")

	keys := map[string]bool{}
	id, err := clientlib.Call(context.Background(), payments, clientlib.IdempotentWithKey,
		func(ctx context.Context, a clientlib.Attempt) (string, error) {
			keys[a.IdempotencyKey] = true // send it as the Idempotency-Key
			if a.Number == 1 {
				return "", errUnavailable
			}
			return "charge-42", nil
		}, clientlib.WithIdempotencyKey("order-1001"))
	fmt.Println(id, err, len(keys), "key")
	// Output: charge-42 <nil> 1 key
}

// The HTTP form: one line on the http.Client. GET is idempotent, so the
// first 503 is retried; the dependency is named after the URL's host:port.
func ExampleClient_RoundTripper() {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "rates")
	}))
	defer srv.Close()

	fb, err := clientlib.New(clientlib.Config{Service: "checkout", NoAgent: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fb.Close()
	client := &http.Client{Transport: fb.RoundTripper(srv.Client().Transport)}

	resp, err := client.Get(srv.URL + "/rates")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body), "after", calls, "attempts")
	// Output: 200 rates after 2 attempts
}

// Allow is the two-step form for calls that cannot be wrapped in a
// closure (a stream's Send, a callback): decide, call, report.
func ExampleDependency_Allow() {
	fb, err := clientlib.New(clientlib.Config{Service: "checkout", NoAgent: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fb.Close()
	events := fb.Dependency("events")

	done, err := events.Allow(clientlib.First)
	if err != nil {
		fmt.Println("refused:", err) // ErrOpen, ErrThrottled, ErrConcurrencyLimit…
		return
	}
	sendErr := error(nil) // stream.Send(msg)
	done(clientlib.OutcomeOf(sendErr))
	fmt.Println("sent; breaker", events.Status().State)
	// Output: sent; breaker closed
}

// Without its agent a process still stops calling a dead dependency: its
// local breaker (the fleet's rules, this process as the only node) trips
// on its own calls, and refused calls fail at once with ErrOpen, without
// calling the attempt function.
func ExampleDependency_Status() {
	fb, err := clientlib.New(clientlib.Config{Service: "checkout", NoAgent: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fb.Close()
	dead := fb.Dependency("inventory")
	fail := func(ctx context.Context, a clientlib.Attempt) error { return errors.New("connection refused") }

	// The counts reach the local breaker every flush (50 ms): call until it
	// refuses, for at most 10 s.
	deadline := time.Now().Add(10 * time.Second)
	for !dead.Status().Rejecting() && time.Now().Before(deadline) {
		for range 20 {
			_ = dead.Do(context.Background(), clientlib.NonRetryable, fail)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := dead.Status()
	err = dead.Do(context.Background(), clientlib.NonRetryable, fail)
	fmt.Printf("state %s, from the agent %v, open: %v\n", st.State, st.FromAgent, errors.Is(err, clientlib.ErrOpen))
	// Output: state open, from the agent false, open: true
}

// On the serving side, Middleware makes the calls a request makes
// single attempts when its caller already retries (it sent
// Fusebox-Retry-Owner): one retrying layer across services. It also
// applies the caller's remaining time (Fusebox-Timeout-Ms) as the
// request's deadline.
func ExampleClient_Middleware() {
	fb, err := clientlib.New(clientlib.Config{Service: "orders", NoAgent: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fb.Close()
	stock := fb.Dependency("stock")

	handler := fb.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts := 0
		_ = stock.Do(r.Context(), clientlib.Idempotent, func(ctx context.Context, a clientlib.Attempt) error {
			attempts++
			return errUnavailable
		})
		_, hasDeadline := r.Context().Deadline()
		fmt.Fprintf(w, "attempts %d, deadline %v", attempts, hasDeadline)
	}))

	req := httptest.NewRequest(http.MethodGet, "/orders/1", nil)
	req.Header.Set(clientlib.HeaderRetryOwner, "checkout") // what the calling clientlib sends
	req.Header.Set(clientlib.HeaderTimeoutMs, "2000")      // the caller's remaining time
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, req)
	fmt.Println(w.Body.String())
	// Output: attempts 1, deadline true
}

// flakyHealth answers Unavailable once, then serves.
type flakyHealth struct {
	healthpb.HealthServer
	calls int
}

func (f *flakyHealth) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	f.calls++
	if f.calls == 1 {
		return nil, status.Error(codes.Unavailable, "warming up")
	}
	owner, _ := clientlib.RetryOwner(ctx)
	fmt.Println("server: retry owner", owner)
	return f.HealthServer.Check(ctx, r)
}

// gRPC: the client interceptor on the connection, the server interceptor
// on the server. gRPC says nothing about idempotency, so methods are
// NonRetryable unless GRPCMethods says otherwise.
func ExampleClient_UnaryClientInterceptor() {
	fb, err := clientlib.New(clientlib.Config{Service: "checkout", NoAgent: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fb.Close()

	// The server (in memory here; a real one listens on a socket).
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnaryInterceptor(fb.UnaryServerInterceptor()))
	hs := &flakyHealth{HealthServer: health.NewServer()}
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient("passthrough:///inventory",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(fb.UnaryClientInterceptor(
			clientlib.GRPCDependency("inventory"),
			clientlib.GRPCMethods(clientlib.Idempotent, "/grpc.health.v1.Health/Check"),
		)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.GetStatus(), "after", hs.calls, "attempts")
	// Output:
	// server: retry owner checkout
	// SERVING after 2 attempts
}

// Options of a call are plain values; With makes them the defaults of a
// handle. A fallback answers instead of the error.
func ExampleDependency_With() {
	fb, err := clientlib.New(clientlib.Config{Service: "checkout", NoAgent: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fb.Close()
	recs := fb.Dependency("recommendations").With(
		clientlib.WithMaxAttempts(2),
		clientlib.WithAttemptTimeout(200*time.Millisecond),
	)

	list, err := clientlib.Call(context.Background(), recs, clientlib.Idempotent,
		func(ctx context.Context, a clientlib.Attempt) ([]string, error) {
			return nil, errUnavailable
		},
		clientlib.WithFallbackValue(func(ctx context.Context, err error) ([]string, error) {
			return []string{"bestsellers"}, nil // a degraded answer instead of an error page
		}))
	fmt.Println(strings.Join(list, ","), err)
	// Output: bestsellers <nil>
}
