package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// TestPolicySetChecksBeforeAsking: an invalid policy exits 2 with every
// violation whether or not there is a terminal to ask on (it used to exit
// 6, "not confirmed", without a terminal), and nothing is asked.
func TestPolicySetChecksBeforeAsking(t *testing.T) {
	c := startCoordinator(t, false)
	bad := writeFile(t, "bad.json", badPolicy)
	ctl(t, c, nil, "policy", "set", "-f", bad).want(t, 2, nil, []string{"3 violation(s)", "breaker.failureRateThreshold"})
	r := runIn(t, c, "y\n", true, "policy", "set", "-f", bad)
	r.want(t, 2, nil, []string{"3 violation(s)"})
	if strings.Contains(r.stderr, "[y/N]") {
		t.Errorf("an invalid policy was offered for writing: %s", r.stderr)
	}
	// The name is checked as the write checks it.
	good := writeFile(t, "good.json", goodPolicy)
	ctl(t, c, nil, "policy", "set", "billing", "-f", good).want(t, 2, nil, []string{"dependency: must be billing in policies/billing"})
	ctl(t, c, nil, "policy", "set", "_default", "-f", good).want(t, 2, nil, []string{"breaker.window: is required"})
}

// TestPolicyRmAsksFirst: policy rm shows what the deletion changes (each
// field the policy set, and the fleet default's value it falls back to),
// asks, and deletes with a compare-and-swap on the revision it showed;
// without a terminal and without --yes it deletes nothing (exit 6).
func TestPolicyRmAsksFirst(t *testing.T) {
	c := startCoordinator(t, false)
	ctx := context.Background()
	if _, err := c.Store().PutPolicy(ctx, "shipping", []byte(goodPolicy), store.WriteOptions{Actor: "setup"}); err != nil {
		t.Fatal(err)
	}
	ctl(t, c, nil, "policy", "rm", "shipping").want(t, 6, nil, []string{"not written", "pass --yes"})
	r := runIn(t, c, "n\n", true, "policy", "rm", "shipping")
	r.want(t, 6, nil, []string{"policy shipping: stored at revision", "breaker.minimumRequests", "50", "→", "20",
		"retry.maxAttempts", "Delete policy shipping? [y/N]", "not deleted"})
	if _, err := c.Store().GetPolicy(ctx, "shipping"); err != nil {
		t.Fatalf("declined, yet the policy is gone: %v", err)
	}
	ctl(t, c, nil, "policy", "rm", "bad name!").want(t, 2, nil, []string{"invalid dependency name"})
	runIn(t, c, "y\n", true, "policy", "rm", "shipping").want(t, 0, []string{"policy shipping deleted"}, nil)
	if _, err := c.Store().GetPolicy(ctx, "shipping"); err == nil {
		t.Fatal("confirmed, yet the policy is still stored")
	}
}

// TestPolicyEditAsksFirst: policy edit validates the edit, shows what it
// changes and asks before writing; declined or invalid, the edit is kept
// and nothing is written. Without a terminal and without --yes it does not
// open the editor.
func TestPolicyEditAsksFirst(t *testing.T) {
	c := startCoordinator(t, false)
	ctx := context.Background()
	e, err := c.Store().PutPolicy(ctx, "db", []byte(`{"retry":{"maxAttempts":2}}`), store.WriteOptions{Actor: "setup"})
	if err != nil {
		t.Fatal(err)
	}
	ran := writeFile(t, "ran", "")
	if err := os.Remove(ran); err != nil {
		t.Fatal(err)
	}
	editTo := func(n string) string {
		return "sh " + writeFile(t, "editor-"+n+".sh", "#!/bin/sh\ntouch "+ran+"\nsed -i 's/\"maxAttempts\": [0-9]*/\"maxAttempts\": "+n+"/' \"$1\"\n")
	}
	ctl(t, c, []string{"EDITOR=" + editTo("4")}, "policy", "edit", "db").want(t, 6, nil, []string{"pass --yes"})
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("without a terminal to ask on, policy edit opened the editor anyway")
	}

	t.Setenv("TMPDIR", t.TempDir()) // where kept edits go
	t.Setenv("EDITOR", editTo("4"))
	r := runIn(t, c, "n\n", true, "policy", "edit", "db")
	r.want(t, 6, nil, []string{"retry.maxAttempts", "2", "→", "4", "Write policy db? [y/N]", "not written", "your edit is kept in"})
	t.Setenv("EDITOR", editTo("0"))
	r = runIn(t, c, "y\n", true, "policy", "edit", "db")
	r.want(t, 2, nil, []string{"retry.maxAttempts: must be between 1 and 100", "your edit is kept in"})
	if strings.Contains(r.stderr, "[y/N]") {
		t.Errorf("an invalid edit was offered for writing: %s", r.stderr)
	}
	if now, err := c.Store().GetPolicy(ctx, "db"); err != nil || now.ModRevision != e.ModRevision {
		t.Fatalf("declined or invalid edits changed the policy: revision %d → %d (%v)", e.ModRevision, now.ModRevision, err)
	}
	t.Setenv("EDITOR", editTo("4"))
	runIn(t, c, "y\n", true, "policy", "edit", "db").want(t, 0, []string{"policy db written at revision"}, []string{"retry.maxAttempts"})
}
