package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// ctlWrite is a fuseboxctl command that writes, with the arguments of a
// call an admin may make.
type ctlWrite struct {
	path string   // the command path below fuseboxctl, e.g. "policy set"
	args []string // after the path
	env  []string
}

// leafCommands are the command paths below fuseboxctl that run something.
func leafCommands() []string {
	var out []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.HasSubCommands() && c.Parent() != nil {
			out = append(out, strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" "))
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCommand(strings.NewReader(""), io.Discard, io.Discard))
	return out
}

// TestEveryWriteCommandNeedsAnAdmin walks fuseboxctl's commands: each is
// listed as a read or a write here; every write run with a viewer's token
// exits 5 naming the missing role and succeeds with an admin's, and every
// read succeeds past the coordinator's authorization with a viewer's.
func TestEveryWriteCommandNeedsAnAdmin(t *testing.T) {
	const dep = "roles-dep"
	policy := writeFile(t, "policy.json", `{"dependency":"`+dep+`","breaker":{"minimumRequests":50}}`)
	editor := writeFile(t, "editor.sh", "#!/bin/sh\nsed -i 's/\"minimumRequests\": [0-9]*/\"minimumRequests\": 60/' \"$1\"\n")
	writes := []ctlWrite{
		{path: "policy set", args: []string{"--yes", "-f", policy}},
		{path: "policy edit", args: []string{dep, "--yes"}, env: []string{"EDITOR=sh " + editor}},
		{path: "policy rm", args: []string{dep, "--yes"}},
		{path: "force-open", args: []string{dep, "--ttl", "1m", "--reason", "roles test"}},
		{path: "force-closed", args: []string{dep, "--ttl", "1m"}},
		{path: "clear", args: []string{dep}},
	}
	reads := map[string][]string{
		"status":          nil,
		"deps":            nil,
		"dep show":        {dep},
		"policy get":      nil,
		"policy lint":     {policy},
		"policy simulate": {"-f", policy},
		"members":         nil,
		"audit":           nil,
		"watch":           nil, // run below: it streams until --count events
	}
	known := map[string]bool{}
	for _, w := range writes {
		known[w.path] = true
	}
	for r := range reads {
		known[r] = true
	}
	leaves := leafCommands()
	for _, path := range leaves {
		if !known[path] {
			t.Errorf("fuseboxctl %s is neither in writes nor in reads: list it, and a write's viewer refusal is tested", path)
		}
		delete(known, path)
	}
	for path := range known {
		t.Errorf("%q is listed but fuseboxctl has no such command (it has %v)", path, leaves)
	}
	if t.Failed() {
		return
	}

	c := startCoordinator(t, true)
	viewerFile := writeFile(t, "viewer", viewerToken+"\n")
	viewer := []string{"--token-file", viewerFile}
	admin := []string{"FUSEBOX_TOKEN=" + adminToken}
	for _, w := range writes {
		t.Run(w.path, func(t *testing.T) {
			args := append(strings.Fields(w.path), w.args...)
			ctl(t, c, w.env, append(append([]string{}, viewer...), args...)...).
				want(t, 5, nil, []string{"permission denied", "needs role admin"})
			ctl(t, c, append(append([]string{}, w.env...), admin...), args...).want(t, 0, nil, nil)
		})
	}
	for path, extra := range reads {
		if path == "watch" {
			continue
		}
		r := ctl(t, c, nil, append(append(append([]string{}, viewer...), strings.Fields(path)...), extra...)...)
		if r.code == 5 || strings.Contains(r.stderr, "permission denied") {
			t.Errorf("fuseboxctl %s as a viewer: exit %d, %s; want allowed", path, r.code, r.stderr)
		}
	}

	// watch as a viewer: it exits after one event; an admin's writes, until
	// it does, make the event (the first may precede the subscription).
	w := ctlCommand(t, c, nil, append(append([]string{}, viewer...), "watch", "--count", "1")...)
	var out bytes.Buffer
	w.Stdout, w.Stderr = &out, &out
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- w.Wait() }()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("fuseboxctl watch --count 1 as a viewer: %v: %s", err, out.String())
			}
			done = true
		case <-tick.C:
			ctl(t, c, admin, "force-open", dep, "--ttl", "1m").want(t, 0, nil, nil)
		case <-deadline.C:
			t.Fatalf("fuseboxctl watch --count 1 as a viewer saw no event within 20 s of an admin's writes: %s", out.String())
		}
	}
}
