package demo_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fusebox-dev/fusebox/cmd/fusebox-demo/internal/demo"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// fuseboxctl and fuseboxDemo are the paths of the binaries TestMain builds
// for the browser test, the banner test and the external agent test, in
// bin/ under buildRoot as `make run` builds them ("" when the build
// failed; buildErr says why).
var (
	buildRoot, fuseboxctl, fuseboxDemo string
	buildErr                           error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fusebox-demo-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		os.Exit(1)
	}
	buildRoot = dir
	fuseboxctl, fuseboxDemo, buildErr = buildBinaries(filepath.Join(dir, "bin"))
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := findLeaks(5 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// findLeaks runs goleak until no goroutine is left or the deadline passes.
// memberlist's Shutdown does not wait for a probe in flight: its goroutine
// ends by itself within a probe interval (500ms in the demo), longer than
// goleak's own retries (about 0.4s). A real leak outlives the deadline.
func findLeaks(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// buildBinaries builds cmd/fuseboxctl and cmd/fusebox-demo into dir with
// the go command that runs the tests.
func buildBinaries(dir string) (ctl, demo string, err error) {
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	cmd := exec.Command(goBin, "build", "-o", dir+string(filepath.Separator),
		"github.com/fusebox-dev/fusebox/cmd/fuseboxctl", "github.com/fusebox-dev/fusebox/cmd/fusebox-demo")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build fuseboxctl fusebox-demo: %v\n%s", err, b)
	}
	return filepath.Join(dir, "fuseboxctl"), filepath.Join(dir, "fusebox-demo"), nil
}

// testConfig is a demo on free ports with short phases, its lines going
// to the test log (and its components' logs too with FUSEBOX_TEST_LOG=1).
func testConfig(t *testing.T, phase time.Duration) demo.Config {
	cfg := demo.DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.PhaseDuration = phase
	cfg.Headless = true
	cfg.Out = &testWriter{t: t}
	if os.Getenv("FUSEBOX_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return cfg
}

// startDemo starts a demo and closes it at cleanup.
func startDemo(t *testing.T, cfg demo.Config) *demo.Demo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := demo.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("demo.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("demo.Close: %v", err)
		}
	})
	return d
}

// testWriter sends whole lines to t.Log until the test ends.
type testWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf strings.Builder
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	s := w.buf.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		w.t.Log(strings.TrimRight(s[:i], "\n"))
		w.buf.Reset()
		w.buf.WriteString(s[i+1:])
	}
	return len(p), nil
}

var _ io.Writer = (*testWriter)(nil)

// cleanEnv is the test's environment without FUSEBOX_* variables, as in a
// fresh shell.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FUSEBOX_") {
			env = append(env, kv)
		}
	}
	return env
}

// demoProcess is the fusebox-demo binary running for a test.
type demoProcess struct {
	cmd    *exec.Cmd
	out    *lines // its output lines, as they come
	stderr sstest.Buffer
	exited chan error // Wait's result, once
	once   sync.Once
	waited chan struct{} // closed once wait took exited
}

// startDemoProcess starts the fusebox-demo binary with args in dir (the
// test's own working directory when ""), without the test's FUSEBOX_*
// variables. It is killed at cleanup unless wait saw it exit, and its
// output is logged when the test failed.
func startDemoProcess(ctx context.Context, t *testing.T, dir string, args ...string) *demoProcess {
	t.Helper()
	p := &demoProcess{out: &lines{}, exited: make(chan error, 1), waited: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, fuseboxDemo, args...)
	p.cmd.Dir = dir
	p.cmd.Env = cleanEnv()
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.out.add(sc.Text())
		}
	}()
	go func() {
		<-readDone // Wait closes the pipe: read everything first
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-p.waited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("fusebox-demo's output:\n%s\nstderr:\n%s", p.out, p.stderr.String())
		}
	})
	return p
}

// wait waits up to within for the process to exit and returns Wait's
// error (one saying it did not exit, after within).
func (p *demoProcess) wait(within time.Duration) error {
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case err := <-p.exited:
		p.once.Do(func() { close(p.waited) })
		return err
	case <-timer.C:
		return fmt.Errorf("fusebox-demo did not exit within %v", within)
	}
}
