package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// A policy write (policy set, edit, rm) first makes sure it can succeed —
// the document valid for its name, the name valid — then shows what it
// changes and what it would have done, asks on the terminal, and writes
// with a compare-and-swap on the revision it showed. --yes skips the
// showing and the asking (scripts); without a terminal to ask on and
// without --yes nothing is written (exit 6). A refusal comes before the
// question: an invalid policy exits 2 whether or not there is a terminal.

// writePlan is what a policy write shows before it asks.
type writePlan struct {
	name string
	// stored is the policy the write replaces or deletes (nil: none).
	stored *fuseboxv1.PolicyEntry
	// replay is the document the simulation replays the dependency under
	// (the proposed policy; for a deletion an empty one); nil: no replay.
	replay []byte
	// changes are the changes shown when there is no replay (the replay
	// brings its own, of the effective policy).
	changes []changeDoc
	since   time.Duration
}

// validate asks the coordinator whether data can be written as name, and
// turns violations into the exit-2 error.
func (g *globalOptions) validate(ctx context.Context, c *adminClient, name string, data []byte) error {
	var resp *fuseboxv1.ValidatePolicyResponse
	if err := c.call(ctx, func(ctx context.Context, a fuseboxv1.AdminClient) (err error) {
		resp, err = a.ValidatePolicy(ctx, &fuseboxv1.ValidatePolicyRequest{Dependency: name, PolicyJson: data})
		return err
	}); err != nil {
		return err
	}
	if len(resp.GetViolations()) == 0 {
		return nil
	}
	vs := make([]violation, 0, len(resp.GetViolations()))
	for _, v := range resp.GetViolations() {
		vs = append(vs, violation{Field: v.GetField(), Value: v.GetValue(), Message: v.GetMessage()})
	}
	return invalidError("invalid policy", vs, nil)
}

// storedPolicy reads name's stored policy (nil: none).
func storedPolicy(ctx context.Context, c *adminClient, name string) (*fuseboxv1.PolicyEntry, error) {
	var e *fuseboxv1.PolicyEntry
	err := c.call(ctx, func(ctx context.Context, a fuseboxv1.AdminClient) (err error) {
		e, err = a.GetPolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: name})
		if status.Code(err) == codes.NotFound {
			e, err = nil, nil
		}
		return err
	})
	return e, err
}

// requireTerminal returns the exit-6 error of a write that would ask for
// a confirmation and has no terminal to ask on (inputOnStdin: stdin holds
// the policy, as with -f -).
func (g *globalOptions) requireTerminal(what string, inputOnStdin bool) error {
	if !inputOnStdin && isTerminal(g.stdin) {
		return nil
	}
	return &cliError{code: exitNotWritten, lines: []string{fmt.Sprintf(
		"%s: not written: it asks for a confirmation on a terminal, and stdin is not one (or holds the policy); pass --yes to write without asking", what)}}
}

// showPlan prints p on stderr: the stored revision, the fields the write
// changes and, for a dependency whose history the coordinator keeps, what
// the proposed policy would have done over the last p.since.
func (g *globalOptions) showPlan(ctx context.Context, c *adminClient, p writePlan) error {
	var (
		sim    *fuseboxv1.SimulatePolicyResponse
		simErr error
	)
	if p.replay != nil && p.name != sharedstate.DefaultPolicyName {
		simErr = c.call(ctx, func(ctx context.Context, a fuseboxv1.AdminClient) (err error) {
			sim, err = a.SimulatePolicy(ctx, &fuseboxv1.SimulatePolicyRequest{Dependency: p.name, PolicyJson: p.replay, Since: durationPB(p.since)})
			return err
		})
		var ce *cliError
		if errors.As(simErr, &ce) && ce.code == exitInvalid {
			return simErr // the write would be refused just the same
		}
	}
	w := g.stderr
	if p.stored == nil {
		fmt.Fprintf(w, "policy %s: none stored yet (the fleet default applies)\n", p.name)
	} else {
		fmt.Fprintf(w, "policy %s: stored at revision %d\n", p.name, p.stored.GetModRevision())
	}
	if sim == nil {
		printChanges(w, p.changes)
		if simErr != nil {
			var ce *cliError
			msg := simErr.Error()
			if errors.As(simErr, &ce) {
				msg = strings.Join(ce.lines, "; ")
			}
			fmt.Fprintf(w, "\nNo replay of the last %v: %s\n", p.since, msg)
		}
		return nil
	}
	doc := simulationOf(sim)
	printChanges(w, doc.Changes)
	fmt.Fprintf(w, "\nOver the last %v (%s to %s UTC), replayed:\n", doc.To.Sub(doc.From).Round(time.Second),
		doc.From.Format("15:04:05"), doc.To.Format("15:04:05"))
	return doc.print(w, false)
}

// confirm asks question on the terminal; only "y" or "yes" is a yes.
func (g *globalOptions) confirm(question string) bool {
	fmt.Fprintf(g.stderr, "\n%s [y/N] ", question)
	line, err := bufio.NewReader(g.stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(g.stderr)
		return false
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// isTerminal reports whether r is a terminal someone can answer on: a
// character device other than the null device (or a reader that says it
// is one, as tests' are).
func isTerminal(r io.Reader) bool {
	if t, ok := r.(interface{ IsTerminal() bool }); ok {
		return t.IsTerminal()
	}
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}
