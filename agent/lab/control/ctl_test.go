package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/convert"
)

// The fuseboxctl binary, built by the first test that runs it.
var (
	ctlOnce  sync.Once
	ctlPath  string
	ctlError error
)

// ctlBinary builds fuseboxctl (once per test binary) and returns its path.
func ctlBinary(t *testing.T) string {
	t.Helper()
	ctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fusebox-control-")
		if err != nil {
			ctlError = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		bins, err := fleet.Build(ctx, dir, false, "fuseboxctl")
		if err != nil {
			ctlError = err
			return
		}
		ctlPath = bins[0]
	})
	if ctlError != nil {
		t.Fatal(ctlError)
	}
	return ctlPath
}

// result is one fuseboxctl run.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ctl runs fuseboxctl against c with extra environment variables ("K=V")
// and args.
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

// ctlCommand is fuseboxctl with args against c (nil: none), killed after
// 30 s.
func ctlCommand(t *testing.T, c *coordinator.Coordinator, env []string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, ctlBinary(t), args...)
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

// writeFile writes content to a file name in a temporary directory and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startWatch starts fuseboxctl watch with args and waits until the
// coordinator has subscribed it ("watching" on stderr).
func startWatch(t *testing.T, env []string, args ...string) (cmd *exec.Cmd, stdout, stderr *bufio.Reader) {
	t.Helper()
	cmd = ctlCommand(t, nil, env, append([]string{"watch"}, args...)...)
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr = bufio.NewReader(outPipe), bufio.NewReader(errPipe)
	waitLine(t, stderr, "fuseboxctl: watching", 10*time.Second)
	return cmd, stdout, stderr
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

// parseEvents parses watch -o json's output: one event per line.
func parseEvents(t *testing.T, out string) []convert.Event {
	t.Helper()
	var evs []convert.Event
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e convert.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("watch line %q: %v", line, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// What the tests read of fuseboxctl's -o json output (the fields they
// check, by their JSON names).
type (
	policyDoc struct {
		Dependency  string `json:"dependency"`
		ModRevision int64  `json:"modRevision"`
	}
	auditDoc struct {
		Revision   int64  `json:"revision"`
		Action     string `json:"action"`
		Dependency string `json:"dependency"`
	}
	dependencyDoc struct {
		Dependency string `json:"dependency"`
		Override   string `json:"override,omitempty"`
	}
	etcdSyncDoc struct {
		Synced     bool            `json:"synced"`
		Rewinds    uint64          `json:"rewinds"`
		LastRewind json.RawMessage `json:"lastRewind,omitempty"`
	}
	memberDoc struct {
		Node string       `json:"node"`
		Role string       `json:"role"`
		Etcd *etcdSyncDoc `json:"etcd,omitempty"`
	}
	statusDoc struct {
		Etcd    *etcdSyncDoc `json:"etcd,omitempty"`
		Members []memberDoc  `json:"members"`
	}
	simSideDoc struct {
		Opened *time.Time `json:"opened,omitempty"`
	}
	simTotalsDoc struct {
		Refused          uint64 `json:"refused"`
		FailedLetThrough uint64 `json:"failedLetThrough"`
	}
	changeDoc struct {
		Field string `json:"field"`
		From  string `json:"from"`
		To    string `json:"to"`
	}
	simulationDoc struct {
		Changes   []changeDoc `json:"changes"`
		Incidents []struct {
			Fleet    simSideDoc `json:"fleet"`
			Current  simSideDoc `json:"current"`
			Proposed simSideDoc `json:"proposed"`
		} `json:"incidents"`
		Totals struct {
			Fleet    simTotalsDoc `json:"fleet"`
			Current  simTotalsDoc `json:"current"`
			Proposed simTotalsDoc `json:"proposed"`
		} `json:"totals"`
	}
)
