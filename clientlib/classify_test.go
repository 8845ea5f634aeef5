package clientlib

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
)

func TestDefaultClassifier(t *testing.T) {
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name               string
		err                error
		retryable, failure bool
		after              time.Duration
	}{
		{"connection refused", &url.Error{Op: "Get", URL: "http://x", Err: opErr}, true, true, 0},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true, true, 0},
		{"server closed idle connection", &url.Error{Op: "Get", URL: "http://x", Err: io.EOF}, true, true, 0},
		{"unexpected EOF", io.ErrUnexpectedEOF, true, true, 0},
		{"i/o timeout", os.ErrDeadlineExceeded, true, true, 0},
		{"dns timeout", &net.DNSError{Err: "timeout", IsTimeout: true}, true, true, 0},
		{"dns not found", &net.DNSError{Err: "no such host", IsNotFound: true}, false, true, 0},
		{"deadline", context.DeadlineExceeded, true, true, 0},
		{"canceled", context.Canceled, false, false, 0},
		{"http 503 with Retry-After", &HTTPStatusError{StatusCode: 503, RetryAfter: time.Second}, true, true, time.Second},
		{"http 429", &HTTPStatusError{StatusCode: 429}, true, true, 0},
		{"http 408", &HTTPStatusError{StatusCode: 408}, true, true, 0},
		{"http 502", &HTTPStatusError{StatusCode: 502}, true, true, 0},
		{"http 504", &HTTPStatusError{StatusCode: 504}, true, true, 0},
		{"http 500", &HTTPStatusError{StatusCode: 500}, false, true, 0},
		{"http 404", &HTTPStatusError{StatusCode: 404}, false, false, 0},
		{"http 409", &HTTPStatusError{StatusCode: 409}, false, false, 0},
		{"grpc unavailable", status.Error(codes.Unavailable, ""), true, true, 0},
		{"grpc resource exhausted", status.Error(codes.ResourceExhausted, ""), true, true, 0},
		{"grpc aborted", status.Error(codes.Aborted, ""), true, true, 0},
		{"grpc deadline", status.Error(codes.DeadlineExceeded, ""), true, true, 0},
		{"grpc internal", status.Error(codes.Internal, ""), false, true, 0},
		{"grpc not found", status.Error(codes.NotFound, ""), false, false, 0},
		{"grpc invalid argument", status.Error(codes.InvalidArgument, ""), false, false, 0},
		{"wrapped grpc unavailable", fmt.Errorf("calling: %w", status.Error(codes.Unavailable, "")), true, true, 0},
		{"pushback", &RetryAfterError{Err: status.Error(codes.Unavailable, ""), After: 2 * time.Second}, true, true, 2 * time.Second},
		{"negative pushback", &RetryAfterError{Err: status.Error(codes.Unavailable, ""), After: -1}, false, true, 0},
		{"ErrNotRetryable", fmt.Errorf("%w: %w", ErrNotRetryable, syscall.ECONNRESET), false, true, 0},
		{"nested breaker open", fmt.Errorf("inner: %w", ErrOpen), false, true, 0},
		{"unknown error", errors.New("boom"), false, true, 0},
	} {
		got := DefaultClassifier(tc.err)
		if got.Retryable != tc.retryable || got.Failure != tc.failure || got.RetryAfter != tc.after {
			t.Errorf("%s: %+v, want retryable %v failure %v after %v", tc.name, got, tc.retryable, tc.failure, tc.after)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0}, {"3", 3 * time.Second}, {"0", 0}, {"-5", 0}, {"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		if got := backoff.ParseRetryAfter(tc.v, now); got != tc.want {
			t.Errorf("Retry-After %q: %v, want %v", tc.v, got, tc.want)
		}
	}
}
