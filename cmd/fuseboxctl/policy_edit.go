package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

type policyEditOptions struct {
	*globalOptions
	yes   bool
	since time.Duration
}

func newPolicyEditCommand(g *globalOptions) *cobra.Command {
	o := &policyEditOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "edit NAME [--yes]",
		Short: "Edit a policy in $EDITOR and write it back if nobody changed it meanwhile",
		Long: `edit reads the policy of NAME (a skeleton when there is none), opens it in
$EDITOR (else $VISUAL, else vi) and writes the result back with a
compare-and-swap on the revision it read: if someone else changed the policy
in between, nothing is written and it exits with 3. An invalid result exits
with 2 and lists every violation. Like "policy set", it shows what the
edit changes and what it would have done over the last --since, and asks
before writing: an answer other than "y" writes nothing (exit 6); --yes
writes without asking, and without a terminal to ask on and without --yes
it does not start. Whenever the edit is not written, it is kept in a file
whose path is printed.`,
		Args:              exactArgs("NAME, the dependency or _default"),
		ValidArgsFunction: completePolicies(g),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.run(cmd.Context(), args[0]) },
	}
	cmd.Flags().BoolVarP(&o.yes, "yes", "y", false, "write without the preview and the question")
	cmd.Flags().DurationVar(&o.since, "since", time.Hour, "how far back the preview replays the edited policy")
	return cmd
}

func (o *policyEditOptions) run(ctx context.Context, name string) error {
	if !o.yes {
		// Asking comes after the editor: do not let anyone edit for nothing.
		if err := o.requireTerminal("policy "+name, false); err != nil {
			return err
		}
	}
	c, err := o.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	entry, err := storedPolicy(ctx, c, name)
	if err != nil {
		return err
	}
	original := fmt.Appendf(nil, "{\n  \"schema\": 1,\n  \"dependency\": %q\n}\n", name)
	if entry != nil {
		original = indentJSON(entry.GetPolicyJson())
	}

	dir, err := os.MkdirTemp("", "fuseboxctl-edit-")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, safeFileName(name)+".json")
	if err := os.WriteFile(path, original, 0o600); err != nil {
		return err
	}
	keep := false
	defer func() {
		if keep {
			fmt.Fprintf(o.stderr, "fuseboxctl: your edit is kept in %s\n", path)
		} else {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := o.runEditor(ctx, path); err != nil {
		keep = true
		return err
	}
	edited, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if bytes.Equal(bytes.TrimSpace(edited), bytes.TrimSpace(original)) {
		fmt.Fprintf(o.stdout, "policy %s unchanged\n", name)
		return nil
	}
	if !o.yes {
		err := validate(ctx, c, name, edited)
		if err == nil {
			err = o.ask(ctx, c, putPlan(name, entry, edited, o.since))
		}
		if err != nil {
			keep = true
			return err
		}
	}
	// A compare-and-swap on the revision read (0: only if there is still none).
	req := &fuseboxv1.PutPolicyRequest{Dependency: name, PolicyJson: edited, Actor: o.actor, ExpectedRevision: proto.Int64(entry.GetModRevision())}
	e, err := invoke(ctx, c, fuseboxv1.AdminClient.PutPolicy, req)
	if err != nil {
		keep = true
		return err
	}
	return o.printWritten(e)
}

// runEditor opens path in $EDITOR (which may carry arguments, e.g.
// "code --wait"), $VISUAL or vi, on the terminal.
func (o *policyEditOptions) runEditor(ctx context.Context, path string) error {
	editor := cmp.Or(os.Getenv("EDITOR"), os.Getenv("VISUAL"), "vi")
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", editor+` "$1"`, "fuseboxctl-editor", path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("editor %q: %w", editor, err)
	}
	return nil
}

// safeFileName maps a dependency name ([A-Za-z0-9._:/-]) to a file name.
func safeFileName(name string) string {
	return strings.NewReplacer("/", "_", ":", "_").Replace(name)
}
