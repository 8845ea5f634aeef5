package main

import (
	"cmp"
	"io"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"
)

// defaultCoordinator is the Admin API address used without --coordinator
// and $FUSEBOX_COORDINATOR.
const defaultCoordinator = "127.0.0.1:7960"

// globalOptions are the flags every command shares, and the process's
// streams (so tests and main share one code path).
type globalOptions struct {
	coordinator   string
	tokenFile     string
	output        string
	actor         string
	timeout       time.Duration
	tlsCA         string
	tlsCert       string
	tlsKey        string
	tlsServerName string
	insecureToken bool

	stdin          io.Reader
	stdout, stderr io.Writer
}

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	// Every string printed may come from elsewhere: escape control
	// characters on the way out (escape.go).
	stdout, stderr = newSafeWriter(stdout), newSafeWriter(stderr)
	opts := &globalOptions{stdin: stdin, stdout: stdout, stderr: stderr}
	cmd := &cobra.Command{
		Use:   "fuseboxctl",
		Short: "Administer a Fusebox fleet through a coordinator",
		Long: `fuseboxctl shows the fleet's breakers, sets policies and forces breakers
open or closed through a coordinator's Admin API.

Exit codes: 0 ok, 1 other error (usage errors included), 2 invalid policy
(every violation on stderr), 3 revision conflict, 4 coordinator unreachable,
5 credentials refused, 6 not written: "policy set", "edit" or "rm" was not
confirmed.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return checkFormat(opts.output)
		},
	}
	cmd.SetIn(stdin)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	pf := cmd.PersistentFlags()
	pf.StringVar(&opts.coordinator, "coordinator", cmp.Or(os.Getenv("FUSEBOX_COORDINATOR"), defaultCoordinator), "coordinator Admin API address, host:port (env FUSEBOX_COORDINATOR)")
	pf.StringVar(&opts.tokenFile, "token-file", "", "file holding the bearer token (default: env FUSEBOX_TOKEN)")
	pf.StringVarP(&opts.output, "output", "o", formatTable, "output format: table, json or yaml")
	pf.StringVar(&opts.actor, "actor", defaultActor(), "who you are, recorded in the audit beside the token's identity")
	pf.DurationVar(&opts.timeout, "timeout", 10*time.Second, "deadline of each call to the coordinator")
	pf.StringVar(&opts.tlsCA, "tls-ca", "", "CA bundle to verify the coordinator's certificate (turns TLS on)")
	pf.StringVar(&opts.tlsCert, "tls-cert", "", "client certificate for mTLS")
	pf.StringVar(&opts.tlsKey, "tls-key", "", "client key for mTLS")
	pf.StringVar(&opts.tlsServerName, "tls-server-name", "", "server name to verify (turns TLS on; default: the host of --coordinator)")
	pf.BoolVar(&opts.insecureToken, "insecure-plaintext-token", false, "send the bearer token without TLS to a coordinator that is not on loopback (it can be read on the way)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))

	cmd.AddCommand(
		newStatusCommand(opts),
		newDepsCommand(opts),
		group("dep", "Look at one dependency (dep show NAME)", "", newDepShowCommand(opts)),
		group("policy", "Get, set, edit, lint, simulate or remove policies",
			`Policies are JSON documents stored in etcd (policies/<dependency>, and
policies/_default for the fleet default). A dependency's policy sets only the
fields it changes; the rest comes from _default, field by field.`,
			newPolicyGetCommand(opts), newPolicySetCommand(opts), newPolicyEditCommand(opts),
			newPolicyLintCommand(opts), newPolicySimulateCommand(opts), newPolicyRmCommand(opts)),
		newForceOpenCommand(opts),
		newForceClosedCommand(opts),
		newClearCommand(opts),
		newMembersCommand(opts),
		newAuditCommand(opts),
		newWatchCommand(opts),
	)
	return cmd
}

// group is a command that only holds subcommands.
func group(use, short, long string, subcommands ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.NoArgs}
	cmd.AddCommand(subcommands...)
	return cmd
}

// defaultActor is "$USER@hostname", or what of it is known.
func defaultActor() string {
	name := os.Getenv("USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	host, _ := os.Hostname()
	if name != "" && host != "" {
		return name + "@" + host
	}
	return cmp.Or(name, host)
}
