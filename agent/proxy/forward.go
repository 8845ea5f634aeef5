package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// maxTimeoutMs bounds Fusebox-Timeout-Ms.
const maxTimeoutMs = int64(clientlib.MaxPropagatedTimeout / time.Millisecond)

// forward proxies a forward- or reverse-form request: it builds the
// request the upstream gets and sends it through clientlib's RoundTripper
// on the dependency's handle, which decides, makes the attempts and counts
// them; then it hands the answer on, saying in its headers what the call
// did (clientlib.CallInfo).
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, t *target) {
	f := t.form
	ctx, cancel, ok := p.callerDeadline(w, r, t)
	if !ok {
		return
	}
	defer cancel()
	e, ok := p.dependency(w, t)
	if !ok {
		return
	}
	defer e.leave()

	var info clientlib.CallInfo
	owner, nested := p.retryOwner(r, t)
	var cctx context.Context
	if nested { // its caller retries: one attempt, the owner passed on
		cctx = clientlib.ContextWithRetryOwner(clientlib.ContextWithCallOptions(ctx, clientlib.WithCallInfo(&info)), owner)
	} else {
		cctx = clientlib.ContextWithCallOptions(ctx, clientlib.WithCallInfo(&info), clientlib.WithRetryOwner(owner))
	}
	out := p.outRequest(cctx, r, t)
	// The class is the request's as it is sent (clientlib judges it
	// again); the body is kept only for a request that may be retried.
	b, err := p.readBody(r, !nested && clientlib.RequestClass(out) != clientlib.NonRetryable)
	if err != nil {
		if r.Context().Err() != nil {
			p.m.requests[f][resultCanceled].Inc()
			return
		}
		p.answerInvalid(w, f, badRequest("bad-body", "fusebox proxy: reading the request body: "+err.Error()))
		return
	}
	if b.notRetried != "" {
		w.Header().Set(HeaderNotRetried, b.notRetried)
		p.m.unbuffered.Inc()
	}
	switch {
	case b.buf != nil:
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(b.buf)), b.length
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.buf)), nil }
	case b.stream != nil: // without GetBody: one attempt
		out.Body, out.ContentLength = io.NopCloser(b.stream), b.length
	}

	resp, err := e.roundTripper(t.scheme).RoundTrip(out)
	p.counted(&info)
	if info.Probe {
		w.Header()[HeaderProbe] = probeValue
	}
	if err != nil {
		p.answerFailed(w, r, t, &info, err)
		return
	}
	p.answerUpstream(w, f, resp, &info)
}

// counted counts what a call did in the proxy's metrics: its attempts by
// kind, and the refusal that ended it.
func (p *Proxy) counted(info *clientlib.CallInfo) {
	if info.Rejected != nil {
		p.m.rejected.WithLabelValues(label(info.Rejected.Reason)).Inc()
	}
	if info.Attempts == 0 {
		return
	}
	first := sharedstate.FirstAttempt
	if info.Probe {
		first = sharedstate.Probe
	}
	p.m.attempts[first].Inc()
	if n := info.Attempts - 1; n > 0 {
		p.m.attempts[sharedstate.Retry].Add(float64(n))
	}
}

// lastAttemptErr is the last attempt's error in the error of a call whose
// retry was refused (the refusal joined with it).
func lastAttemptErr(err error) error {
	var rej *clientlib.RejectedError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !errors.As(e, &rej) {
				return e
			}
		}
	}
	return nil
}

// classify is clientlib's DefaultClassifier, except that a connection the
// proxy refused to make (to one of the agent's own listeners) says nothing
// about the dependency: it counts as nothing and is not retried.
func classify(err error) clientlib.Classification {
	if errors.Is(err, errOwnListener) {
		return clientlib.Classification{NotCounted: true}
	}
	return clientlib.DefaultClassifier(err)
}

// callerDeadline applies the caller's deadline (Fusebox-Timeout-Ms) to the
// request's context (the caller calls cancel); with ok false it has
// answered the request itself.
func (p *Proxy) callerDeadline(w http.ResponseWriter, r *http.Request, t *target) (ctx context.Context, cancel context.CancelFunc, ok bool) {
	ctx, cancel = r.Context(), func() {}
	if v := r.Header.Get(HeaderTimeoutMs); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > maxTimeoutMs {
			p.answerInvalid(w, t.form, badRequest("bad-timeout", "fusebox proxy: "+HeaderTimeoutMs+" "+quote(v)+
				": want 1-"+strconv.FormatInt(maxTimeoutMs, 10)+" milliseconds"))
			return nil, nil, false
		}
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	}
	return ctx, cancel, true
}

// retryOwner is who owns the request's retries. A valid Fusebox-Retry-Owner
// says its caller does (nested: one attempt, the owner passed on).
// Otherwise the proxy retries on behalf of the calling service, named
// upstream so that two services' idempotency keys never share a space at
// a server deduplicating by owner and key: Fusebox-Service when valid, else
// the dependency a route names, else Config.Service.
func (p *Proxy) retryOwner(r *http.Request, t *target) (owner string, nested bool) {
	if o := r.Header.Get(HeaderRetryOwner); clientlib.ValidRetryOwner(o) {
		return o, true
	}
	if s := r.Header.Get(HeaderService); clientlib.ValidRetryOwner(s) {
		return s, false
	}
	if t.route != "" {
		return t.route, false
	}
	return p.cfg.Service, false
}

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1) and the
// proxy's own request headers: not sent on (clientlib sets
// Fusebox-Retry-Owner, Fusebox-Timeout-Ms and Fusebox-Probe per attempt).
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
	HeaderUntracked: true,
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

// outRequest is the request the upstream gets, made with ctx: the
// upstream's URL and Host, the headers without hop-by-hop ones, no body
// yet. Idempotency-Key always goes on, even when Connection names it: the
// retry class is judged on what is sent, and a keyed request must reach
// the upstream with its key on every attempt.
func (p *Proxy) outRequest(ctx context.Context, r *http.Request, t *target) *http.Request {
	out := r.WithContext(ctx)
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
	h := make(http.Header, len(r.Header)+3)
	for k, vs := range r.Header {
		if hopHeaders[k] || (conn[k] && k != HeaderIdempotencyKey) {
			continue
		}
		h[k] = vs
	}
	if te := r.Header.Get("Te"); strings.Contains(strings.ToLower(te), "trailers") {
		h.Set("Te", "trailers")
	}
	out.Header = h
	return out
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
