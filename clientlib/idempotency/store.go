package idempotency

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Errors of stores and of the Deduper. A Store wraps them with %w.
var (
	// ErrReservationLost: Complete or Release was called with a token that
	// no longer holds the key (the reservation expired, and perhaps another
	// request reserved the key since).
	ErrReservationLost = errors.New("idempotency: reservation lost")
	// ErrStoreFull: the store refused a new key because it holds as many
	// keys or bytes as it may, and none of them can be evicted.
	ErrStoreFull = errors.New("idempotency: store full")
	// ErrInvalidOption: New or NewMemoryStore was given a bad option.
	ErrInvalidOption = errors.New("idempotency: invalid option")
)

// Record is what a store keeps for one key: a reservation while the first
// request runs, then its response.
type Record struct {
	// Fingerprint identifies the request that reserved the key (method,
	// path and a hash of the body; for gRPC the method and the marshalled
	// request). A request with the same key and another fingerprint is
	// refused.
	Fingerprint string
	// Completed is false while the first request runs (a reservation) and
	// true once its Response is stored.
	Completed bool
	// Response is the stored outcome (valid when Completed).
	Response Response
}

// Response is a stored outcome, HTTP or gRPC.
type Response struct {
	// Status is the HTTP status code, or the gRPC status code.
	Status int
	// Header holds the selected response headers (HTTP) or the response's
	// header metadata (gRPC), names canonical for HTTP.
	Header http.Header
	// Body is the HTTP body, or the marshalled gRPC response message.
	Body []byte
	// MessageType is the full name of the gRPC response message ("" for
	// HTTP and for gRPC errors).
	MessageType string
	// Message is the gRPC status message of an error ("" otherwise).
	Message string
	// Omitted is true when the body was larger than the Deduper's limit and
	// was not stored: the operation completed, but its answer cannot be
	// replayed. Size is then the body's size.
	Omitted bool
	// Size is the body's size in bytes, stored or not.
	Size int64
}

// size is what the record weighs in a store's byte accounting.
func (r *Record) size() int64 {
	n := int64(len(r.Fingerprint)) + int64(len(r.Response.Body)) +
		int64(len(r.Response.MessageType)) + int64(len(r.Response.Message))
	for k, vs := range r.Response.Header {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v))
		}
	}
	return n
}

// Store keeps records by key, with TTLs. Keys arrive already scoped by
// caller (see Deduper). Every method must be safe for concurrent use, also
// by several processes sharing one store (that is what makes deduplication
// work across instances), and Reserve must be atomic: of any number of
// concurrent Reserve calls for a key without a record, exactly one wins.
type Store interface {
	// Reserve claims key for ttl when the store has no record for it, and
	// returns a token that names this reservation for Complete and Release.
	// When a record exists it returns ("", record, nil) instead.
	Reserve(ctx context.Context, key, fingerprint string, ttl time.Duration) (token string, existing *Record, err error)
	// Complete replaces the reservation named by token with rec (Completed
	// set) for ttl. It returns an error matching ErrReservationLost when
	// token no longer holds key.
	Complete(ctx context.Context, key, token string, rec *Record, ttl time.Duration) error
	// Release deletes the reservation named by token, so that a later
	// request with key runs again. It returns an error matching
	// ErrReservationLost when token no longer holds key.
	Release(ctx context.Context, key, token string) error
	// Get returns the record of key, or nil (and no error) when there is
	// none.
	Get(ctx context.Context, key string) (*Record, error)
}
