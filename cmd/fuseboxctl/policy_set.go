package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

type policySetOptions struct {
	*globalOptions
	file             string
	expectedRevision int64
	yes              bool
	since            time.Duration
}

func newPolicySetCommand(g *globalOptions) *cobra.Command {
	o := &policySetOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "set [NAME] -f FILE [--yes]",
		Short: "Write a policy from a JSON file, after showing what it changes and would have done",
		Long: `set writes the policy in FILE ("-" for stdin) for NAME, or for the dependency
its "dependency" field names. The coordinator validates it over the fleet
default and refuses it with every violation (exit 2).

Before writing it shows the fields the policy changes and what it would have
done over the last --since (default 1h: "policy simulate"'s summary, when the
coordinator keeps a history of the dependency), and asks for a confirmation
on the terminal; the write is then a compare-and-swap on the revision it
showed, so a policy someone changed meanwhile is not overwritten (exit 3).
--yes writes without asking (and without the preview), as scripts need. With
stdin not a terminal (or the policy read from stdin, -f -) and no --yes,
nothing is written: it exits with 6, and so does an answer other than "y".

With --expected-revision N the write happens only if the stored policy is at
mod revision N (0: only if there is none yet); otherwise it exits with 3.
Without it (and with --yes) the write is unconditional.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completePolicies(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return o.run(cmd.Context(), name, cmd.Flags().Changed("expected-revision"))
		},
	}
	cmd.Flags().StringVarP(&o.file, "file", "f", "", `policy JSON file, "-" for stdin (required)`)
	cmd.Flags().Int64Var(&o.expectedRevision, "expected-revision", 0, "write only if the stored policy is at this mod revision (0: only if absent)")
	cmd.Flags().BoolVarP(&o.yes, "yes", "y", false, "write without the preview and the question (scripts)")
	cmd.Flags().DurationVar(&o.since, "since", time.Hour, "how far back the preview replays the policy")
	_ = cmd.MarkFlagRequired("file")
	_ = cmd.MarkFlagFilename("file", "json")
	return cmd
}

func (o *policySetOptions) run(ctx context.Context, name string, expect bool) error {
	data, err := readInput(o.file, o.stdin)
	if err != nil {
		return err
	}
	if name == "" {
		if name = dependencyField(data); name == "" {
			return usageError{errors.New(`no NAME given and the file has no "dependency" field`)}
		}
	}
	req := &fuseboxv1.PutPolicyRequest{Dependency: name, PolicyJson: data, Actor: o.actor}
	if expect {
		rev := o.expectedRevision
		req.ExpectedRevision = &rev
	}
	if !o.yes {
		if o.file == "-" || !isTerminal(o.stdin) {
			return &cliError{code: exitNotWritten, lines: []string{fmt.Sprintf(
				"policy %s not written: it asks for a confirmation on a terminal, and stdin is not one (or holds the policy); pass --yes to write without asking", name)}}
		}
		rev, err := o.preview(ctx, name, data)
		if err != nil {
			return err
		}
		if !o.confirm(name) {
			return &cliError{code: exitNotWritten, lines: []string{fmt.Sprintf("policy %s not written", name)}}
		}
		if !expect {
			req.ExpectedRevision = &rev // what was shown is what is replaced
		}
	}
	e, err := callOnce(ctx, o.globalOptions, func(ctx context.Context, a fuseboxv1.AdminClient) (*fuseboxv1.PolicyEntry, error) {
		return a.PutPolicy(ctx, req)
	})
	if err != nil {
		return err
	}
	if o.output != formatTable {
		return printData(o.stdout, o.output, policyOf(e))
	}
	fmt.Fprintf(o.stdout, "policy %s written at revision %d\n", e.GetDependency(), e.GetModRevision())
	return nil
}

// preview prints, on stderr, what the policy changes and the simulation's
// summary, and returns the stored policy's revision (0: none).
func (o *policySetOptions) preview(ctx context.Context, name string, data []byte) (int64, error) {
	c, err := o.dial()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var (
		stored *fuseboxv1.PolicyEntry
		sim    *fuseboxv1.SimulatePolicyResponse
		simErr error
	)
	if err := c.call(ctx, func(ctx context.Context, a fuseboxv1.AdminClient) (err error) {
		stored, err = a.GetPolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: name})
		if status.Code(err) == codes.NotFound {
			stored, err = nil, nil
		}
		return err
	}); err != nil {
		return 0, err
	}
	if name != "_default" {
		simErr = c.call(ctx, func(ctx context.Context, a fuseboxv1.AdminClient) (err error) {
			sim, err = a.SimulatePolicy(ctx, &fuseboxv1.SimulatePolicyRequest{Dependency: name, PolicyJson: data, Since: durationPB(o.since)})
			return err
		})
		var ce *cliError
		if errors.As(simErr, &ce) && ce.code == exitInvalid {
			return 0, simErr // the write would be refused just the same
		}
	}
	w := o.stderr
	rev := stored.GetModRevision()
	if stored == nil {
		fmt.Fprintf(w, "policy %s: none stored yet (the fleet default applies)\n", name)
	} else {
		fmt.Fprintf(w, "policy %s: stored at revision %d\n", name, rev)
	}
	if sim != nil {
		doc := simulationOf(sim)
		printChanges(w, doc.Changes)
		fmt.Fprintf(w, "\nOver the last %v (%s to %s UTC), replayed:\n", doc.To.Sub(doc.From).Round(time.Second),
			doc.From.Format("15:04:05"), doc.To.Format("15:04:05"))
		_ = doc.print(w, false)
	} else {
		printChanges(w, policyChanges(stored.GetPolicyJson(), data))
		if simErr != nil {
			var ce *cliError
			msg := simErr.Error()
			if errors.As(simErr, &ce) {
				msg = strings.Join(ce.lines, "; ")
			}
			fmt.Fprintf(w, "\nNo replay of the last %v: %s\n", o.since, msg)
		}
	}
	return rev, nil
}

// confirm asks on the terminal whether to write.
func (o *policySetOptions) confirm(name string) bool {
	fmt.Fprintf(o.stderr, "\nWrite policy %s? [y/N] ", name)
	line, err := bufio.NewReader(o.stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(o.stderr)
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

// readInput reads a file, or stdin for "-".
func readInput(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// dependencyField returns the "dependency" field of a policy document, ""
// when it has none or is not JSON.
func dependencyField(data []byte) string {
	var v struct {
		Dependency string `json:"dependency"`
	}
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	return v.Dependency
}
