package demo_test

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestBannerCommandsWork runs the fusebox-demo binary as `make run` does
// (fusebox-demo and fuseboxctl in bin/, started from the directory above
// it): the banner's first fuseboxctl line, run by a shell as printed in
// that directory with no FUSEBOX_* variable of the test's, exits 0; the
// banner lists each agent's socket as a FUSEBOX_AGENT=unix://… line, and
// each socket answers. Ctrl-C then stops the demo with exit code 0, no
// error and no warning about dropped gossip (the agents' leaving drops
// some, and fails memberlist's probes in flight, quietly).
func TestBannerCommandsWork(t *testing.T) {
	if buildErr != nil {
		t.Fatalf("fusebox-demo was not built: %v", buildErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startDemoProcess(ctx, t, buildRoot, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
		"--phase-duration", "2s", "--duration", "90s")
	out := p.out
	sstest.Eventually(t, time.Minute, "the banner", func() bool {
		return out.find(regexp.MustCompile(`^  Ctrl-C stops the demo`)) != nil
	})

	// The first fuseboxctl line, as printed.
	ctlLine := out.find(regexp.MustCompile(`^  fuseboxctl +(FUSEBOX_TOKEN=\S+ (\S+) --coordinator \S+ status)$`))
	if ctlLine == nil {
		t.Fatal("the banner has no fuseboxctl status line")
	}
	if ctlLine[2] != "./bin/fuseboxctl" {
		t.Errorf("the banner runs fuseboxctl as %q, want ./bin/fuseboxctl (the one beside fusebox-demo)", ctlLine[2])
	}
	sh := exec.CommandContext(ctx, "/bin/sh", "-c", ctlLine[1])
	sh.Dir = buildRoot
	sh.Env = cleanEnv()
	got, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the banner's line %q: %v\n%s", ctlLine[1], err, got)
	}
	if !bytes.Contains(got, []byte("3 agent(s) alive in zones zone-a, zone-b, zone-c")) {
		t.Errorf("the banner's fuseboxctl status does not show the 3 agents:\n%s", got)
	}

	// Each agent's socket, as clientlib takes it from FUSEBOX_AGENT.
	for _, name := range []string{"agent-a", "agent-b", "agent-c"} {
		m := out.find(regexp.MustCompile(`^  (Agents)? +` + name + ` \(zone-.\)  FUSEBOX_AGENT=unix://(/\S+\.sock)`))
		if m == nil {
			t.Errorf("the banner has no FUSEBOX_AGENT line for %s", name)
			continue
		}
		c, err := net.DialTimeout("unix", m[2], 5*time.Second)
		if err != nil {
			t.Errorf("%s's socket %s: %v", name, m[2], err)
			continue
		}
		c.Close()
	}

	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(time.Minute); err != nil {
		t.Errorf("fusebox-demo after Ctrl-C: %v", err)
	}
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "gossip items dropped") || strings.Contains(l, "level=ERROR") {
			t.Errorf("the demo logs a warning of dropped gossip or an error: %s", l)
		}
	}
}
