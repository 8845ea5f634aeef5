package clientlib

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// scripted is an httptest handler answering a script of statuses (the last
// one repeats) and recording what each attempt carried.
type scripted struct {
	mu       sync.Mutex
	statuses []int
	header   http.Header // extra response headers for non-2xx answers
	hits     int
	keys     []string
	owners   []string
	timeouts []string
	bodies   []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	i := min(s.hits, len(s.statuses)-1)
	code := s.statuses[i]
	s.hits++
	s.keys = append(s.keys, r.Header.Get(HeaderIdempotencyKey))
	s.owners = append(s.owners, r.Header.Get(HeaderRetryOwner))
	s.timeouts = append(s.timeouts, r.Header.Get(HeaderTimeoutMs))
	s.bodies = append(s.bodies, string(body))
	hdr := s.header
	s.mu.Unlock()
	if code >= 300 {
		for k, v := range hdr {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(code)
	io.WriteString(w, "answer "+strconv.Itoa(code))
}

func (s *scripted) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

func newHTTPClient(t *testing.T, c *Client, opts ...HTTPOption) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: c.RoundTripper(tr, opts...)}
}

func serve(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPMethodsAndKeys(t *testing.T) {
	for _, tc := range []struct {
		name      string
		method    string
		header    string // Idempotency-Key sent by the caller
		ctxClass  *Class
		wantHits  int
		wantKey   string // "generated" for any non-empty key
		wantFinal int
	}{
		{name: "GET retried", method: "GET", wantHits: 3, wantFinal: 503},
		{name: "PUT retried", method: "PUT", wantHits: 3, wantFinal: 503},
		{name: "POST without key never retried", method: "POST", wantHits: 1, wantFinal: 503},
		{name: "PATCH without key never retried", method: "PATCH", wantHits: 1, wantFinal: 503},
		{name: "POST with key retried, same key", method: "POST", header: "k-123", wantHits: 3, wantKey: "k-123", wantFinal: 503},
		{name: "POST keyed by context", method: "POST", ctxClass: ptr(IdempotentWithKey), wantHits: 3, wantKey: "generated", wantFinal: 503},
		{name: "GET made non-retryable by context", method: "GET", ctxClass: ptr(NonRetryable), wantHits: 1, wantFinal: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := localClient(t)
			s := &scripted{statuses: []int{503}}
			srv := serve(t, s)
			hc := newHTTPClient(t, c)
			ctx := context.Background()
			if tc.ctxClass != nil {
				ctx = ContextWithClass(ctx, *tc.ctxClass)
			}
			req, _ := http.NewRequestWithContext(ctx, tc.method, srv.URL, strings.NewReader("payload"))
			if tc.header != "" {
				req.Header.Set(HeaderIdempotencyKey, tc.header)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantFinal || string(body) != "answer 503" {
				t.Errorf("final response %d %q, want %d with its body", resp.StatusCode, body, tc.wantFinal)
			}
			if s.count() != tc.wantHits {
				t.Errorf("server saw %d attempts, want %d", s.count(), tc.wantHits)
			}
			for i, k := range s.keys {
				switch {
				case tc.wantKey == "" && k != "":
					t.Errorf("attempt %d carried key %q", i+1, k)
				case tc.wantKey == "generated" && (k == "" || k != s.keys[0]):
					t.Errorf("keys %q: want one generated key on every attempt", s.keys)
				case tc.wantKey != "" && tc.wantKey != "generated" && k != tc.wantKey:
					t.Errorf("attempt %d carried key %q, want %q", i+1, k, tc.wantKey)
				}
			}
			for i, b := range s.bodies {
				if b != "payload" {
					t.Errorf("attempt %d body %q, want the replayed payload", i+1, b)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestHTTPScriptedStatuses(t *testing.T) {
	for _, tc := range []struct {
		script   []int
		hits     int
		final    int
		failures uint64
	}{
		{[]int{503, 502, 200}, 3, 200, 2},
		{[]int{429, 200}, 2, 200, 1},
		{[]int{504, 408, 200}, 3, 200, 2},
		{[]int{404}, 1, 404, 0},
		{[]int{400}, 1, 400, 0},
		{[]int{500}, 1, 500, 1},
		{[]int{201}, 1, 201, 0},
	} {
		t.Run(strconv.Itoa(tc.script[0]), func(t *testing.T) {
			c := localClient(t)
			s := &scripted{statuses: tc.script}
			srv := serve(t, s)
			resp, err := newHTTPClient(t, c, HTTPDependency("api")).Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.final || s.count() != tc.hits {
				t.Errorf("final %d after %d attempts, want %d after %d", resp.StatusCode, s.count(), tc.final, tc.hits)
			}
			if got := c.Dependency("api").st.sum().failure; got != tc.failures {
				t.Errorf("%d failures counted, want %d", got, tc.failures)
			}
		})
	}
}

// handlerTransport serves requests with a handler in process: no
// connection, so that a synctest bubble's time can move.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil {
		r.Body = http.NoBody
	}
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, r)
	return w.Result(), nil
}

func TestHTTPRetryAfterHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := localClient(t)
		s := &scripted{statuses: []int{503, 200}, header: http.Header{"Retry-After": {"2"}}}
		var arrivals []time.Time
		hc := &http.Client{Transport: c.RoundTripper(handlerTransport{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrivals = append(arrivals, time.Now())
			s.ServeHTTP(w, r)
		})}, HTTPCallOptions(WithAttemptTimeout(0)))}
		resp, err := hc.Get("http://api.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || len(arrivals) != 2 || arrivals[1].Sub(arrivals[0]) != 2*time.Second {
			t.Errorf("status %d, arrivals %v: want 200 on the second attempt, Retry-After's 2s later (the jittered backoff is 0)",
				resp.StatusCode, arrivals)
		}
	})
}

func TestHTTPRetryAfterBeyondDeadline(t *testing.T) {
	c := localClient(t)
	s := &scripted{statuses: []int{503, 200}, header: http.Header{"Retry-After": {"30"}}}
	srv := serve(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := newHTTPClient(t, c).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || s.count() != 1 {
		t.Errorf("got %d after %d attempts; want the 503 at once: Retry-After passes the deadline", resp.StatusCode, s.count())
	}
}

// Two services each using clientlib, chained: the bottom dependency sees
// three attempts for one user request (the top layer's), not nine.
func TestHTTPChainedServicesOneRetryingLayer(t *testing.T) {
	bottom := &scripted{statuses: []int{503}}
	bottomSrv := serve(t, bottom)

	middle := newClient(t, Config{NoAgent: true, Service: "middle", Random: zeroRandom})
	middleHC := newHTTPClient(t, middle, HTTPDependency("bottom"))
	var middleOwners []string
	var mu sync.Mutex
	middleSrv := serve(t, middle.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner, _ := RetryOwner(r.Context())
		mu.Lock()
		middleOwners = append(middleOwners, owner)
		mu.Unlock()
		req, _ := http.NewRequestWithContext(r.Context(), "GET", bottomSrv.URL, nil)
		resp, err := middleHC.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	})))

	top := newClient(t, Config{NoAgent: true, Service: "top", Random: zeroRandom})
	resp, err := newHTTPClient(t, top, HTTPDependency("middle")).Get(middleSrv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := bottom.count(); got != 3 {
		t.Errorf("bottom saw %d attempts for one user request, want 3", got)
	}
	for i, o := range bottom.owners {
		if o != "top" {
			t.Errorf("bottom attempt %d: retry owner %q, want top (propagated)", i+1, o)
		}
	}
	if len(middleOwners) != 3 || middleOwners[0] != "top" {
		t.Errorf("middle saw owners %q, want 3 requests owned by top", middleOwners)
	}
}

func TestHTTPTimeoutPropagates(t *testing.T) {
	c := newClient(t, Config{NoAgent: true, Random: zeroRandom})
	var (
		deadline time.Time
		header   string
		ok       bool
	)
	srv := serve(t, c.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header = r.Header.Get(HeaderTimeoutMs)
		deadline, ok = r.Context().Deadline()
	})))
	resp, err := newHTTPClient(t, c).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ms, err := strconv.Atoi(header)
	if err != nil || ms <= 0 || ms > 500 {
		t.Errorf("Fusebox-Timeout-Ms %q: want the attempt's remaining time, at most the default 500ms", header)
	}
	if !ok || time.Until(deadline) > 500*time.Millisecond {
		t.Errorf("handler deadline %v (set: %v): want the propagated one", deadline, ok)
	}
}

func TestHTTPBreakerOpenRefusesWithoutRequest(t *testing.T) {
	c := localClient(t)
	s := &scripted{statuses: []int{200}}
	srv := serve(t, s)
	forceOpen(t, c, "api")
	_, err := newHTTPClient(t, c, HTTPDependency("api")).Get(srv.URL)
	if !errors.Is(err, ErrForcedOpen) || !errors.Is(err, ErrOpen) {
		t.Errorf("err = %v, want ErrForcedOpen (which is ErrOpen)", err)
	}
	if s.count() != 0 {
		t.Errorf("server saw %d requests, want none", s.count())
	}
}

// forceOpen forces dep's local breaker open and waits until the client
// decides with it.
func forceOpen(t *testing.T, c *Client, dep string) {
	t.Helper()
	d := c.Dependency(dep)
	if err := c.engine.SetOverride(dep, &sharedstate.Override{State: ForcedOpen, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the forced-open override", func() bool { return d.Status().Override == ForcedOpen })
}

// Without HTTPDependency, a request's dependency is its URL's host with
// the port the URL names: two servers on two ports of one host are two
// dependencies (one can fail while the other serves); a URL without a port
// is named by its host alone.
func TestHTTPDefaultDependencyName(t *testing.T) {
	c := localClient(t)
	a, b := serve(t, &scripted{statuses: []int{200}}), serve(t, &scripted{statuses: []int{200}})
	hc := newHTTPClient(t, c)
	for _, srv := range []*httptest.Server{a, b} {
		resp, err := hc.Get(srv.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	local := &http.Client{Transport: c.RoundTripper(handlerTransport{&scripted{statuses: []int{200}}})}
	resp, err := local.Get("http://catalog.internal/items")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, name := range []string{strings.TrimPrefix(a.URL, "http://"), strings.TrimPrefix(b.URL, "http://"), "catalog.internal"} {
		if st := c.lookup(name); st == nil || st.sum().success != 1 {
			t.Errorf("dependency %q: %v, want one success counted under that name", name, st)
		}
	}
	if n := len(*c.deps.Load()); n != 3 {
		t.Errorf("%d dependencies, want 3", n)
	}
}
