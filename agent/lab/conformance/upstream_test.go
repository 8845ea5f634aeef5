package conformance

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Headers every caller puts on its requests, so that the upstream can
// tell who called and which logical call an attempt belongs to.
const (
	headerCaller = "X-Conformance-Caller" // the caller's kind
	headerCall   = "X-Conformance-Call"   // the logical call: its attempts share it
)

// answer says how the upstream answers the nth attempt (from 1) of a call.
type answer func(nth int) (status int, delay time.Duration)

func always(status int) answer {
	return func(int) (int, time.Duration) { return status, 0 }
}

// slowly answers status after delay.
func slowly(status int, delay time.Duration) answer {
	return func(int) (int, time.Duration) { return status, delay }
}

// failFirst answers 503 to a call's first attempt and 200 to the others.
func failFirst(nth int) (int, time.Duration) {
	if nth == 1 {
		return http.StatusServiceUnavailable, 0
	}
	return http.StatusOK, 0
}

// seen is one request the upstream received.
type seen struct {
	caller, call, method, key string
	nth                       int // attempt of its call (by its caller), from 1
}

// upstream is a dependency: an HTTP server on loopback that records every
// request and the most requests it had in progress at once. All three
// callers name it alike (its host:port), so they share its breaker.
type upstream struct {
	srv *httptest.Server
	dep string

	mu       sync.Mutex
	answer   answer
	reqs     []seen
	attempts map[string]int // caller and call → attempts seen
	inFlight int
	peak     int
}

func newUpstream(t *testing.T, a answer) *upstream {
	t.Helper()
	u := &upstream{answer: a, attempts: map[string]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	u.dep = strings.TrimPrefix(u.srv.URL, "http://")
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	s := seen{caller: r.Header.Get(headerCaller), call: r.Header.Get(headerCall), method: r.Method,
		key: r.Header.Get("Idempotency-Key")}
	u.mu.Lock()
	id := s.caller + "\x00" + s.call
	u.attempts[id]++
	s.nth = u.attempts[id]
	u.reqs = append(u.reqs, s)
	u.inFlight++
	u.peak = max(u.peak, u.inFlight)
	ans := u.answer
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.inFlight--
		u.mu.Unlock()
	}()
	status, delay := ans(s.nth)
	if delay > 0 {
		tm := time.NewTimer(delay)
		select {
		case <-tm.C:
		case <-r.Context().Done():
			tm.Stop()
			return
		}
	}
	w.WriteHeader(status)
}

// url is the upstream's URL with path.
func (u *upstream) url(path string) string { return u.srv.URL + path }

// set changes how the upstream answers from now on.
func (u *upstream) set(a answer) {
	u.mu.Lock()
	u.answer = a
	u.mu.Unlock()
}

// requests returns what the upstream received from caller kind ("" for
// every caller).
func (u *upstream) requests(kind string) []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []seen
	for _, s := range u.reqs {
		if kind == "" || s.caller == kind {
			out = append(out, s)
		}
	}
	return out
}

// requestsOf returns the attempts of call (its headerCall value) from
// caller kind, in the order they arrived.
func (u *upstream) requestsOf(kind, call string) []seen {
	var out []seen
	for _, s := range u.requests(kind) {
		if s.call == call {
			out = append(out, s)
		}
	}
	return out
}

// count is len(requests(kind)).
func (u *upstream) count(kind string) int { return len(u.requests(kind)) }

// resetPeak forgets the most requests in progress so far; peak says the
// most since.
func (u *upstream) resetPeak() {
	u.mu.Lock()
	u.peak = u.inFlight
	u.mu.Unlock()
}

func (u *upstream) peakInFlight() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.peak
}
