package clientlib

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// maxErrorBody is how much of a failed attempt's body is kept (for the
// caller, if that attempt's response is the final answer) before the body
// is closed.
const maxErrorBody = 64 << 10

// errConnClosed replaces the bare io.EOF net/http returns when the server
// closes a new connection before any response.
var errConnClosed = fmt.Errorf("the server closed the connection before answering: %w", io.ErrUnexpectedEOF)

// HTTPOption configures Client.RoundTripper.
type HTTPOption struct {
	name    string
	nameFn  func(*http.Request) string
	options []CallOption
}

// HTTPDependency names the dependency every request of the RoundTripper
// belongs to (optional, default: the request URL's host with its port when
// the URL names one, as URL.Host gives them: "api.example.com",
// "10.0.0.5:8080"; two ports of one host are two dependencies, since two
// servers on one host fail apart; characters outside [A-Za-z0-9._:/-]
// become '_', "[::1]:8080" is "_::1_:8080").
func HTTPDependency(name string) HTTPOption { return HTTPOption{name: name} }

// HTTPDependencyFunc names the dependency of each request (optional).
func HTTPDependencyFunc(f func(*http.Request) string) HTTPOption { return HTTPOption{nameFn: f} }

// HTTPCallOptions applies opts to every request of the RoundTripper
// (optional). Per-request options go in the request's context
// (ContextWithCallOptions).
func HTTPCallOptions(opts ...CallOption) HTTPOption { return HTTPOption{options: opts} }

type classKey struct{}
type callOptionsKey struct{}

// ContextWithClass overrides the class the RoundTripper or the gRPC
// interceptor gives to requests made with ctx, e.g. IdempotentWithKey for a
// POST, which then gets an Idempotency-Key header (the same on every
// attempt) and may be retried.
func ContextWithClass(ctx context.Context, class Class) context.Context {
	return context.WithValue(ctx, classKey{}, class)
}

// ContextWithCallOptions adds call options to requests the RoundTripper or
// the gRPC interceptor makes with ctx.
func ContextWithCallOptions(ctx context.Context, opts ...CallOption) context.Context {
	return context.WithValue(ctx, callOptionsKey{}, opts)
}

func classFromContext(ctx context.Context) (Class, bool) {
	c, ok := ctx.Value(classKey{}).(Class)
	return c, ok
}

func optionsFromContext(ctx context.Context) []CallOption {
	o, _ := ctx.Value(callOptionsKey{}).([]CallOption)
	return o
}

// RoundTripper returns an http.RoundTripper that sends each request through
// the breaker of its dependency, with retries:
//
//   - GET, HEAD, OPTIONS, TRACE, PUT and DELETE are Idempotent; POST and
//     PATCH are retried only when they carry an Idempotency-Key header
//     (IdempotentWithKey), or when ContextWithClass says IdempotentWithKey,
//     in which case the header is generated once and sent on every attempt;
//     any other method is NonRetryable;
//   - a request body is replayed through Request.GetBody (a body without
//     GetBody makes the request NonRetryable);
//   - statuses 408, 429, 502, 503, 504 are retried (honouring Retry-After
//     within the deadline), unless the answer carries Idempotent-Replayed:
//     true (HeaderReplayed: a server's deduplication replaying the stored
//     answer of an earlier attempt, which every retry would get again),
//     which is final; 5xx count as failures. The body of a failed
//     attempt that may be retried is read (up to 64 KiB) under the
//     attempt's timeout (for at most 10s when the attempt has neither a
//     timeout nor a deadline) and closed: a stalled body ends the attempt,
//     not the call;
//     that prefix is the caller's answer, with its length, when the retry
//     is then not made. The answer no attempt follows (the last one, or a
//     status the classifier does not retry) is returned as it comes, its
//     body under the request's context;
//   - each attempt carries Fusebox-Retry-Owner, Fusebox-Timeout-Ms (the
//     attempt's remaining time), Fusebox-Probe on a half-open probe and,
//     when keyed, Idempotency-Key. The per-attempt timeout covers the
//     request until the response headers; reading a successful body is
//     bounded by the request's context only.
//
// A refused request returns an error matching ErrOpen (or ErrForcedOpen),
// without a response. next is http.DefaultTransport when nil. Do not also
// enable retries in next, or wrap calls made through it in Do: one
// retrying layer.
func (c *Client) RoundTripper(next http.RoundTripper, opts ...HTTPOption) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	rt := &roundTripper{c: c, next: next}
	for _, o := range opts {
		if o.name != "" {
			rt.name = o.name
		}
		if o.nameFn != nil {
			rt.nameFn = o.nameFn
		}
		rt.options = append(rt.options, o.options...)
	}
	return rt
}

// RoundTripper returns an http.RoundTripper that sends every request
// through d, as Client.RoundTripper does (same classes, retries, headers
// and errors); the handle's defaults (With) apply to every request. next is
// http.DefaultTransport when nil. Requests of an untracked handle make one
// attempt each (see Untracked).
func (d *Dependency) RoundTripper(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &roundTripper{c: d.st.c, next: next, st: d.st, options: d.defaults}
}

type roundTripper struct {
	c       *Client
	next    http.RoundTripper
	st      *depState // every request's (Dependency.RoundTripper), else named per request
	name    string
	nameFn  func(*http.Request) string
	options []CallOption
}

func (t *roundTripper) depName(req *http.Request) string {
	switch {
	case t.nameFn != nil:
		return t.nameFn(req)
	case t.name != "":
		return t.name
	}
	return sharedstate.HostDependencyName(req.URL.Host) // as the agent's egress proxy names it
}

func hasBody(req *http.Request) bool { return req.Body != nil && req.Body != http.NoBody }

func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	st := t.st
	if st == nil {
		st = t.c.depState(t.depName(req))
	}
	ctx := req.Context()
	class, key := requestClass(req)
	if hasBody(req) && req.GetBody == nil {
		class = NonRetryable
	}
	callOpts := optionsFromContext(ctx)
	if key != "" {
		callOpts = append(callOpts[:len(callOpts):len(callOpts)], WithIdempotencyKey(key))
	}

	var (
		last    *http.Response
		started bool
	)
	err := st.run(ctx, class, func(actx context.Context, a Attempt) error {
		if last != nil { // a retry: the previous answer is no longer the caller's
			last.Body.Close()
			last = nil
		}
		// The attempt's timeout bounds the request until its headers, and
		// the reading of a failed answer a retry may follow; the body of
		// the answer the caller gets is the caller's to read under its
		// context.
		rctx, rcancel := context.WithCancelCause(ctx)
		stop := context.AfterFunc(actx, func() { rcancel(context.Cause(actx)) })
		r := req.Clone(rctx)
		if started && hasBody(req) {
			body, err := req.GetBody()
			if err != nil {
				stop()
				rcancel(nil)
				return errors.Join(ErrNotRetryable, err)
			}
			r.Body = body
		}
		started = true
		a.SetHeaders(r.Header)
		resp, err := t.next.RoundTrip(r)
		if err != nil {
			stop()
			rcancel(nil)
			if err == io.EOF {
				// The server closed the connection without answering (it
				// may have done the work): a network error, retryable as
				// the class allows (an Idempotency-Key lets the server
				// deduplicate the retry).
				err = errConnClosed
			}
			return err
		}
		var herr error
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests {
			herr = statusError(resp)
			if a.mayRetry(herr) {
				// Keep what the caller gets should the retry not be made,
				// still under the attempt's timeout: a body that stalls
				// ends this attempt, never the caller's call.
				if a.Deadline.IsZero() {
					t := time.AfterFunc(keepWait, func() { rcancel(context.DeadlineExceeded) })
					defer t.Stop()
				}
				keepPrefix(resp)
				stop()
				rcancel(nil)
				last = resp
				return herr
			}
		}
		if !stop() && actx.Err() != nil && ctx.Err() == nil {
			// The attempt's deadline fired just as the headers arrived.
			resp.Body.Close()
			rcancel(nil)
			return context.DeadlineExceeded
		}
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: rcancel}
		last = resp
		return herr
	}, t.options, callOpts, false)
	if !started && hasBody(req) {
		req.Body.Close() // a RoundTripper always closes the request body
	}
	if err == nil {
		return last, nil
	}
	if _, answered := errors.AsType[*HTTPStatusError](err); answered && last != nil && ctx.Err() == nil {
		// The dependency answered: the caller gets its last answer.
		return last, nil
	}
	if last != nil {
		last.Body.Close()
	}
	return nil, err
}

// RequestClass returns the class the RoundTripper gives req: the class of
// ContextWithClass when req's context has one; else Idempotent for GET,
// HEAD, OPTIONS, TRACE, PUT and DELETE, IdempotentWithKey for a POST or
// PATCH with a valid Idempotency-Key header (1–1024 bytes of printable
// ASCII; an invalid one is sent as it is, once), NonRetryable for the rest.
// (The RoundTripper also makes a request whose body it cannot replay, one
// without GetBody, NonRetryable.) Judge a request as it will be sent:
// after a proxy removed its hop-by-hop headers, say.
func RequestClass(req *http.Request) Class {
	c, _ := requestClass(req)
	return c
}

// requestClass derives the class of a request, and the key of a keyed one.
func requestClass(req *http.Request) (Class, string) {
	key := req.Header.Get(HeaderIdempotencyKey)
	if c, ok := classFromContext(req.Context()); ok {
		if c != IdempotentWithKey {
			key = ""
		}
		return c, key
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete, "":
		return Idempotent, ""
	case http.MethodPost, http.MethodPatch:
		if validKey(key) {
			return IdempotentWithKey, key
		}
	}
	return NonRetryable, ""
}

// keepWait bounds the reading of a failed answer's body that a retry may
// follow when the attempt has neither a timeout nor a deadline.
const keepWait = 10 * time.Second

// keepPrefix replaces resp's body with up to maxErrorBody of it, read now,
// and closes the original (so that the connection can be reused when it
// was read to the end); resp's length says what was kept. The caller
// bounds the read: the attempt's timer cancels the request's context.
func keepPrefix(resp *http.Response) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	resp.TransferEncoding = nil
	resp.Trailer = nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}
