package conformance

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// agentProc is a fusebox-agent process (the binary TestMain built), so
// that a test can kill it.
type agentProc struct {
	name      string
	cmd       *exec.Cmd
	socket    string
	proxyAddr string
	log       *sstest.Buffer
	exited    chan struct{}
}

// startAgentProcess starts agent name on etcd with its egress proxy on
// loopback port 0, and waits until it serves the policies of etcd. It is
// killed at t's cleanup if still running, and dies with the test process.
func startAgentProcess(t *testing.T, name string, etcd []string) *agentProc {
	t.Helper()
	dir, err := os.MkdirTemp("", "fbk") // short: unix socket paths are limited to 104 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &agentProc{name: name, socket: filepath.Join(dir, "agent.sock"), log: &sstest.Buffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(agentBinary, "--name", name, "--zone", "z1", "--data-dir", filepath.Join(dir, "data"),
		"--etcd", strings.Join(etcd, ","), "--socket", p.socket, "--gossip-addr", "127.0.0.1:0", "--http-addr", "",
		"--proxy-addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "info",
		"--gossip-interval", "50ms", "--tick-interval", "50ms")
	p.cmd.Env = []string{"HOME=" + dir}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", agentBinary, err)
	}
	started, synced := make(chan string, 1), make(chan struct{}, 1)
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			_, _ = p.log.Write(append(sc.Bytes(), '\n'))
			var rec struct{ Msg, Proxy string }
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				continue
			}
			switch rec.Msg {
			case "agent started":
				started <- rec.Proxy
			case "policies synced from etcd":
				select {
				case synced <- struct{}{}:
				default:
				}
			}
		}
		_ = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, p.log.String())
		}
	})
	tm := time.NewTimer(2 * settle)
	defer tm.Stop()
	for p.proxyAddr == "" || synced != nil {
		select {
		case p.proxyAddr = <-started:
		case <-synced:
			synced = nil
		case <-p.exited:
			t.Fatalf("%s exited at start:\n%s", name, p.log.String())
		case <-tm.C:
			t.Fatalf("%s did not start and sync from etcd within %v:\n%s", name, 2*settle, p.log.String())
		}
	}
	return p
}

// kill sends SIGKILL and waits for the exit.
func (p *agentProc) kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	tm := time.NewTimer(settle)
	defer tm.Stop()
	select {
	case <-p.exited:
	case <-tm.C:
		t.Errorf("%s did not exit within %v of SIGKILL", p.name, settle)
	}
}

// TestAgentKilled: the agent of every caller is killed (SIGKILL). The Go
// and Python clients keep working on their local fallback: calls go on,
// the force-open the agent pushed holds, and their local breaker, under
// the last policy the agent pushed, stops calling a dependency that dies.
// The proxy goes with its agent: its callers get a refused connection at
// once, never a hang.
func TestAgentKilled(t *testing.T) {
	srv := embeddedtest.Start(t)
	w := &world{etcd: srv.Endpoints(), coord: startCoordinator(t, srv.Endpoints())}
	// Written before the agent starts: it reads them at start.
	w.setPolicy(t, sharedstate.DefaultPolicyName, suiteDefault(t), suiteDefaultApplied)
	forced := newUpstream(t, always(http.StatusOK))
	w.ctl(t, "", "force-open", forced.dep, "--ttl", "10m", "--reason", "conformance suite")
	p := startAgentProcess(t, "agent-killed", w.etcd)
	addr := "unix://" + p.socket
	callers := []caller{newGoCallerAt(t, nil, addr, "conformance-go"), newProxyCallerAt(t, nil, p.proxyAddr)}
	if !pythonUsable() {
		t.Run(kindPython, needPython)
	} else {
		callers = append(callers, newPyCaller(t, nil, addr, "conformance-python"))
	}

	ups := map[string]*upstream{}
	for _, c := range callers {
		up := newUpstream(t, always(http.StatusOK))
		ups[c.kind()] = up
		if c.kind() != kindProxy {
			fromAgent(t, c, up.dep)
			waitView(t, c, forced.dep, "sees the force-open", func(v view) bool { return v.FromAgent && v.Override == "forced-open" })
		}
		if tl := c.calls(t, batch{url: up.url("/live"), n: 3}); tl.OK != 3 {
			t.Fatalf("%s with its agent: %v, want 3 answered", c.kind(), tl)
		}
		if tl := c.calls(t, batch{url: forced.url("/forced"), n: 3}); tl.Rejected["forced-open"] != 3 {
			t.Fatalf("%s with its agent: %v, want 3 refused as forced-open", c.kind(), tl)
		}
	}

	p.kill(t)
	for _, c := range callers {
		t.Run(c.kind(), func(t *testing.T) {
			up := ups[c.kind()]
			if c.kind() == kindProxy {
				tl := c.calls(t, batch{url: up.url("/live"), n: 1})
				if tl.Errors != 1 || !strings.Contains(strings.Join(tl.Errs, " "), "connection refused") {
					t.Errorf("through the killed agent's proxy: %v, want the connection refused", tl)
				}
				return
			}
			waitView(t, c, up.dep, "decides locally", func(v view) bool { return !v.FromAgent })
			if tl := c.calls(t, batch{url: up.url("/live"), n: 5}); tl.OK != 5 {
				t.Errorf("without the agent: %v, want 5 answered", tl)
			}
			if n := up.count(c.kind()); n != 3+5 {
				t.Errorf("the dependency saw %d requests, want 8", n)
			}
			waitView(t, c, forced.dep, "keeps the force-open", func(v view) bool { return !v.FromAgent && v.Override == "forced-open" })
			if tl := c.calls(t, batch{url: forced.url("/forced"), n: 5}); tl.Rejected["forced-open"] != 5 {
				t.Errorf("without the agent, on the forced-open dependency: %v, want 5 refused as forced-open", tl)
			}
			if n := forced.count(c.kind()); n != 0 {
				t.Errorf("%d requests reached the forced-open dependency", n)
			}

			// The dependency dies: the local breaker opens under the
			// pushed policy (10 requests at 50%), and nothing more is sent.
			up.set(always(http.StatusInternalServerError))
			before := up.count(c.kind())
			made := callUntilRefused(t, c, up.url("/live"), http.StatusInternalServerError, 30*suiteMinimumRequests, "open")
			// The window holds at least the 5 successes since the kill: at
			// 50%, as many failures.
			if made < 5 {
				t.Errorf("the local breaker opened after %d failures", made)
			}
			sent := up.count(c.kind())
			if sent-before != made {
				t.Errorf("%d calls answered, the dependency saw %d", made, sent-before)
			}
			if tl := c.calls(t, batch{url: up.url("/live"), n: 10}); tl.Rejected["open"] != 10 {
				t.Errorf("10 calls on the open local breaker: %v, want all refused as open", tl)
			}
			if n := up.count(c.kind()); n != sent {
				t.Errorf("%d requests reached the dependency after the local breaker opened", n-sent)
			}
			t.Logf("%s: the local breaker opened after %d failures", c.kind(), made)
		})
	}
}
