package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

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

Before writing it has the coordinator check the policy for NAME (an invalid
one exits 2 before any question), shows the fields the policy changes and
what it would have done over the last --since (default 1h: "policy
simulate"'s summary, when the coordinator keeps a history of the dependency),
and asks for a confirmation on the terminal; the write is then a
compare-and-swap on the revision it showed, so a policy someone changed
meanwhile is not overwritten (exit 3). --yes writes without asking (and
without the preview), as scripts need. With stdin not a terminal (or the
policy read from stdin, -f -) and no --yes, nothing is written: it exits
with 6, and so does an answer other than "y".

With --expected-revision N the write happens only if the stored policy is at
mod revision N (0: only if there is none yet); otherwise it exits with 3.
Without it (and with --yes) the write is unconditional.`,
		Args:              optionalArgs("NAME, the dependency or _default"),
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
		if !json.Valid(data) { // say where, rather than that it names no dependency
			return lintError(o.file, data)
		}
		if name = dependencyField(data); name == "" {
			return usageError{errors.New(`no NAME given and the file has no "dependency" field`)}
		}
	}
	c, err := o.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	req := &fuseboxv1.PutPolicyRequest{Dependency: name, PolicyJson: data, Actor: o.actor}
	if expect {
		req.ExpectedRevision = proto.Int64(o.expectedRevision)
	}
	if !o.yes {
		// Refusals first: an invalid policy is exit 2, asked or not.
		if err := validate(ctx, c, name, data); err != nil {
			return err
		}
		if err := o.requireTerminal("policy "+name, o.file == "-"); err != nil {
			return err
		}
		stored, err := storedPolicy(ctx, c, name)
		if err != nil {
			return err
		}
		if err := o.ask(ctx, c, putPlan(name, stored, data, o.since)); err != nil {
			return err
		}
		if !expect {
			req.ExpectedRevision = proto.Int64(stored.GetModRevision()) // what was shown is what is replaced
		}
	}
	e, err := invoke(ctx, c, fuseboxv1.AdminClient.PutPolicy, req)
	if err != nil {
		return err
	}
	return o.printWritten(e)
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
	return os.ReadFile(path)
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
