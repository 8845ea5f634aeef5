package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

type policyLintOptions struct {
	*globalOptions
	file     string
	deadline time.Duration
}

func newPolicyLintCommand(g *globalOptions) *cobra.Command {
	o := &policyLintOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "lint [-f] FILE [--deadline D]",
		Short: "Check a policy file offline; with --deadline, warn where the retry arithmetic cannot work",
		Long: `lint checks a policy file without a coordinator: strict JSON, every rule of
the policy (a dependency's policy merged over the built-in default; the
coordinator merges over the fleet's stored default, which may differ), and,
with --deadline, whether maxAttempts × perAttemptTimeout + worst-case backoff
fits in the caller's deadline.

Violations go to stderr and exit 2; warnings go to stderr and exit 0.`,
		Args: optionalArgs("FILE, the policy file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if o.file != "" && o.file != args[0] {
					return usageError{errors.New("give the file once, as an argument or with -f")}
				}
				o.file = args[0]
			}
			if o.file == "" {
				return usageError{errors.New("no policy file: lint FILE or lint -f FILE")}
			}
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().StringVarP(&o.file, "file", "f", "", `policy JSON file, "-" for stdin`)
	cmd.Flags().DurationVar(&o.deadline, "deadline", 0, "the callers' overall deadline, e.g. 2s: warn when the retries cannot fit in it")
	_ = cmd.MarkFlagFilename("file", "json")
	return cmd
}

// lintError is the exit-2 error of a policy document checked offline
// (nil when it has no violation).
func lintError(file string, data []byte) error {
	svs, _ := sharedstate.CheckPolicyDocument(data, sharedstate.DefaultPolicy(), 0)
	if len(svs) == 0 {
		return nil
	}
	return invalidError(file+": invalid policy", svs, nil)
}

type lintDoc struct {
	File       string                  `json:"file"`
	Valid      bool                    `json:"valid"`
	Violations []sharedstate.Violation `json:"violations"`
	Warnings   []string                `json:"warnings"`
}

func (o *policyLintOptions) run(context.Context) error {
	if o.deadline < 0 {
		return usageError{fmt.Errorf("--deadline %v must not be negative", o.deadline)}
	}
	data, err := readInput(o.file, o.stdin)
	if err != nil {
		return err
	}
	svs, warnings := sharedstate.CheckPolicyDocument(data, sharedstate.DefaultPolicy(), o.deadline)
	doc := lintDoc{File: o.file, Valid: len(svs) == 0, Violations: nonNil(svs), Warnings: nonNil(warnings)}
	if o.output != formatTable {
		if err := printData(o.stdout, o.output, doc); err != nil {
			return err
		}
	} else if doc.Valid {
		fmt.Fprintf(o.stdout, "%s: valid\n", o.file)
	}
	for _, w := range warnings {
		fmt.Fprintln(o.stderr, "fuseboxctl: warning:", w)
	}
	if !doc.Valid {
		return invalidError(o.file+": invalid policy", doc.Violations, nil)
	}
	return nil
}
