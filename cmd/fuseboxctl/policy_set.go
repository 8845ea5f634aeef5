package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

type policySetOptions struct {
	*globalOptions
	file             string
	expectedRevision int64
}

func newPolicySetCommand(g *globalOptions) *cobra.Command {
	o := &policySetOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "set [NAME] -f FILE",
		Short: "Write a policy from a JSON file (validated by the coordinator)",
		Long: `set writes the policy in FILE ("-" for stdin) for NAME, or for the dependency
its "dependency" field names. The coordinator validates it over the fleet
default and refuses it with every violation (exit 2).

With --expected-revision N the write happens only if the stored policy is at
mod revision N (0: only if there is none yet); otherwise it exits with 3.
Without it the write is unconditional.`,
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
