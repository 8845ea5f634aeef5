package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/coordinator/internal/auth"
	"github.com/fusebox-dev/fusebox/coordinator/internal/events"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

func TestToStatus(t *testing.T) {
	verr := &sharedstate.ValidationError{Violations: []sharedstate.Violation{
		{Field: "breaker.window", Value: "0s", Message: "must be between 1s and 1h0m0s"},
		{Field: "retry.maxAttempts", Value: "0", Message: "must be between 1 and 100"},
	}}
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"nil", nil, codes.OK},
		{"unauthenticated", fmt.Errorf("x: %w", auth.ErrUnauthenticated), codes.Unauthenticated},
		{"permission", fmt.Errorf("x: %w", auth.ErrPermissionDenied), codes.PermissionDenied},
		{"validation", fmt.Errorf("store: put policy: %w", verr), codes.InvalidArgument},
		{"malformed policy", fmt.Errorf("store: %w: unexpected EOF", sharedstate.ErrInvalidPolicy), codes.InvalidArgument},
		{"bad name", fmt.Errorf("store: %w", sharedstate.ErrInvalidDependencyName), codes.InvalidArgument},
		{"bad request", fmt.Errorf("%w: ttl", ErrInvalidRequest), codes.InvalidArgument},
		{"conflict", &store.ConflictError{Key: "k", Expected: 3, Current: 4}, codes.Aborted},
		{"not found", fmt.Errorf("%w: policy", store.ErrNotFound), codes.NotFound},
		{"our not found", fmt.Errorf("%w: dep", ErrNotFound), codes.NotFound},
		{"bad data in etcd", &store.InvalidValueError{Key: "k", Err: verr}, codes.FailedPrecondition},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"canceled", context.Canceled, codes.Canceled},
		{"etcd down", fmt.Errorf("store: %w", status.Error(codes.Unavailable, "no leader")), codes.Unavailable},
		{"etcd's own invalid argument", fmt.Errorf("store: %w", status.Error(codes.InvalidArgument, "lease not found")), codes.Internal},
		// What etcd's client returns for etcd's own errors: rpctypes.EtcdError, no gRPC status.
		{"etcd leader changed", fmt.Errorf("store: policy.put: read: %w", rpctypes.ErrLeaderChanged), codes.Unavailable},
		{"etcd without a leader", fmt.Errorf("store: %w", rpctypes.ErrNoLeader), codes.Unavailable},
		{"etcd timed out after a leader failure", fmt.Errorf("store: %w", rpctypes.ErrTimeoutDueToLeaderFail), codes.Unavailable},
		{"etcd compacted", fmt.Errorf("store: %w", rpctypes.ErrCompacted), codes.Internal},
		{"watch fell behind", fmt.Errorf("fusebox: watch fell behind: %w", events.ErrFellBehind), codes.ResourceExhausted},
		{"watch after an id not kept", fmt.Errorf("x: %w", &events.ReplayError{After: 1, Oldest: 5, Last: 9}), codes.OutOfRange},
		{"watch while closing", fmt.Errorf("x: %w", events.ErrClosed), codes.Unavailable},
		{"closed", ErrClosed, codes.Unavailable},
		{"stream broken", fmt.Errorf("%w: %v", errStreamBroken, status.Error(codes.Unavailable, "transport is closing")), codes.Canceled},
		{"other", errors.New("boom"), codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := status.Code(toStatus(tt.err)); got != tt.want {
				t.Fatalf("toStatus(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	st := status.Convert(toStatus(fmt.Errorf("wrapped: %w", verr)))
	var fvs []*errdetails.BadRequest_FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			fvs = append(fvs, br.GetFieldViolations()...)
		}
	}
	if len(fvs) != 2 || fvs[0].GetField() != "breaker.window" || fvs[1].GetDescription() != "must be between 1 and 100, got 0" {
		t.Fatalf("field violations = %v", fvs)
	}
	want := "invalid policy: 2 violation(s)\nbreaker.window: must be between 1s and 1h0m0s, got 0s\nretry.maxAttempts: must be between 1 and 100, got 0"
	if st.Message() != want {
		t.Fatalf("message = %q, want %q", st.Message(), want)
	}
}
