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
	"google.golang.org/protobuf/types/known/durationpb"

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
	// deletion: the write deletes the policy ("policy rm").
	deletion bool
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

// putPlan is the plan of writing data over stored.
func putPlan(name string, stored *fuseboxv1.PolicyEntry, data []byte, since time.Duration) writePlan {
	return writePlan{name: name, stored: stored, replay: data, changes: policyChanges(stored.GetPolicyJson(), data), since: since}
}

// validate asks the coordinator whether data can be written as name, and
// turns violations into the exit-2 error.
func validate(ctx context.Context, c *adminClient, name string, data []byte) error {
	resp, err := invoke(ctx, c, fuseboxv1.AdminClient.ValidatePolicy, &fuseboxv1.ValidatePolicyRequest{Dependency: name, PolicyJson: data})
	if err != nil || len(resp.GetViolations()) == 0 {
		return err
	}
	vs := convertAll(resp.GetViolations(), func(v *fuseboxv1.Violation) sharedstate.Violation {
		return sharedstate.Violation{Field: v.GetField(), Value: v.GetValue(), Message: v.GetMessage()}
	})
	return invalidError("invalid policy", vs, nil)
}

// storedPolicy reads name's stored policy (nil: none).
func storedPolicy(ctx context.Context, c *adminClient, name string) (*fuseboxv1.PolicyEntry, error) {
	e, err := invoke(ctx, c, fuseboxv1.AdminClient.GetPolicy, &fuseboxv1.GetPolicyRequest{Dependency: name})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	return e, err
}

// printWritten prints the policy a write stored.
func (g *globalOptions) printWritten(e *fuseboxv1.PolicyEntry) error {
	if g.output != formatTable {
		return printData(g.stdout, g.output, policyOf(e))
	}
	fmt.Fprintf(g.stdout, "policy %s written at revision %d\n", e.GetDependency(), e.GetModRevision())
	return nil
}

// requireTerminal returns the exit-6 error of a write that would ask for
// a confirmation and has no terminal to ask on (inputOnStdin: stdin holds
// the policy, as with -f -).
func (g *globalOptions) requireTerminal(what string, inputOnStdin bool) error {
	if !inputOnStdin && isTerminal(g.stdin) {
		return nil
	}
	return failure(exitNotWritten, nil,
		"%s: not written: it asks for a confirmation on a terminal, and stdin is not one (or holds the policy); pass --yes to write without asking", what)
}

// ask shows p on stderr and asks whether to write (or delete): anything
// but a yes is exit 6.
func (g *globalOptions) ask(ctx context.Context, c *adminClient, p writePlan) error {
	if err := g.showPlan(ctx, c, p); err != nil {
		return err
	}
	verb, done := "Write", "written"
	if p.deletion {
		verb, done = "Delete", "deleted"
	}
	if !g.confirm(fmt.Sprintf("%s policy %s?", verb, p.name)) {
		return failure(exitNotWritten, nil, "policy %s not %s", p.name, done)
	}
	return nil
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
		sim, simErr = invoke(ctx, c, fuseboxv1.AdminClient.SimulatePolicy,
			&fuseboxv1.SimulatePolicyRequest{Dependency: p.name, PolicyJson: p.replay, Since: durationpb.New(p.since)})
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
		if simErr != nil { // a cliError: its lines joined with "; "
			fmt.Fprintf(w, "\nNo replay of the last %v: %s\n", p.since, simErr)
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
