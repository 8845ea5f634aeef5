package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"
)

// globalOptions are the flags every command shares.
type globalOptions struct {
	coordinator string
	tokenFile   string
	output      string
}

// errNotBuilt is returned by commands whose server side is not built yet.
var errNotBuilt = errors.New("this command needs the coordinator's Admin API, which arrives with the control-plane issue")

func newRootCommand() *cobra.Command {
	opts := &globalOptions{}
	cmd := &cobra.Command{
		Use:   "fuseboxctl",
		Short: "Administer a Fusebox fleet through a coordinator",
		Long: `fuseboxctl shows the fleet's breakers, sets policies and forces breakers
open or closed through a coordinator's Admin API.

Status: the command set is in place; every command that needs the Admin API
fails with exit code 1 until the control-plane issue lands.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	def := os.Getenv("FUSEBOX_COORDINATOR")
	if def == "" {
		def = "127.0.0.1:7960"
	}
	cmd.PersistentFlags().StringVar(&opts.coordinator, "coordinator", def, "coordinator Admin API address (env FUSEBOX_COORDINATOR)")
	cmd.PersistentFlags().StringVar(&opts.tokenFile, "token-file", "", "file holding the bearer token (or env FUSEBOX_TOKEN)")
	cmd.PersistentFlags().StringVarP(&opts.output, "output", "o", "table", "output format: table, json or yaml")
	for _, c := range []struct{ use, short string }{
		{"status", "Show the fleet: breakers, overrides, members"},
		{"deps", "List dependencies with state and rates"},
		{"dep", "Show one dependency (dep show NAME)"},
		{"policy", "Get, set, edit, lint or remove policies"},
		{"force-open NAME", "Force a breaker open (--ttl, --reason)"},
		{"force-closed NAME", "Force a breaker closed (--ttl, --reason)"},
		{"clear NAME", "Clear an override"},
		{"members", "List the fleet's members"},
		{"audit", "Show the audit trail"},
		{"watch", "Stream transitions and overrides"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   c.use,
			Short: c.short + " (not built yet)",
			RunE: func(*cobra.Command, []string) error {
				if opts.output != "table" && opts.output != "json" && opts.output != "yaml" {
					return usageError{errors.New(`-o must be table, json or yaml, got "` + opts.output + `"`)}
				}
				return errNotBuilt
			},
		})
	}
	return cmd
}

// usageError marks errors in how the command was called (exit code 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// exitCode maps an error to the exit codes documented in the README.
func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}
