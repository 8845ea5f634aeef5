package conformance

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// pythonBin is the interpreter the Python client supports: Debian's, which
// sees Debian's python3-grpcio, python3-protobuf and python3-requests.
const pythonBin = "/usr/bin/python3"

var (
	pythonOnce sync.Once
	pythonErr  error
)

// needPython skips t when pythonBin cannot import the Python client's
// dependencies (`make test-deps` installs them, and `make test` runs it
// first), and fails it instead under FUSEBOX_REQUIRE_PYTHON=1 (CI).
func needPython(t *testing.T) {
	t.Helper()
	if !pythonUsable() && os.Getenv("FUSEBOX_REQUIRE_PYTHON") == "1" {
		t.Fatalf("FUSEBOX_REQUIRE_PYTHON=1 and the Python caller cannot run: %v", pythonErr)
	}
	if !pythonUsable() {
		t.Skipf("the Python caller needs Debian's python3-grpcio, python3-protobuf and python3-requests "+
			"(`make test-deps` installs them): %v", pythonErr)
	}
}

// pythonUsable reports whether the Python caller can run here.
func pythonUsable() bool {
	pythonOnce.Do(func() {
		out, err := exec.Command(pythonBin, "-c", "import grpc, google.protobuf, requests").CombinedOutput()
		if err != nil {
			pythonErr = fmt.Errorf("%s cannot import grpc, google.protobuf and requests: %v\n%s", pythonBin, err, out)
		}
	})
	return pythonErr == nil
}

// pyCaller is a Python service: clientlib/python's requests adapter, in a
// driver.py --serve process that makes the calls it is sent, one command
// at a time.
type pyCaller struct {
	a      *agent.Agent
	in     io.WriteCloser
	lines  chan string
	stderr *sstest.Buffer

	mu sync.Mutex // one command at a time
}

// newPyCaller starts the Python caller of a (whose socket is at addr; a
// is nil when the agent is not in process). It is stopped at t's cleanup.
func newPyCaller(t *testing.T, a *agent.Agent, addr, service string) *pyCaller {
	t.Helper()
	needPython(t)
	cmd := exec.Command(pythonBin, filepath.Join(repoDir, "clientlib", "python", "tests", "driver.py"),
		"--serve", "--agent", addr, "--service", service, "--agent-wait", fmt.Sprint(agentWait.Seconds()))
	p := &pyCaller{a: a, lines: make(chan string, 16), stderr: &sstest.Buffer{}}
	cmd.Stderr = p.stderr
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the Python caller: %v", err)
	}
	done := make(chan struct{})
	go func() { // ends when the process closes its stdout
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_, _ = io.WriteString(p.in, `{"op": "quit"}`+"\n")
		p.in.Close()
		tm := time.NewTimer(settle)
		defer tm.Stop()
		select {
		case <-done:
		case <-tm.C:
			_ = cmd.Process.Kill()
			t.Errorf("the Python caller did not exit within %v of quit; killed", settle)
			<-done // bounded: the process was killed
		}
		for range p.lines { // bounded: the reader ends with the process's stdout
		}
		if t.Failed() {
			t.Logf("stderr of the Python caller:\n%s", p.stderr.String())
		}
	})
	return p
}

// do sends one command and decodes its answer into out.
func (p *pyCaller) do(t *testing.T, cmd map[string]any, out any) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	line, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.in.Write(append(line, '\n')); err != nil {
		t.Fatalf("Python caller: sending %s: %v\nstderr:\n%s", line, err, p.stderr.String())
	}
	tm := time.NewTimer(callTimeout + settle)
	defer tm.Stop()
	select {
	case ans, ok := <-p.lines:
		if !ok {
			t.Fatalf("Python caller: exited before answering %s\nstderr:\n%s", line, p.stderr.String())
		}
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal([]byte(ans), &e) == nil && e.Error != "" {
			t.Fatalf("Python caller: %s: %s", line, e.Error)
		}
		if err := json.Unmarshal([]byte(ans), out); err != nil {
			t.Fatalf("Python caller: answer to %s: %v: %s", line, err, ans)
		}
	case <-tm.C:
		t.Fatalf("Python caller: no answer to %s within %v\nstderr:\n%s", line, callTimeout+settle, p.stderr.String())
	}
}

func (p *pyCaller) kind() string        { return kindPython }
func (p *pyCaller) agent() *agent.Agent { return p.a }

func (p *pyCaller) calls(t *testing.T, b batch) tally {
	t.Helper()
	cmd := map[string]any{"op": "calls", "method": b.method, "url": b.url, "n": b.n,
		"concurrency": max(b.concurrency, 1), "timeout": callTimeout.Seconds(), "interval": b.pace.Seconds(),
		"headers": map[string]string{headerCaller: kindPython}}
	if cmd["method"] == "" {
		cmd["method"] = "GET"
	}
	if b.call != "" {
		cmd["call_header"], cmd["call_prefix"] = headerCall, b.call
	}
	if b.key != "" {
		cmd["key_prefix"] = b.key
	}
	var out tally
	p.do(t, cmd, &out)
	return out
}

// pyStatus is the Python client's Status, as driver.py sends it.
type pyStatus struct {
	State      string `json:"state"`
	LocalState string `json:"local_state"`
	Override   string `json:"override"`
	Shadow     bool   `json:"shadow"`
	FromAgent  bool   `json:"from_agent"`
}

func (p *pyCaller) view(t *testing.T, dep string) view {
	t.Helper()
	var out struct {
		Status pyStatus `json:"status"`
	}
	p.do(t, map[string]any{"op": "status", "dependency": dep}, &out)
	s := out.Status
	// Status.rejecting, as the Python client and clientlib define it.
	rejecting := s.Override == sharedstate.ForcedOpen.String() ||
		(s.Override != sharedstate.ForcedClosed.String() && !s.Shadow &&
			(s.State != sharedstate.Closed.String() || s.LocalState != sharedstate.Closed.String()))
	return view{Rejecting: rejecting, FromAgent: s.FromAgent, Override: s.Override, State: s.State}
}
