package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// terminal is a stdin that says it is a terminal, holding the answers.
type terminal struct{ *strings.Reader }

func (terminal) IsTerminal() bool { return true }

// runIn runs fuseboxctl in this process against c, with stdin (a
// terminal when tty), and returns its exit code, stdout and stderr.
func runIn(t *testing.T, c interface{ GRPCAddr() string }, stdin string, tty bool, args ...string) result {
	t.Helper()
	var in io.Reader = strings.NewReader(stdin)
	if tty {
		in = terminal{strings.NewReader(stdin)}
	}
	var out, errb bytes.Buffer
	cmd := newRootCommand(in, &out, &errb)
	cmd.SetArgs(append([]string{"--coordinator", c.GRPCAddr()}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := report(&errb, cmd.ExecuteContext(ctx))
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// TestPolicySetAsksFirst: without --yes, policy set shows what the policy
// changes and asks on the terminal; "n" writes nothing (exit 6), "y" writes
// with a compare-and-swap on the revision it showed. Without a terminal
// (or with the policy on stdin) and without --yes it writes nothing and
// says to pass --yes (exit 6).
func TestPolicySetAsksFirst(t *testing.T) {
	c := startCoordinator(t, false)
	ctx := context.Background()
	if _, err := c.Store().PutPolicy(ctx, "shipping", []byte(`{"breaker":{"minimumRequests":20}}`), store.WriteOptions{Actor: "setup"}); err != nil {
		t.Fatal(err)
	}
	good := writeFile(t, "good.json", goodPolicy) // minimumRequests 50, maxAttempts 5

	ctl(t, c, nil, "policy", "set", "-f", good).want(t, 6, nil, []string{"not written", "pass --yes"})
	r := runIn(t, c, goodPolicy, true, "policy", "set", "-f", "-")
	r.want(t, 6, nil, []string{"not written", "pass --yes"})

	r = runIn(t, c, "n\n", true, "policy", "set", "-f", good)
	r.want(t, 6, nil, []string{"stored at revision", "breaker.minimumRequests", "20", "50", "retry.maxAttempts", "Write policy shipping? [y/N]", "not written"})
	if !strings.Contains(r.stderr, "No replay") {
		t.Errorf("the preview of a dependency without history does not say there is no replay: %s", r.stderr)
	}
	e, err := c.Store().GetPolicy(ctx, "shipping")
	if err != nil || !strings.Contains(string(e.Value), `"minimumRequests":20`) && !strings.Contains(string(e.Value), `"minimumRequests": 20`) {
		t.Fatalf("declined, yet the stored policy is %s (%v)", e.Value, err)
	}

	r = runIn(t, c, "y\n", true, "policy", "set", "-f", good)
	r.want(t, 0, []string{"policy shipping written at revision"}, []string{"breaker.minimumRequests"})
	if e2, err := c.Store().GetPolicy(ctx, "shipping"); err != nil || e2.ModRevision == e.ModRevision {
		t.Fatalf("confirmed, yet the policy is at revision %d (%v)", e2.ModRevision, err)
	}
}
