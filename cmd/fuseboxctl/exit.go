package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Exit codes a script can rely on (coordinator/README.md, "fuseboxctl").
const (
	exitOK          = 0
	exitError       = 1 // anything not below, usage errors included
	exitInvalid     = 2 // the policy (or name) was refused as invalid; every violation on stderr
	exitConflict    = 3 // the expected revision did not match (someone else wrote first)
	exitUnreachable = 4 // the coordinator could not be reached (the message names the address)
	exitAuth        = 5 // the coordinator refused the credentials (missing/unknown token or role too low)
	exitNotWritten  = 6 // a write that needs a confirmation got none: declined, or no terminal to ask and no --yes
)

// cliError is an error with its exit code and the lines to print on stderr.
type cliError struct {
	code  int
	lines []string // printed one per line after "fuseboxctl: "
	err   error
}

func (e *cliError) Error() string { return strings.Join(e.lines, "; ") }
func (e *cliError) Unwrap() error { return e.err }

// failure is the cliError of one line, formatted as fmt.Sprintf does,
// wrapping cause (nil: none).
func failure(code int, cause error, format string, args ...any) *cliError {
	return &cliError{code: code, lines: []string{fmt.Sprintf(format, args...)}, err: cause}
}

// violationText is one problem of a policy, from the coordinator or from
// the offline linter, as stderr shows it: "field: message (got value)".
func violationText(v sharedstate.Violation) string {
	if v.Field == "" {
		return v.Message
	}
	if v.Value != "" {
		return fmt.Sprintf("%s: %s (got %s)", v.Field, v.Message, v.Value)
	}
	return v.Field + ": " + v.Message
}

// invalidError builds the exit-2 error of a refused policy.
func invalidError(what string, vs []sharedstate.Violation, cause error) *cliError {
	lines := []string{fmt.Sprintf("%s: %d violation(s)", what, len(vs))}
	for _, v := range vs {
		lines = append(lines, "  "+violationText(v))
	}
	return &cliError{code: exitInvalid, lines: lines, err: cause}
}

// rpcError turns an error of an Admin call into a cliError. reachable tells
// whether the connection to the coordinator was up: an Unavailable from a
// coordinator that answered (its etcd is down) is not "unreachable".
func rpcError(err error, addr string, reachable bool) error {
	var ce *cliError
	if errors.As(err, &ce) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return failure(exitError, err, "%v", err)
	}
	switch st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied:
		return failure(exitAuth, err, "coordinator %s refused the request: %s", addr, st.Message())
	case codes.InvalidArgument:
		if vs := violationsOf(st); len(vs) > 0 {
			return invalidError("invalid policy", vs, err)
		}
		return failure(exitInvalid, err, "invalid: %s", st.Message())
	case codes.Aborted:
		return failure(exitConflict, err, "conflict: %s", st.Message())
	case codes.Unavailable, codes.DeadlineExceeded:
		if !reachable {
			return failure(exitUnreachable, err, "coordinator %s unreachable: %s", addr, st.Message())
		}
	case codes.NotFound:
		return failure(exitError, err, "%s", st.Message())
	case codes.Unimplemented:
		return failure(exitError, err, "coordinator %s does not serve this (%s): it is older than this fuseboxctl", addr, st.Message())
	}
	return failure(exitError, err, "%s: %s", st.Code(), st.Message())
}

// violationsOf reads the BadRequest field violations of a status.
func violationsOf(st *status.Status) []sharedstate.Violation {
	var vs []sharedstate.Violation
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		for _, fv := range br.GetFieldViolations() {
			vs = append(vs, sharedstate.Violation{Field: fv.GetField(), Message: fv.GetDescription()})
		}
	}
	return vs
}

// usageError marks errors in how the command was called. They exit with 1,
// like every error without a code of its own: 2 means "invalid policy".
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// report prints err on stderr and returns the process exit code.
func report(stderr io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	stderr = newSafeWriter(stderr) // messages quote what the coordinator said
	var ce *cliError
	if errors.As(err, &ce) {
		for _, l := range ce.lines {
			fmt.Fprintln(stderr, "fuseboxctl:", l)
		}
		return ce.code
	}
	fmt.Fprintln(stderr, "fuseboxctl:", err)
	return exitError
}
