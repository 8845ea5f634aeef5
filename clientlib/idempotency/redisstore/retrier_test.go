package redisstore_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
)

// roundRobin is a load balancer in front of a service's instances: each
// request goes to the next one, so a retry lands on another instance.
type roundRobin struct {
	next  http.RoundTripper
	hosts []string
	n     atomic.Int64
}

func (rr *roundRobin) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Host = rr.hosts[int(rr.n.Add(1)-1)%len(rr.hosts)]
	r.Host = r.URL.Host
	return rr.next.RoundTrip(r)
}

// TestRetriedFailureAcrossInstances: a charge recorded then answered 503,
// behind clientlib's retries and a load balancer that sends each attempt
// to the other instance: the charge is made once, and every retry, on
// whichever instance, gets the 503 stored in Redis.
func TestRetriedFailureAcrossInstances(t *testing.T) {
	rs := startRedis(t, false)
	pfx := prefix()
	var (
		charges atomic.Int64
		mu      sync.Mutex
		seen    []string // "instance status replayed" per attempt
	)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges.Add(1)
		http.Error(w, "payments: charged, but the ledger did not confirm", http.StatusServiceUnavailable)
	})
	var hosts []string
	for range 2 {
		in := newInstance(t, rs, pfx, h)
		u, err := url.Parse(in.url)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, u.Host)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	lb := &roundRobin{next: observeAttempts(tr, &mu, &seen), hosts: hosts}
	fb, err := clientlib.New(clientlib.Config{NoAgent: true, Service: "checkout", Instance: "checkout-1",
		Random: func() uint64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fb.Close() })
	client := &http.Client{Transport: fb.RoundTripper(lb, clientlib.HTTPDependency("payments"),
		clientlib.HTTPCallOptions(clientlib.WithAttemptTimeout(30*time.Second)))}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = clientlib.ContextWithClass(ctx, clientlib.IdempotentWithKey)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://payments/charges", strings.NewReader("42 EUR"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the call failed: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	if len(got) < 2 {
		t.Fatalf("attempts %q: want clientlib to retry the 503 on the other instance", got)
	}
	for i, a := range got {
		want := hosts[i%2] + " 503 " + map[bool]string{false: "first", true: "replayed"}[i > 0]
		if a != want {
			t.Errorf("attempt %d: %q, want %q", i+1, a, want)
		}
	}
	if n := charges.Load(); n != 1 {
		t.Errorf("charged %d times over %d attempts on two instances, want once", n, len(got))
	}
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "payments: charged, but the ledger did not confirm\n" {
		t.Errorf("the caller got %d %q, want the stored 503", resp.StatusCode, body)
	}
}

// observeAttempts records "host status replayed|first" for each attempt.
func observeAttempts(next http.RoundTripper, mu *sync.Mutex, seen *[]string) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		how := "first"
		if resp.Header.Get(idempotency.HeaderReplayed) == "true" {
			how = "replayed"
		}
		mu.Lock()
		*seen = append(*seen, r.URL.Host+" "+resp.Status[:3]+" "+how)
		mu.Unlock()
		return resp, nil
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
