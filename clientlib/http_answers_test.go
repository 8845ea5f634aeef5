package clientlib

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// A failed answer whose body stalls, on an attempt a retry may follow: its
// body is read under the attempt's timeout, so the stall ends that attempt
// and the retry answers, instead of the call hanging as long as the body
// stalls.
func TestHTTPStalledFailedBodyEndsTheAttempt(t *testing.T) {
	release := make(chan struct{})
	var hits atomic.Int32
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "the first bytes of a long answer")
			w.(http.Flusher).Flush()
			select { // the rest never comes
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "second")
	}))
	defer close(release) // before the server's cleanup closes it
	c := localClient(t)
	hc := newHTTPClient(t, c, HTTPCallOptions(WithAttemptTimeout(300*time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if el := time.Since(start); resp.StatusCode != 200 || string(body) != "second" || el > 10*time.Second {
		t.Errorf("%d %q after %v and %d attempts: want the retry's 200, the stalled body bounded by the 300ms attempt timeout",
			resp.StatusCode, body, el, hits.Load())
	}
}

// The answer no retry follows reaches the caller whole, as it comes; the
// answer of a retry that is then refused is what was kept of it, with a
// length that says so.
func TestHTTPFailedAnswersReachTheCaller(t *testing.T) {
	big := strings.Repeat("x", 3*maxErrorBody)
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.WriteHeader(code)
		io.WriteString(w, big)
	}))
	for _, tc := range []struct {
		name, query string
		opts        []CallOption
		want        int // bytes of body
	}{
		{"a 500 is not retried", "?status=500", nil, len(big)},
		{"the last attempt's 503", "?status=503", []CallOption{WithMaxAttempts(2)}, len(big)},
		{"a 503 whose retry the budget refuses", "?status=503", []CallOption{WithMaxAttempts(2)}, maxErrorBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := localClient(t)
			if tc.want == maxErrorBody {
				p := sharedstate.DefaultPolicy()
				p.Retry.Budget = sharedstate.BudgetPolicy{Ratio: 0, MinRetriesPerSecond: 0.001}
				if err := c.engine.SetDefaultPolicy(p); err != nil {
					t.Fatal(err)
				}
				// The one retry the floor allows is spent first.
				_ = c.Dependency("api").Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return errUnavailable })
			}
			hc := newHTTPClient(t, c, HTTPDependency("api"), HTTPCallOptions(tc.opts...))
			resp, err := hc.Get(srv.URL + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || len(body) != tc.want || (resp.ContentLength >= 0 && resp.ContentLength != int64(len(body))) {
				t.Errorf("%d bytes (Content-Length %d, %v), want %d", len(body), resp.ContentLength, err, tc.want)
			}
		})
	}
}

// A Retry-After longer than the policy's backoff.max, without a caller
// deadline to bound the wait: the answer goes to the caller at once.
func TestHTTPRetryAfterBeyondBackoffMaxWithoutDeadline(t *testing.T) {
	c := localClient(t)
	s := &scripted{statuses: []int{503, 200}, header: http.Header{"Retry-After": {"3600"}}}
	srv := serve(t, s)
	var info CallInfo
	req, _ := http.NewRequestWithContext(ContextWithCallOptions(context.Background(), WithCallInfo(&info)), http.MethodGet, srv.URL, nil)
	resp, err := newHTTPClient(t, c).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || s.count() != 1 || resp.Header.Get("Retry-After") != "3600" || info.Stop != StopRetryAfter {
		t.Errorf("%d after %d attempts (%+v): want the 503 with its Retry-After at once", resp.StatusCode, s.count(), info)
	}
}

// The class is judged on the request as it is sent; an invalid
// Idempotency-Key makes a POST go once, as it is.
func TestRequestClass(t *testing.T) {
	for _, tc := range []struct {
		method, key string
		want        Class
	}{
		{http.MethodGet, "", Idempotent},
		{http.MethodDelete, "", Idempotent},
		{http.MethodPost, "", NonRetryable},
		{http.MethodPost, "order-7", IdempotentWithKey},
		{http.MethodPatch, "order-7", IdempotentWithKey},
		{http.MethodPost, "has a\x01control byte", NonRetryable},
		{http.MethodPost, strings.Repeat("k", 1025), NonRetryable},
		{"PURGE", "order-7", NonRetryable},
	} {
		req, _ := http.NewRequest(tc.method, "http://api.test/", nil)
		if tc.key != "" {
			req.Header.Set(HeaderIdempotencyKey, tc.key)
		}
		if got := RequestClass(req); got != tc.want {
			t.Errorf("%s with key %.20q: %v, want %v", tc.method, tc.key, got, tc.want)
		}
	}
	c := localClient(t)
	s := &scripted{statuses: []int{503}}
	srv := serve(t, s)
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	req.Header.Set(HeaderIdempotencyKey, strings.Repeat("k", 1025))
	resp, err := newHTTPClient(t, c).Do(req)
	if err != nil {
		t.Fatalf("a POST with an invalid key: %v, want it sent once", err)
	}
	resp.Body.Close()
	if s.count() != 1 || len(s.keys[0]) != 1025 {
		t.Errorf("%d attempts, key of %d bytes: want one attempt with the key as it was", s.count(), len(s.keys[0]))
	}
}

// A handle's RoundTripper sends every request through that dependency,
// with WithRetryOwner naming the owner and WithCallInfo saying what the
// call did; a NotCounted classification counts nothing.
func TestDependencyRoundTripperOwnerInfoNotCounted(t *testing.T) {
	c := localClient(t)
	s := &scripted{statuses: []int{503, 200}}
	srv := serve(t, s)
	dep := c.Dependency("orders")
	hc := &http.Client{Transport: dep.With(WithRetryOwner("checkout")).RoundTripper(nil)}
	t.Cleanup(hc.CloseIdleConnections)
	var info CallInfo
	req, _ := http.NewRequestWithContext(ContextWithCallOptions(context.Background(), WithCallInfo(&info)), http.MethodGet, srv.URL, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || info != (CallInfo{Attempts: 2, Stop: StopNone}) {
		t.Errorf("%d, %+v: want 200 after 2 attempts", resp.StatusCode, info)
	}
	s.mu.Lock()
	owners := s.owners
	s.mu.Unlock()
	if len(owners) != 2 || owners[0] != "checkout" || owners[1] != "checkout" {
		t.Errorf("owners %q, want checkout on both attempts", owners)
	}
	if got := dep.st.sum(); got.first != 1 || got.success != 1 || got.failure != 1 {
		t.Errorf("counts %+v: want the call under orders", got)
	}
	if _, err := c.Dependency("x").Allow(First); err != nil { // WithRetryOwner is checked
		t.Fatal(err)
	}
	if err := dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return nil },
		WithRetryOwner("has space")); err == nil {
		t.Error("WithRetryOwner(\"has space\") was accepted")
	}

	notCounted := func(error) Classification { return Classification{NotCounted: true} }
	before := dep.st.sum()
	err = dep.Do(context.Background(), Idempotent, func(context.Context, Attempt) error { return errUnavailable },
		WithClassifier(notCounted), WithCallInfo(&info))
	after := dep.st.sum()
	if err == nil || info.Attempts != 1 || info.Stop != StopNotRetryable || after.failure != before.failure || after.success != before.success {
		t.Errorf("a NotCounted error: %v, %+v, counts %+v → %+v: want one attempt, no outcome counted", err, info, before, after)
	}
}

// CallInfo names the refusal that ended a call, and a probe, which
// carries Fusebox-Probe.
func TestCallInfoRejectedAndProbe(t *testing.T) {
	f := newFakeAgent(t)
	f.onRetry = func(context.Context, *fuseboxv1.AcquireRequest) (*fuseboxv1.Decision, error) {
		return &fuseboxv1.Decision{Verdict: fuseboxv1.Verdict_VERDICT_REJECT,
			Reason: fuseboxv1.RejectReason_REJECT_REASON_BUDGET_EXHAUSTED}, nil
	}
	c := agentClient(t, f, Config{})
	dep := c.Dependency("pay")
	var headers []string
	fn := func(ctx context.Context, a Attempt) error {
		h := http.Header{}
		a.SetHeaders(h)
		headers = append(headers, h.Get(HeaderProbe))
		return errUnavailable
	}
	var info CallInfo
	_ = dep.Do(context.Background(), Idempotent, fn, WithCallInfo(&info))
	if info.Attempts != 1 || info.Probe || info.Stop != StopRejected || info.Rejected == nil || info.Rejected.Reason != "budget-exhausted" {
		t.Errorf("%+v: want 1 attempt, then the retry refused (budget-exhausted)", info)
	}

	half := snapshot("pay", fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN)
	half.ProbePermit = true
	f.push(half)
	sstest.Eventually(t, 10*time.Second, "the half-open snapshot", func() bool { return dep.Status().State == HalfOpen })
	headers = nil
	_ = dep.Do(context.Background(), Idempotent, fn, WithCallInfo(&info))
	if !info.Probe || info.Attempts != 1 || len(headers) != 1 || headers[0] != "1" {
		t.Errorf("%+v, Fusebox-Probe %q: want a probe that says so", info, headers)
	}
	half.ProbePermit = false
	f.push(half)
	sstest.Eventually(t, 10*time.Second, "the snapshot without permit", func() bool {
		_ = dep.Do(context.Background(), Idempotent, fn, WithCallInfo(&info))
		return info.Stop == StopRejected && info.Attempts == 0 && info.Rejected != nil && info.Rejected.Reason == "half-open-no-permit"
	})
}

// An answer marked Idempotent-Replayed: true is the stored answer of an
// earlier attempt under the same key, which every retry would get again:
// it is final, a retryable status included, and reaches the caller as it
// came. The same status unmarked is retried.
func TestHTTPReplayedAnswerIsFinal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replayed string
		wantHits int32
	}{
		{"a replayed 503 is final", "true", 1},
		{"an unmarked 503 is retried", "", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int32
			srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				if tc.replayed != "" {
					w.Header().Set(HeaderReplayed, tc.replayed)
				}
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, "stored")
			}))
			hc := newHTTPClient(t, localClient(t))
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("order 7"))
			req.Header.Set(HeaderIdempotencyKey, "order-7")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "stored" || resp.Header.Get(HeaderReplayed) != tc.replayed {
				t.Errorf("answer %d %q (%s %q), want the 503 as it came", resp.StatusCode, body, HeaderReplayed, resp.Header.Get(HeaderReplayed))
			}
			if got := hits.Load(); got != tc.wantHits {
				t.Errorf("%d attempts, want %d", got, tc.wantHits)
			}
		})
	}
	replay := &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{HeaderReplayed: {"true"}}}
	if cl := DefaultClassifier(CheckResponse(replay)); cl.Retryable || !cl.Failure {
		t.Errorf("DefaultClassifier(CheckResponse(a replayed 503)) = %+v, want a failure, not retryable", cl)
	}
}
