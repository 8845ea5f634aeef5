package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Argument checks that name what is missing or extra, e.g.
// "fuseboxctl: dep show: missing argument NAME, the dependency (usage:
// fuseboxctl dep show NAME [flags])", where cobra's say "accepts 1 arg(s),
// received 0". Each arg is "NAME" or "NAME, what it is".

// exactArgs requires every one of args.
func exactArgs(args ...string) cobra.PositionalArgs { return argsBetween(len(args), args) }

// optionalArgs allows any leading part of args, none included.
func optionalArgs(args ...string) cobra.PositionalArgs { return argsBetween(0, args) }

// noArgs allows no argument.
func noArgs() cobra.PositionalArgs { return argsBetween(0, nil) }

func argsBetween(required int, args []string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, got []string) error {
		usage := fmt.Sprintf("usage: %s", cmd.UseLine())
		path := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ") // report prefixes "fuseboxctl: "
		if len(got) < required {
			missing := args[len(got)]
			return usageError{fmt.Errorf("%s: missing argument %s (%s)", path, missing, usage)}
		}
		if len(got) > len(args) {
			extra := make([]string, 0, len(got)-len(args))
			for _, a := range got[len(args):] {
				extra = append(extra, fmt.Sprintf("%q", a))
			}
			takes := "takes no argument"
			if len(args) > 0 {
				names := make([]string, len(args))
				for i, a := range args {
					names[i], _, _ = strings.Cut(a, ",")
				}
				takes = "takes only " + strings.Join(names, " ")
			}
			return usageError{fmt.Errorf("%s: unexpected argument %s: it %s (%s)", path, strings.Join(extra, " "), takes, usage)}
		}
		return nil
	}
}
