package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
)

// maxTimeoutMs bounds Fusebox-Timeout-Ms (24 h, as clientlib's Middleware).
const maxTimeoutMs = int64(24 * time.Hour / time.Millisecond)

// maxKeptBody is how much of a failed attempt's body is kept for the
// caller while a retry is tried (clientlib keeps as much).
const maxKeptBody = 64 << 10

// errAttemptTimeout cancels an attempt whose own timeout fired.
var errAttemptTimeout = errors.New("fusebox proxy: the attempt's timeout passed before the upstream's answer")

// class says what a request's method and headers let the proxy repeat
// (clientlib's RoundTripper decides alike).
type class uint8

const (
	notRetryable class = iota // POST or PATCH without Idempotency-Key, CONNECT, other methods
	idempotent                // GET, HEAD, OPTIONS, TRACE, PUT, DELETE (RFC 9110)
	keyed                     // POST or PATCH with Idempotency-Key: the server deduplicates
)

func requestClass(r *http.Request) class {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return idempotent
	case http.MethodPost, http.MethodPatch:
		if k := r.Header.Get(HeaderIdempotencyKey); k != "" && len(k) <= 1024 && headerValue(k) {
			return keyed
		}
	}
	return notRetryable
}

// verdict is what one attempt's outcome means (clientlib's
// DefaultClassifier for HTTP).
type verdict struct {
	failure, retryable, slow bool
	retryAfter               time.Duration
}

func statusVerdict(code int, retryAfter string) verdict {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return verdict{failure: true, retryable: true, retryAfter: backoff.ParseRetryAfter(retryAfter, time.Now())}
	}
	return verdict{failure: code >= 500}
}

// errVerdict: an attempt without an answer. Network errors (refused,
// reset, EOF before the answer, timeouts) are retryable failures; others
// (a bad certificate, a malformed answer) are failures made once.
func errVerdict(err error) verdict {
	for _, errno := range [...]syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EPIPE, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.ETIMEDOUT} {
		if errors.Is(err, errno) {
			return verdict{failure: true, retryable: true}
		}
	}
	var ne net.Error
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || (errors.As(err, &ne) && ne.Timeout()) {
		return verdict{failure: true, retryable: true}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return verdict{failure: true, retryable: true}
	}
	return verdict{failure: true}
}

// outcome is the engine's outcome of a verdict.
func (v verdict) outcome() sharedstate.Outcome {
	switch {
	case v.failure && v.slow:
		return sharedstate.SlowFailure
	case v.failure:
		return sharedstate.Failure
	case v.slow:
		return sharedstate.Slow
	}
	return sharedstate.Success
}

// settings are the retry settings of a snapshot, made usable.
type settings struct {
	maxAttempts int
	perAttempt  time.Duration
	slow        time.Duration
	backoff     backoff.Policy
}

func settingsOf(s *sharedstate.Snapshot) settings {
	if s == nil {
		return settings{maxAttempts: 1}
	}
	r := s.Retry
	return settings{
		maxAttempts: max(r.MaxAttempts, 1), perAttempt: max(r.PerAttemptTimeout, 0), slow: s.SlowCallDuration,
		backoff: backoff.Policy{Base: r.BackoffBase, Max: r.BackoffMax, Jitter: backoff.JitterNamed(string(r.Jitter))},
	}
}

// admission is how the first attempt was admitted.
type admission struct {
	kind   sharedstate.AttemptKind // what Record is told: Probe when AcquireProbe counted the attempt
	probe  bool                    // holds the probe permit: report ProbeOutcome
	reason string                  // refused: why (HeaderRejected)
	why    sharedstate.Reason      // refused by the breaker or the budget
}

// admitFirst decides the first attempt, as clientlib's admitFirst does
// from the agent's snapshot: the breaker and throttling (Decide), a
// half-open probe permit (AcquireProbe), the concurrency limit. e counts
// this request already.
func (p *Proxy) admitFirst(dep string, snap *sharedstate.Snapshot, e *depEntry) admission {
	dec := p.eng.Decide(dep)
	switch dec.Verdict {
	case sharedstate.Reject:
		p.eng.Record(dep, sharedstate.FirstAttempt, sharedstate.Rejected)
		return admission{reason: dec.Reason.String(), why: dec.Reason}
	case sharedstate.AllowProbe:
		d := p.eng.AcquireProbe(dep) // counts the attempt or the rejection
		switch d.Verdict {
		case sharedstate.AllowProbe:
			return admission{kind: sharedstate.Probe, probe: true}
		case sharedstate.Allow:
			return admission{kind: sharedstate.Probe}
		}
		return admission{reason: d.Reason.String(), why: d.Reason}
	}
	if snap != nil && snap.ConcurrencyLimit > 0 && snap.Mode != sharedstate.ModeShadow {
		if limit := p.eng.ConcurrencyLimit(dep); limit > 0 && e.inFlight.Load() > int64(limit) {
			p.eng.Record(dep, sharedstate.FirstAttempt, sharedstate.Rejected)
			return admission{reason: "concurrency-limit"}
		}
	}
	return admission{kind: sharedstate.FirstAttempt}
}

// forward proxies a forward- or reverse-form request: admission, attempts
// with retries as the class, the policy and the fleet budget allow, each
// outcome recorded, the last answer handed on.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, t *target) {
	f := t.form
	ctx, cancel, e, snap, ok := p.begin(w, r, t)
	if !ok {
		return
	}
	defer cancel()
	defer e.leave()
	set := settingsOf(snap)

	owner, nested := r.Header.Get(HeaderRetryOwner), true
	if owner == "" || len(owner) > maxOwnerLen || !headerValue(owner) {
		nested = false
		owner = p.cfg.Service
		if s := r.Header.Get(HeaderService); s != "" && len(s) <= maxOwnerLen && headerValue(s) {
			owner = s
		}
	}
	maxAttempts := set.maxAttempts
	if nested || requestClass(r) == notRetryable {
		maxAttempts = 1
	}

	body, err := p.readBody(r, maxAttempts > 1)
	if err != nil {
		if r.Context().Err() != nil {
			p.m.requests[f][resultCanceled].Inc()
			return
		}
		p.answerInvalid(w, f, badRequest("bad-body", "fusebox proxy: reading the request body: "+err.Error()))
		return
	}
	if body.over {
		maxAttempts = 1
		w.Header().Set(HeaderNotRetried, body.notRetried)
		p.m.unbuffered.Inc()
	}

	adm := p.admitFirst(t.dep, snap, e)
	if adm.reason != "" {
		p.answerRejected(w, f, t, adm.reason, adm.why, 0, nil)
		return
	}

	out := p.outRequest(r, t, owner)
	rt := http.RoundTripper(p.transport)
	if t.scheme == schemeH2C {
		rt = p.h2c
	}
	deadline, hasDeadline := ctx.Deadline()
	kind := adm.kind
	probe := adm.probe
	if probe {
		out.Header[HeaderProbe] = probeValue
		w.Header()[HeaderProbe] = probeValue
	}
	var prevWait time.Duration
	for n := 1; ; n++ {
		if n == 2 && adm.probe {
			delete(out.Header, HeaderProbe)
		}
		p.m.attempts[kind].Inc()
		a := p.try(ctx, out, rt, body, set.perAttempt, deadline, hasDeadline, n > 1)
		var v verdict
		switch {
		case a.err != nil && errors.Is(a.err, errOwnListener):
			p.answerInvalid(w, f, &requestError{status: http.StatusForbidden, reason: "own-listener",
				msg: "fusebox proxy: " + t.authority + " resolves to one of the agent's own listeners"})
			return
		case a.err != nil && ctx.Err() != nil:
			if r.Context().Err() != nil { // the client went away: nothing to say about the upstream
				p.m.requests[f][resultCanceled].Inc()
				return
			}
			// The caller's deadline passed: the upstream did not answer in time.
			v = verdict{failure: true, slow: set.slow > 0 && a.elapsed >= set.slow}
			p.record(t.dep, kind, &probe, v)
			p.answerError(w, f, t, n, true, a.err)
			return
		case a.err != nil && a.own:
			v = verdict{failure: true, retryable: true, slow: true} // a timeout is a slow failure
		case a.err != nil:
			v = errVerdict(a.err)
			v.slow = set.slow > 0 && a.elapsed >= set.slow
		default:
			v = statusVerdict(a.resp.StatusCode, a.resp.Header.Get("Retry-After"))
			v.slow = set.slow > 0 && a.elapsed >= set.slow
		}
		p.record(t.dep, kind, &probe, v)

		retry := v.retryable && n < maxAttempts
		var wait time.Duration
		if retry {
			wait = set.backoff.Wait(n-1, prevWait, backoff.Uniform(p.random()))
			prevWait = wait
			if v.retryAfter > wait {
				wait = v.retryAfter
				// Without a deadline, a Retry-After beyond the policy's
				// longest backoff is the caller's to honour.
				retry = hasDeadline || set.backoff.Max <= 0 || wait <= set.backoff.Max
			}
		}
		if retry && hasDeadline {
			next := time.Now().Add(wait)
			if set.perAttempt > 0 {
				retry = !next.Add(set.perAttempt).After(deadline)
			} else {
				retry = next.Before(deadline)
			}
		}
		var refused sharedstate.Decision
		if retry {
			if refused = p.eng.AcquireRetry(t.dep); !refused.Allowed() {
				p.m.rejected.WithLabelValues(label(refused.Reason.String())).Inc()
				retry = false
			}
		}
		if !retry {
			rejected := ""
			if refused.Verdict == sharedstate.Reject {
				rejected = refused.Reason.String()
			}
			switch {
			case a.resp != nil:
				p.answerUpstream(w, f, a, n, rejected)
			case rejected != "":
				p.answerRejected(w, f, t, rejected, refused.Reason, n, a.err)
			default:
				a.cancel(nil)
				p.answerError(w, f, t, n, a.own, a.err)
			}
			return
		}
		kept := a.keep() // the answer to hand on should the retry be refused
		if wait > 0 {
			tm := time.NewTimer(wait)
			select {
			case <-tm.C:
			case <-ctx.Done():
				tm.Stop()
				if r.Context().Err() != nil {
					p.m.requests[f][resultCanceled].Inc()
					return
				}
				if kept.resp != nil {
					p.answerUpstream(w, f, kept, n, "")
				} else {
					p.answerError(w, f, t, n, true, context.DeadlineExceeded)
				}
				return
			}
		}
		kind = sharedstate.Retry
	}
}

// begin applies the caller's deadline (Fusebox-Timeout-Ms) to the
// request's context and counts the request in flight in its dependency's
// entry (the caller calls e.leave and cancel); with ok false it has
// answered the request itself.
func (p *Proxy) begin(w http.ResponseWriter, r *http.Request, t *target) (
	ctx context.Context, cancel context.CancelFunc, e *depEntry, snap *sharedstate.Snapshot, ok bool) {
	ctx, cancel = r.Context(), func() {}
	if v := r.Header.Get(HeaderTimeoutMs); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > maxTimeoutMs {
			p.answerInvalid(w, t.form, badRequest("bad-timeout", "fusebox proxy: "+HeaderTimeoutMs+" "+quote(v)+
				": want 1-"+strconv.FormatInt(maxTimeoutMs, 10)+" milliseconds"))
			return nil, nil, nil, nil, false
		}
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	}
	e, err := p.entry(t.dep)
	if err != nil {
		cancel()
		p.refuseEntry(w, t.form, t, err)
		return nil, nil, nil, nil, false
	}
	if snap = p.eng.Snapshot(t.dep); snap == nil { // the engine forgot it since the proxy tracked it
		_ = p.eng.Track(t.dep)
		snap = p.eng.Snapshot(t.dep)
	}
	return ctx, cancel, e, snap, true
}

// record counts an attempt's outcome and, for a probe, its result.
func (p *Proxy) record(dep string, kind sharedstate.AttemptKind, probe *bool, v verdict) {
	p.eng.Record(dep, kind, v.outcome())
	if *probe {
		p.eng.ProbeOutcome(dep, v.outcome()) // a slow probe is judged as one
		*probe = false
	}
}

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1) and the
// proxy's own request headers: not sent on.
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	HeaderDependency: true, HeaderUpstream: true, HeaderService: true, HeaderRetryOwner: true, HeaderTimeoutMs: true,
	HeaderProbe: true,
}

// answerHeaders are the headers the proxy says on its answers: an
// upstream's own (another proxy's) are not handed on as this proxy's.
var answerHeaders = map[string]bool{
	HeaderAttempts: true, HeaderRejected: true, HeaderNotRetried: true, HeaderProbe: true, HeaderError: true,
}

// connectionTokens returns the headers the Connection header names.
func connectionTokens(h http.Header) map[string]bool {
	var out map[string]bool
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" {
				if out == nil {
					out = map[string]bool{}
				}
				out[textproto.CanonicalMIMEHeaderKey(tok)] = true
			}
		}
	}
	return out
}

// outRequest is the request the attempts send: the upstream's URL and
// Host, the headers without hop-by-hop ones, and Fusebox-Retry-Owner.
func (p *Proxy) outRequest(r *http.Request, t *target, owner string) *http.Request {
	out := r.WithContext(r.Context())
	scheme := schemeHTTP
	if t.scheme == schemeHTTPS {
		scheme = schemeHTTPS
	}
	out.URL = &url.URL{Scheme: scheme, Host: t.dialAddr(), Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	out.Host = t.authority
	out.RequestURI = ""
	out.Close = false
	out.Body, out.GetBody, out.ContentLength = nil, nil, 0
	out.TransferEncoding = nil
	out.Trailer = nil
	conn := connectionTokens(r.Header)
	h := make(http.Header, len(r.Header)+2)
	for k, vs := range r.Header {
		if hopHeaders[k] || conn[k] {
			continue
		}
		h[k] = vs
	}
	if te := r.Header.Get("Te"); strings.Contains(strings.ToLower(te), "trailers") {
		h.Set("Te", "trailers")
	}
	h.Set(HeaderRetryOwner, owner)
	out.Header = h
	return out
}

// attempt is one attempt's result.
type attempt struct {
	resp    *http.Response
	err     error
	elapsed time.Duration
	own     bool                    // the attempt's own timeout fired
	cancel  context.CancelCauseFunc // ends the attempt's request (and its body)
}

// try makes one attempt: its own timeout (perAttempt, under the
// caller's deadline) bounds it until the answer's headers; the body of
// the answer is bounded by the caller's deadline only.
func (p *Proxy) try(ctx context.Context, out *http.Request, rt http.RoundTripper, b body, perAttempt time.Duration,
	deadline time.Time, hasDeadline, retry bool) attempt {
	rctx, cancel := context.WithCancelCause(ctx)
	start := time.Now()
	var timer *time.Timer
	if perAttempt > 0 {
		timer = time.AfterFunc(perAttempt, func() { cancel(errAttemptTimeout) })
		if d := start.Add(perAttempt); !hasDeadline || d.Before(deadline) {
			deadline, hasDeadline = d, true
		}
	}
	if hasDeadline {
		out.Header[HeaderTimeoutMs] = []string{strconv.FormatInt(max(time.Until(deadline).Milliseconds(), 1), 10)}
	}
	req := out.WithContext(rctx)
	switch {
	case b.buf != nil:
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(b.buf)), b.length
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.buf)), nil }
	case b.stream != nil && !retry:
		req.Body, req.ContentLength = io.NopCloser(b.stream), b.length
	}
	resp, err := rt.RoundTrip(req)
	a := attempt{resp: resp, err: err, elapsed: time.Since(start), cancel: cancel}
	if timer != nil && !timer.Stop() { // the attempt's timeout fired
		if err == nil { // just as the headers came: too late all the same
			resp.Body.Close()
			a.resp, a.err = nil, errAttemptTimeout
		}
		a.own = ctx.Err() == nil
	}
	if a.err != nil {
		cancel(nil)
		if a.own {
			a.err = errAttemptTimeout
		}
	}
	return a
}

// keep reads up to maxKeptBody of a failed attempt's body and closes it:
// the answer to hand on should the retry not happen.
func (a attempt) keep() attempt {
	if a.resp == nil {
		return attempt{}
	}
	b, _ := io.ReadAll(io.LimitReader(a.resp.Body, maxKeptBody))
	a.resp.Body.Close()
	a.cancel(nil)
	resp := *a.resp
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header = a.resp.Header.Clone()
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	resp.Header.Del("Transfer-Encoding")
	resp.Trailer = nil
	return attempt{resp: &resp, cancel: func(error) {}}
}

var probeValue = []string{"1"}

// attemptsValue is the Fusebox-Attempts value of n.
func attemptsValue(n int) []string {
	if n < len(attemptsValues) {
		return attemptsValues[n]
	}
	return []string{strconv.Itoa(n)}
}

var attemptsValues = func() [][]string {
	out := make([][]string, 16)
	for i := range out {
		out[i] = []string{strconv.Itoa(i)}
	}
	return out
}()

// copyBuffers are the buffers of streamed answers.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
