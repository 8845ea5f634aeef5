package store

import (
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	// ErrConflict is matched (errors.Is) by every *ConflictError: a
	// compare-and-swap write found another mod revision than expected.
	ErrConflict = errors.New("store: conflict")

	// ErrNotFound is wrapped when a key does not exist.
	ErrNotFound = errors.New("store: not found")

	// ErrClosed is returned by Watcher.Err after Close.
	ErrClosed = errors.New("store: closed")
)

// ConflictError reports a failed compare-and-swap. Revisions are etcd mod
// revisions; 0 means "the key does not exist".
type ConflictError struct {
	Key      string // the etcd key
	Expected int64  // the mod revision the caller expected
	Current  int64  // the mod revision found
	// Revision is etcd's revision when the key was read (0 if unknown).
	// An Expected above it cannot come from etcd's present history: see
	// FromAnotherHistory.
	Revision int64
}

// FromAnotherHistory reports whether the expected revision is above every
// revision etcd has: it was read before etcd's history went back (a
// snapshot restore, a wiped etcd), so the caller's view of the key is from
// a history that no longer exists.
func (e *ConflictError) FromAnotherHistory() bool { return e.Revision > 0 && e.Expected > e.Revision }

func (e *ConflictError) Error() string {
	if e.FromAnotherHistory() {
		return fmt.Sprintf("store: conflict on %s: expected mod revision %d, but etcd is only at revision %d (current %s): "+
			"the expected revision is not from etcd's present history (read before a restore from a snapshot or a wipe of etcd?); read the key again",
			e.Key, e.Expected, e.Revision, revString(e.Current))
	}
	return fmt.Sprintf("store: conflict on %s: expected mod revision %s, current %s",
		e.Key, revString(e.Expected), revString(e.Current))
}

// Unwrap returns ErrConflict.
func (e *ConflictError) Unwrap() error { return ErrConflict }

func revString(rev int64) string {
	if rev == 0 {
		return "0 (absent)"
	}
	return fmt.Sprint(rev)
}

// InvalidValueError reports a value found in etcd that does not decode or
// validate. Readers skip such values; Watch reports them to its handler.
type InvalidValueError struct {
	Key         string // the etcd key
	ModRevision int64
	Err         error // why it is invalid; may be a *sharedstate.ValidationError
}

func (e *InvalidValueError) Error() string {
	return fmt.Sprintf("store: invalid value at %s (mod revision %d): %v", e.Key, e.ModRevision, e.Err)
}

// Unwrap returns the cause.
func (e *InvalidValueError) Unwrap() error { return e.Err }

// invalidValue returns the *InvalidValueError of kv.
func invalidValue(kv *mvccpb.KeyValue, err error) *InvalidValueError {
	return &InvalidValueError{Key: string(kv.Key), ModRevision: kv.ModRevision, Err: err}
}

// IsUnavailable reports whether err says that etcd could not serve a
// request for now — it has no leader, its leader changed, it timed out
// waiting for one, or no connection is up — so that the request may
// succeed when tried again. Servers map it to their own "unavailable".
//
// etcd's client returns etcd's own errors ("etcdserver: leader changed")
// as rpctypes.EtcdError, which is not a gRPC status: status.FromError alone
// misses them.
func IsUnavailable(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	if st, ok := status.FromError(err); ok {
		return st.Code() == codes.Unavailable
	}
	return false
}
