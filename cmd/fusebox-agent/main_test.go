package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// The test binary doubles as fusebox-agent when FUSEBOX_AGENT_MAIN is set,
// so the SIGTERM test runs the real main in a child process.
func TestMain(m *testing.M) {
	if os.Getenv("FUSEBOX_AGENT_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// SIGTERM: the agent ends client sessions with codes.Unavailable and the
// documented message, leaves, and exits 0 within 5 s.
func TestSIGTERM(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "fbm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "agent.sock")
	cmd := exec.Command(os.Args[0], "--name", "sigterm-test", "--data-dir", t.TempDir(),
		"--gossip-addr", "127.0.0.1:0", "--socket", sock, "--http-addr", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(os.Environ(), "FUSEBOX_AGENT_MAIN=1")
	var stderr sstest.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	reaped := false
	defer func() {
		if !reaped {
			cmd.Process.Kill()
			<-exited
		}
	}()

	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "agent started") {
		if time.Now().After(deadline) {
			t.Fatalf("agent did not start:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := fuseboxv1.NewAgentClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{Service: "s"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != agent.ShutdownMessage {
		t.Errorf("session ended with %v, want Unavailable %q", err, agent.ShutdownMessage)
	}
	select {
	case err := <-exited:
		reaped = true
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("still running 5 s after SIGTERM:\n%s", stderr.String())
	}
	t.Logf("exited %v after SIGTERM", time.Since(start))
	if !strings.Contains(stderr.String(), "agent stopped") {
		t.Errorf("log lacks the stop:\n%s", stderr.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

func TestBadConfigExitsTwo(t *testing.T) {
	var stderr bytes.Buffer
	code := run([]string{"--gossip-addr", "nope", "--log-format", "xml"}, func(string) string { return "" }, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), `gossip-addr: must be host:port, got "nope"`) ||
		!strings.Contains(stderr.String(), "log-format") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"-h"}, func(string) string { return "" }, &stderr); code != 0 || !strings.Contains(stderr.String(), "FUSEBOX_") {
		t.Fatalf("-h: exit %d\n%s", code, stderr.String())
	}
}

// Plaintext gossip off loopback is opt-in: the real binary exits non-zero at
// once, in one line naming the keyring flag and --insecure-gossip. A keyring
// file its group can read is refused too.
func TestPlaintextGossipRefused(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--name", "plain", "--data-dir", t.TempDir(), "--gossip-addr", "0.0.0.0:0",
		"--socket", filepath.Join(t.TempDir(), "a.sock"), "--http-addr", "")
	cmd.Env = append(os.Environ(), "FUSEBOX_AGENT_MAIN=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("exit: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 ||
		!strings.Contains(lines[0], "--keyring-file") || !strings.Contains(lines[0], "--insecure-gossip") {
		t.Fatalf("want one line naming --keyring-file and --insecure-gossip, got:\n%s", out)
	}
	t.Logf("refused after %v: %s", time.Since(start), out)

	kr := filepath.Join(t.TempDir(), "keyring")
	if err := os.WriteFile(kr, []byte("MDEyMzQ1Njc4OWFiY2RlZg==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(kr, 0o640); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run([]string{"--name", "k", "--data-dir", t.TempDir(), "--gossip-addr", "0.0.0.0:0", "--keyring-file", kr,
		"--socket", filepath.Join(t.TempDir(), "k.sock"), "--http-addr", ""}, func(string) string { return "" }, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "group/other-accessible") || !strings.Contains(stderr.String(), kr) {
		t.Fatalf("group-readable keyring: exit %d\n%s", code, stderr.String())
	}
}
