package redisstore_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency/internal/storetest"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency/redisstore"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func TestStoreContract(t *testing.T) {
	rs := startRedis(t, false)
	rdb := rs.client(t)
	storetest.Run(t, storetest.Harness{
		New:      func(t *testing.T) idempotency.Store { return redisstore.New(rdb, redisstore.WithPrefix(prefix())) },
		ShortTTL: 50 * time.Millisecond,
		Expire: func(t *testing.T, s idempotency.Store, key string) {
			sstest.Eventually(t, 10*time.Second, "the reservation to expire in Redis", func() bool {
				rec, err := s.Get(context.Background(), key)
				return rec == nil && err == nil
			})
		},
	})
}

// instance is one replica of a service: its own Redis connection, its own
// Deduper and registry, its own HTTP server.
type instance struct {
	reg *prometheus.Registry
	url string
}

func newInstance(t *testing.T, rs *redisServer, pfx string, h http.Handler, opts ...idempotency.Option) *instance {
	t.Helper()
	reg := prometheus.NewRegistry()
	dd, err := idempotency.New(redisstore.New(rs.client(t), redisstore.WithPrefix(pfx)), append(opts, idempotency.WithRegisterer(reg))...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(dd.Middleware(h))
	t.Cleanup(srv.Close)
	return &instance{reg: reg, url: srv.URL}
}

func (in *instance) metric(t testing.TB, name, outcome string) float64 {
	mfs, err := in.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if outcome != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != outcome) {
				continue
			}
			if m.Gauge != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

type answer struct {
	code     int
	body     string
	replayed bool
	reason   string
}

func post(t testing.TB, client *http.Client, url, key, body string) answer {
	req, _ := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Fusebox-Retry-Owner", "checkout")
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", url, err)
		return answer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header.Get(idempotency.HeaderReplayed) == "true", resp.Header.Get(idempotency.HeaderStatus)}
}

func httpClient(t testing.TB) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// orders is the side effect: every run creates an order with a new number.
type orders struct {
	created atomic.Int64
	gate    chan struct{}
}

func (o *orders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if o.gate != nil {
		<-o.gate
	}
	n := o.created.Add(1)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Location", "/orders/"+strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "order "+strconv.FormatInt(n, 10)+": "+string(body))
}

// TestTwoInstancesOneSideEffect: the same key sent to two instances at
// once, each with its own Deduper and Redis connection: the order is
// created once and both callers get the same answer.
func TestTwoInstancesOneSideEffect(t *testing.T) {
	rs := startRedis(t, false)
	pfx := prefix()
	h := &orders{gate: make(chan struct{})}
	a, b := newInstance(t, rs, pfx, h), newInstance(t, rs, pfx, h)
	client := httpClient(t)

	var answers [2]answer
	var wg sync.WaitGroup
	for i, in := range []*instance{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = post(t, client, in.url, "order-7", "2 books")
		}()
	}
	// One instance runs the handler, the other's duplicate waits for it.
	sstest.Eventually(t, 10*time.Second, "one instance's duplicate to wait for the other's run", func() bool {
		return a.metric(t, "fusebox_idempotency_waiting_requests", "")+b.metric(t, "fusebox_idempotency_waiting_requests", "") == 1
	})
	close(h.gate)
	wg.Wait()
	if n := h.created.Load(); n != 1 {
		t.Fatalf("%d orders created, want 1", n)
	}
	if answers[0].code != http.StatusCreated || answers[0].body != "order 1: 2 books" || answers[1].body != answers[0].body || answers[1].code != answers[0].code {
		t.Fatalf("answers %+v, want the same 201 twice", answers)
	}
	if answers[0].replayed == answers[1].replayed {
		t.Fatalf("answers %+v: want exactly one replay", answers)
	}

	// Many keys, each sent to both instances at once: one order per key.
	h2 := &orders{}
	a, b = newInstance(t, rs, pfx+"many:", h2), newInstance(t, rs, pfx+"many:", h2)
	const keys = 50
	got := make([][2]answer, keys)
	for k := range keys {
		for i, in := range []*instance{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[k][i] = post(t, client, in.url, "key-"+strconv.Itoa(k), "item "+strconv.Itoa(k))
			}()
		}
	}
	wg.Wait()
	if n := h2.created.Load(); n != keys {
		t.Fatalf("%d orders for %d keys", n, keys)
	}
	for k, pair := range got {
		if pair[0].code != 201 || pair[0].body != pair[1].body {
			t.Fatalf("key %d: answers %+v differ", k, pair)
		}
	}
}

// TestCrashBetweenReserveAndComplete: an instance takes a key and never
// completes it (it hangs, as a dead process would): the other instance
// answers 409 in-progress until the reservation expires, then a retry runs.
// When the hung handler finally ends, it cannot overwrite the new record.
func TestCrashBetweenReserveAndComplete(t *testing.T) {
	rs := startRedis(t, false)
	pfx := prefix()
	gate := make(chan struct{})
	var entered atomic.Bool
	dead := newInstance(t, rs, pfx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Store(true)
		<-gate // dies before doing the work
		http.Error(w, "gone", http.StatusInternalServerError)
	}), idempotency.ReservationTTL(2*time.Second)) // outlasts the first retry even on a loaded machine
	h := &orders{}
	alive := newInstance(t, rs, pfx, h, idempotency.MaxWait(0))
	client := httpClient(t)

	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, client, dead.url, "k", "x")
	}()
	sstest.Eventually(t, 10*time.Second, "the first instance to reserve the key", entered.Load)
	if ans := post(t, client, alive.url, "k", "x"); ans.code != http.StatusConflict || ans.reason != "in-progress" {
		t.Fatalf("retry while reserved: %+v, want 409 in-progress", ans)
	}
	var ans answer
	sstest.Eventually(t, 10*time.Second, "a retry to run after the reservation expired", func() bool {
		ans = post(t, client, alive.url, "k", "x")
		return ans.code != http.StatusConflict
	})
	if ans.code != http.StatusCreated || h.created.Load() != 1 || ans.replayed {
		t.Fatalf("retry after expiry: %+v, %d orders; want it to run once", ans, h.created.Load())
	}
	close(gate)
	<-done
	if v := dead.metric(t, "fusebox_idempotency_reservations_lost_total", ""); v != 1 {
		t.Fatalf("reservations lost on the dead instance: %v, want 1", v)
	}
	if again := post(t, client, alive.url, "k", "x"); !again.replayed || again.body != ans.body {
		t.Fatalf("after the hung handler ended: %+v, want the replay of %+v", again, ans)
	}
}

// TestRedisUnreachable: with Redis gone, keyed requests fail closed (503,
// the handler does not run) by default, or run unrecorded with FailOpen;
// requests without a key are untouched.
func TestRedisUnreachable(t *testing.T) {
	rs := startRedis(t, false)
	pfx := prefix()
	h := &orders{}
	closed := newInstance(t, rs, pfx, h)
	open := newInstance(t, rs, pfx, h, idempotency.OnStoreError(idempotency.FailOpen))
	client := httpClient(t)
	if ans := post(t, client, closed.url, "before", "x"); ans.code != http.StatusCreated {
		t.Fatalf("with Redis up: %+v", ans)
	}
	rs.stop()

	ans := post(t, client, closed.url, "k", "x")
	if ans.code != http.StatusServiceUnavailable || ans.reason != "store-unavailable" || !strings.Contains(ans.body, "redisstore: reserve") {
		t.Fatalf("fail closed: %+v, want 503 store-unavailable naming the store", ans)
	}
	if h.created.Load() != 1 {
		t.Fatalf("the handler ran without its record")
	}
	for range 2 {
		if ans := post(t, client, open.url, "k", "x"); ans.code != http.StatusCreated {
			t.Fatalf("fail open: %+v, want the handler's answer", ans)
		}
	}
	if n := h.created.Load(); n != 3 {
		t.Fatalf("%d orders, want 3 (fail open is at-least-once)", n)
	}
	if v := closed.metric(t, "fusebox_idempotency_store_errors_total", ""); v != 1 {
		t.Fatalf("store errors %v, want 1", v)
	}
	req, _ := http.NewRequest(http.MethodPost, closed.url, strings.NewReader("x"))
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("a request without a key: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestRedisDownUnderPropagatedDeadline: a keyed request that arrives with
// clientlib's default propagated deadline (Fusebox-Timeout-Ms: 500) while
// Redis is gone (the server ended: refused at once) or hung (the server
// stopped: the call fails at the deadline, with go-redis's
// ContextTimeoutEnabled) gets 503 store-unavailable, which clientlib
// retries, not 409 in-progress, which it does not; the handler never runs.
func TestRedisDownUnderPropagatedDeadline(t *testing.T) {
	fb, err := clientlib.New(clientlib.Config{NoAgent: true, Service: "orders", Instance: "orders-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fb.Close() })
	for _, tc := range []struct {
		name string
		down func(t *testing.T, rs *redisServer)
	}{
		{"ended", func(t *testing.T, rs *redisServer) { rs.stop() }},
		{"hung", func(t *testing.T, rs *redisServer) { rs.pause(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := startRedis(t, false)
			rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: rs.sock, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			dd, err := idempotency.New(redisstore.New(rdb, redisstore.WithPrefix(prefix())))
			if err != nil {
				t.Fatal(err)
			}
			h := &orders{}
			srv := httptest.NewServer(fb.Middleware(dd.Middleware(h)))
			t.Cleanup(srv.Close)
			client := httpClient(t)
			send := func(key string) answer {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader("x"))
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("Fusebox-Retry-Owner", "checkout")
				req.Header.Set("Fusebox-Timeout-Ms", "500")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("POST: %v", err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return answer{resp.StatusCode, string(b), false, resp.Header.Get(idempotency.HeaderStatus)}
			}
			if ans := send("before"); ans.code != http.StatusCreated {
				t.Fatalf("with Redis up: %+v", ans)
			}
			tc.down(t, rs)
			if ans := send("new-key"); ans.code != http.StatusServiceUnavailable || ans.reason != "store-unavailable" {
				t.Fatalf("Redis %s: %+v, want 503 store-unavailable", tc.name, ans)
			}
			if n := h.created.Load(); n != 1 {
				t.Fatalf("%d orders, want 1: the handler ran without its record", n)
			}
		})
	}
}

// TestLargePayloads: a body under the limit is stored in Redis and
// replayed whole by the other instance; one over it reaches its caller,
// and the duplicate is told it completed but cannot be replayed.
func TestLargePayloads(t *testing.T) {
	rs := startRedis(t, false)
	pfx := prefix()
	const limit = 512 << 10
	var runs atomic.Int64
	big := strings.Repeat("0123456789abcdef", limit/16) // exactly the limit
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, big)
		if string(b) == "over" {
			io.WriteString(w, "!")
		}
	})
	a := newInstance(t, rs, pfx, h, idempotency.MaxResponseBytes(limit))
	b := newInstance(t, rs, pfx, h, idempotency.MaxResponseBytes(limit))
	client := httpClient(t)

	post(t, client, a.url, "at-limit", "at")
	if ans := post(t, client, b.url, "at-limit", "at"); !ans.replayed || ans.body != big {
		t.Fatalf("at the limit: replayed %v, %d bytes; want the whole body replayed", ans.replayed, len(ans.body))
	}
	if first := post(t, client, a.url, "over", "over"); first.code != 200 || len(first.body) != limit+1 {
		t.Fatalf("over the limit, first answer: %d, %d bytes", first.code, len(first.body))
	}
	ans := post(t, client, b.url, "over", "over")
	if ans.code != http.StatusConflict || ans.reason != "not-stored" || !strings.Contains(ans.body, strconv.Itoa(limit+1)+"-byte response") {
		t.Fatalf("over the limit, duplicate: %d %q %q", ans.code, ans.reason, ans.body)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (once per key)", n)
	}
}

// TestManyKeysExpire: 10,000 distinct keys through Redis: each completed
// record carries its TTL, so Redis memory is bounded by the key rate ×
// ResultTTL.
func TestManyKeysExpire(t *testing.T) {
	rs := startRedis(t, false)
	rdb := rs.client(t)
	pfx := prefix()
	dd, err := idempotency.New(redisstore.New(rdb, redisstore.WithPrefix(pfx)), idempotency.ResultTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	h := &orders{}
	mw := dd.Middleware(h)
	const keys = 10_000
	for i := range keys {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("x"))
		r.Header.Set("Idempotency-Key", "key-"+strconv.Itoa(i))
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			t.Fatalf("key %d: %d %q", i, w.Code, w.Body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cursor uint64
	seen := 0
	for { // bounded by ctx's minute and SCAN's cursor returning to 0
		ks, next, err := rdb.Scan(ctx, cursor, pfx+"*", 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range ks {
				p.PTTL(ctx, k)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range cmds {
			if ttl := c.(*redis.DurationCmd).Val(); ttl <= 0 || ttl > time.Hour {
				t.Fatalf("key %q has TTL %v, want (0, 1h]", ks[i], ttl)
			}
			seen++
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if seen != keys || h.created.Load() != keys {
		t.Fatalf("%d keys in Redis, %d orders; want %d of each", seen, h.created.Load(), keys)
	}
}
