package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/coordinator/internal/auth"
	"github.com/fusebox-dev/fusebox/coordinator/internal/events"
	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/coordinator/internal/replay"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// Errors of the coordinator's own checks. Each is matched with errors.Is.
var (
	// ErrInvalidRequest is wrapped by errors about the request itself: a
	// missing or malformed dependency name, a negative TTL, an actor too long.
	ErrInvalidRequest = errors.New("coordinator: invalid request")
	// ErrNotFound is wrapped when what the request names does not exist.
	ErrNotFound = errors.New("coordinator: not found")
	// ErrClosed is returned by Start after Close.
	ErrClosed = errors.New("coordinator: closed")

	// errStreamBroken: sending on a stream failed while its client had not
	// cancelled (the connection broke, or Close stopped the server).
	errStreamBroken = errors.New("coordinator: stream broken")
)

// toStatus maps an error to the gRPC status the Admin API returns. It is
// the only place where errors become status codes (STYLE.md: one function
// per server boundary, errors.Is/As, never message strings).
//
//	auth.ErrUnauthenticated                     → Unauthenticated
//	auth.ErrPermissionDenied                    → PermissionDenied
//	*store.InvalidValueError (bad data in etcd) → FailedPrecondition
//	*sharedstate.ValidationError                → InvalidArgument, one BadRequest
//	                                              field violation per violation,
//	                                              and one per line in the message
//	sharedstate.ErrInvalidPolicy/Override/DependencyName,
//	ErrInvalidRequest                           → InvalidArgument
//	store.ErrConflict                           → Aborted
//	store.ErrNotFound, ErrNotFound,
//	history.ErrNoHistory                        → NotFound
//	errSimulationsBusy                          → ResourceExhausted
//	replay.ErrTooLong                           → InvalidArgument
//	events.ErrFellBehind (a slow Watch),
//	events.ErrTooManySubscribers (stream caps)  → ResourceExhausted
//	*events.ReplayError (Watch's after_id)      → OutOfRange
//	events.ErrClosed, ErrClosed                 → Unavailable
//	context.DeadlineExceeded / Canceled,
//	errStreamBroken                             → DeadlineExceeded / Canceled
//	etcd unavailable (store.IsUnavailable: no
//	leader, leader changed, no connection)      → Unavailable
//	anything else                               → Internal
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var (
		verr    *sharedstate.ValidationError
		invalid *store.InvalidValueError
		behind  *events.ReplayError
	)
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.Is(err, auth.ErrPermissionDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.As(err, &invalid):
		// Bad data already in etcd (say, a default policy written around
		// the coordinator) is not the caller's mistake.
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.As(err, &verr):
		return validationStatus(verr)
	case errors.Is(err, sharedstate.ErrInvalidPolicy),
		errors.Is(err, sharedstate.ErrInvalidOverride),
		errors.Is(err, sharedstate.ErrInvalidDependencyName),
		errors.Is(err, ErrInvalidRequest), errors.Is(err, replay.ErrTooLong):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, store.ErrConflict):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, store.ErrNotFound), errors.Is(err, ErrNotFound), errors.Is(err, history.ErrNoHistory):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, errSimulationsBusy):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, events.ErrFellBehind), errors.Is(err, events.ErrTooManySubscribers):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.As(err, &behind):
		return status.Error(codes.OutOfRange, err.Error())
	case errors.Is(err, events.ErrClosed), errors.Is(err, ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, errStreamBroken):
		return status.Error(codes.Canceled, err.Error())
	case store.IsUnavailable(err):
		// etcd's own errors ("etcdserver: leader changed") are not gRPC
		// statuses once its client returns them: store recognizes them.
		return status.Error(codes.Unavailable, "etcd unavailable: "+err.Error())
	}
	// etcd's client errors are gRPC statuses of etcd's own API: never pass
	// their codes through (etcd's InvalidArgument is not the caller's).
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return status.Error(codes.Unavailable, "etcd unavailable: "+err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}

// validationStatus is InvalidArgument with every violation as a BadRequest
// field violation, and one violation per line in the message.
func validationStatus(verr *sharedstate.ValidationError) error {
	lines := make([]string, 0, len(verr.Violations)+1)
	what := "invalid policy"
	if errors.Is(verr, sharedstate.ErrInvalidOverride) {
		what = "invalid override"
	}
	lines = append(lines, fmt.Sprintf("%s: %d violation(s)", what, len(verr.Violations)))
	br := &errdetails.BadRequest{}
	for _, v := range verr.Violations {
		lines = append(lines, v.String())
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: v.Field, Description: violationDescription(v),
		})
	}
	st := status.New(codes.InvalidArgument, strings.Join(lines, "\n"))
	if withDetails, err := st.WithDetails(br); err == nil {
		st = withDetails
	}
	return st.Err()
}

func violationDescription(v sharedstate.Violation) string {
	if v.Value == "" {
		return v.Message
	}
	return v.Message + ", got " + v.Value
}
