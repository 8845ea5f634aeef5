package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestTokenFileModeAndRevocation: fuseboxctl refuses a token file others may
// read, naming it and its mode; a token removed from the coordinator's tokens
// file stops working without a restart; tokens never appear in the output.
func TestTokenFileModeAndRevocation(t *testing.T) {
	tokens := writeFile(t, "tokens", "admin "+adminToken+" ops-admin\nviewer "+viewerToken+"\n")
	c := startCoordinatorWith(t, tokens)

	exposed := writeFile(t, "token", adminToken+"\n")
	if err := os.Chmod(exposed, 0o644); err != nil {
		t.Fatal(err)
	}
	r := ctl(t, c, nil, "deps", "--token-file", exposed)
	r.want(t, 1, nil, []string{exposed, "mode 0644", "chmod 600"})
	noToken(t, r, adminToken)

	own := writeFile(t, "token", adminToken+"\n")
	ctl(t, c, nil, "deps", "--token-file", own).want(t, 0, nil, nil)

	// Revoke the admin token: rewrite the file (rename over it, as config
	// managers do); the next calls are refused, no restart.
	next := writeFile(t, "tokens.new", "viewer "+viewerToken+"\n")
	if err := os.Rename(next, tokens); err != nil {
		t.Fatal(err)
	}
	var last result
	sstest.Eventually(t, 10*time.Second, "the revoked token refused", func() bool {
		last = ctl(t, c, nil, "deps", "--token-file", own)
		return last.code == exitAuth
	})
	last.want(t, exitAuth, nil, []string{"unknown token"})
	noToken(t, last, adminToken)
	ctl(t, c, []string{"FUSEBOX_TOKEN=" + viewerToken}, "deps").want(t, 0, nil, nil)

	// A tokens file made group-readable is not reloaded: the tokens in force stay.
	if err := os.WriteFile(tokens, []byte("admin "+adminToken+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tokens, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := c.ReloadTokens(); err == nil || !strings.Contains(err.Error(), "mode 0640") {
		t.Fatalf("ReloadTokens of a 0640 file = %v, want a refusal naming the mode", err)
	}
	ctl(t, c, nil, "deps", "--token-file", own).want(t, exitAuth, nil, nil)
	ctl(t, c, []string{"FUSEBOX_TOKEN=" + viewerToken}, "deps").want(t, 0, nil, nil)
}

// TestPlaintextTokenOnlyToLoopback: a token is not sent without TLS to an
// address off this host unless --insecure-plaintext-token says so; no
// connection is attempted (the refusal comes first).
func TestPlaintextTokenOnlyToLoopback(t *testing.T) {
	env := []string{"FUSEBOX_TOKEN=" + adminToken}
	for _, addr := range []string{"192.0.2.10:7960", "dns:///fusebox.example:7960", "[2001:db8::1]:7960"} {
		r := ctl(t, nil, env, "deps", "--coordinator", addr)
		r.want(t, 1, nil, []string{"refusing to send the bearer token in plaintext to " + addr, "--insecure-plaintext-token"})
		noToken(t, r, adminToken)
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:7960", true}, {"localhost:7960", true}, {"[::1]:7960", true}, {"unix:///run/fusebox.sock", true},
		{"passthrough:///127.0.0.2:1", true}, {"10.0.0.1:7960", false}, {"fusebox:7960", false}, {"dns://8.8.8.8/fusebox:7960", false},
	} {
		if got := loopbackTarget(tc.addr); got != tc.want {
			t.Errorf("loopbackTarget(%q) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	// The opt-in: dial succeeds (the connection is lazy: nothing is sent).
	t.Setenv("FUSEBOX_TOKEN", adminToken)
	o := &globalOptions{coordinator: "192.0.2.10:7960", insecureToken: true, timeout: time.Second}
	cl, err := o.dial()
	if err != nil {
		t.Fatalf("dial with --insecure-plaintext-token: %v", err)
	}
	_ = cl.Close()
	o.insecureToken = false
	if _, err := o.dial(); err == nil {
		t.Fatal("dial without the opt-in accepted a plaintext token to a public address")
	}
}

func noToken(t *testing.T, r result, token string) {
	t.Helper()
	if strings.Contains(r.stdout+r.stderr, token) {
		t.Errorf("the token appears in fuseboxctl's output:\n%s%s", r.stdout, r.stderr)
	}
}
