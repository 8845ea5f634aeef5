package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// ctlBinary is the fuseboxctl built by TestMain.
var ctlBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fuseboxctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctlBinary = filepath.Join(dir, "fuseboxctl")
	build := exec.Command("go", "build", "-o", ctlBinary, ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building fuseboxctl:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// ---- a coordinator in this process ----

const (
	adminToken  = "admin-token-0123456789abcdef"
	viewerToken = "viewer-token-0123456789abcdef"
)

func startCoordinator(t *testing.T, tokens bool) *coordinator.Coordinator {
	t.Helper()
	tokensFile := ""
	if tokens {
		tokensFile = writeFile(t, "tokens", "admin "+adminToken+" ops-admin\nviewer "+viewerToken+"\n")
	}
	return startCoordinatorWith(t, tokensFile)
}

// startCoordinatorWith starts a coordinator with tokensFile (none when
// empty), checked for changes every 50ms.
func startCoordinatorWith(t *testing.T, tokensFile string) *coordinator.Coordinator {
	t.Helper()
	cfg := coordinator.DefaultConfig()
	cfg.Name = "coordinator-" + filepath.Base(t.TempDir())
	cfg.DataDir = t.TempDir()
	cfg.EmbeddedEtcdURL = "http://127.0.0.1:0"
	cfg.TokensFile = tokensFile
	return startTestCoordinator(t, cfg,
		coordinator.WithTokensPoll(50*time.Millisecond),
		coordinator.WithEmbeddedEtcd(func(e *embedded.Config) {
			*e = embedded.TestConfig(e.Dir)
		}))
}

// startTestCoordinator starts a coordinator from cfg on free loopback ports
// with short gossip and tick timings (and opts), and closes it in t.Cleanup.
func startTestCoordinator(t *testing.T, cfg coordinator.Config, opts ...coordinator.Option) *coordinator.Coordinator {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ShutdownTimeout = 2 * time.Second
	c, err := coordinator.New(cfg, append([]coordinator.Option{
		coordinator.WithLogger(discardLogger()),
		coordinator.WithGossip(func(g *gossip.Config) {
			g.GossipInterval, g.ProbeInterval, g.PushPullInterval = 50*time.Millisecond, 200*time.Millisecond, 500*time.Millisecond
		}),
		coordinator.WithTickInterval(50 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func adminConn(t *testing.T, c *coordinator.Coordinator) fuseboxv1.AdminClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+c.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return fuseboxv1.NewAdminClient(conn)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ---- running the binary ----

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ctl runs fuseboxctl against c (nil: no coordinator) with extra
// environment variables ("K=V") and args.
func ctl(t *testing.T, c *coordinator.Coordinator, env []string, args ...string) result {
	t.Helper()
	cmd := ctlCommand(t, c, env, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running fuseboxctl %v: %v", args, err)
	}
	return r
}

func ctlCommand(t *testing.T, c *coordinator.Coordinator, env []string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, ctlBinary, args...)
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "USER=tester"}
	if c != nil {
		base = append(base, "FUSEBOX_COORDINATOR="+c.GRPCAddr())
	}
	cmd.Env = append(base, env...)
	return cmd
}

// want checks the exit code and that stdout/stderr contain the given texts.
func (r result) want(t *testing.T, code int, stdout []string, stderr []string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %v", code, r)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout lacks %q: %v", s, r)
		}
	}
	for _, s := range stderr {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr lacks %q: %v", s, r)
		}
	}
}

// closedAddr returns a loopback address nobody listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// waitLine reads r until a line contains s or d passes.
func waitLine(t *testing.T, r *bufio.Reader, s string, d time.Duration) {
	t.Helper()
	lines := make(chan string, 1)
	go func() {
		defer close(lines)
		for { // bounded by r, which fails when the process (killed after 30 s) exits
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.Contains(line, s) {
				lines <- line
				return
			}
		}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case _, ok := <-lines:
		if !ok {
			t.Fatalf("output ended before a line with %q", s)
		}
	case <-timer.C:
		t.Fatalf("no line with %q within %v", s, d)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
