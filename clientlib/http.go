package clientlib

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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
//     within the deadline); 5xx count as failures; the bodies of failed
//     attempts are read (up to 64 KiB) and closed, and the last one is
//     returned to the caller as a normal response when retries end;
//   - each attempt carries Fusebox-Retry-Owner, Fusebox-Timeout-Ms (the
//     attempt's remaining time) and, when keyed, Idempotency-Key. The
//     per-attempt timeout covers the request until the response headers;
//     reading a successful body is bounded by the request's context only.
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

type roundTripper struct {
	c       *Client
	next    http.RoundTripper
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
	return sanitizeName(req.URL.Host)
}

// sanitizeName maps a host:port to a valid dependency name
// (sharedstate.HostDependencyName, as the agent's egress proxy names it).
func sanitizeName(s string) string { return sharedstate.HostDependencyName(s) }

func hasBody(req *http.Request) bool { return req.Body != nil && req.Body != http.NoBody }

func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	st := t.c.depState(t.depName(req))
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
		// The attempt's timeout bounds the request until its headers; the
		// body of a good answer is the caller's to read under its context.
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
		if !stop() && err == nil && actx.Err() != nil && ctx.Err() == nil {
			// The attempt's deadline fired just as the headers arrived.
			drainClose(resp.Body)
			rcancel(nil)
			return context.DeadlineExceeded
		}
		if err != nil {
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
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests {
			resp.Body = keepPrefix(resp.Body)
			rcancel(nil)
			last = resp
			return &HTTPStatusError{StatusCode: resp.StatusCode, Status: resp.Status,
				RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
		}
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: rcancel}
		last = resp
		return nil
	}, t.options, callOpts, false)
	if !started && hasBody(req) {
		req.Body.Close() // a RoundTripper always closes the request body
	}
	if err == nil {
		return last, nil
	}
	var hs *HTTPStatusError
	if last != nil && ctx.Err() == nil && errors.As(err, &hs) {
		// The dependency answered: the caller gets its last answer.
		return last, nil
	}
	if last != nil {
		last.Body.Close()
	}
	return nil, err
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
		if key != "" {
			return IdempotentWithKey, key
		}
	}
	return NonRetryable, ""
}

// keepPrefix reads up to maxErrorBody of a failed attempt's body, closes
// it (so the connection can be reused when it was read to the end), and
// returns the part read.
func keepPrefix(body io.ReadCloser) io.ReadCloser {
	b, _ := io.ReadAll(io.LimitReader(body, maxErrorBody))
	body.Close()
	return io.NopCloser(bytes.NewReader(b))
}

func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxErrorBody))
	body.Close()
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
