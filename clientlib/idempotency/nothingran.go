package idempotency

import (
	"context"
	"sync/atomic"
)

// handlerRun is what the Deduper hands a handler that it runs under a reserved
// key, through the request's context.
type handlerRun struct {
	nothingRan atomic.Bool
}

type runKey struct{}

func withRun(ctx context.Context, r *handlerRun) context.Context {
	return context.WithValue(ctx, runKey{}, r)
}

// NothingRan tells the Deduper that the request whose context is ctx had
// no effect: it did nothing, or undid all it did. When the handler returns
// (or panics), the Deduper then releases the request's key instead of
// storing its answer, so a retry with the same key runs again; the answer
// itself still reaches the caller.
//
// Without it, every answer of a handler that started is stored and
// replayed, 5xx and panics included: the Deduper cannot know what a
// failed handler did, and a retrier (clientlib, the egress proxy, the
// Python client) repeats 502, 503 and 504. Call NothingRan before the
// handler returns, from the handler or any goroutine it started, and only
// when it is true: for example when a dependency refused before anything
// was written, or a transaction was rolled back. A call after the handler
// returned has no effect.
//
// It reports whether a Deduper holds a key for this request: false for a
// request without a key, one run unrecorded because the store failed
// (FailOpen), or a context that no Deduper's handler was given. It works
// the same for HTTP (r.Context()) and gRPC (the handler's ctx), and is
// safe for concurrent use.
func NothingRan(ctx context.Context) bool {
	r, ok := ctx.Value(runKey{}).(*handlerRun)
	if !ok {
		return false
	}
	r.nothingRan.Store(true)
	return true
}
