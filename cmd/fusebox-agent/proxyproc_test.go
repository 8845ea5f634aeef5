package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// proxyAgent is a fusebox-agent process serving the egress proxy.
type proxyAgent struct {
	name   string
	cmd    *exec.Cmd
	log    *sstest.Buffer
	up     chan struct{}
	exited chan struct{}
	proxy  string // the proxy's address, from the "agent started" line
	http   string
}

// startProxyAgent starts bin (empty: this test binary as fusebox-agent)
// with args, alone (no etcd, no peers), logging JSON. Sockets in handed
// are handed to it as systemd does (LISTEN_FDS from descriptor 3, named
// "proxy"; LISTEN_PID set by a shell that then becomes the agent).
func startProxyAgent(t *testing.T, name, bin string, handed []*os.File, args ...string) *proxyAgent {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "fbp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	args = append([]string{"--name", name, "--data-dir", filepath.Join(t.TempDir(), "data"), "--gossip-addr", "127.0.0.1:0",
		"--socket", filepath.Join(sockDir, "agent.sock"), "--http-addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "info"}, args...)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FUSEBOX_") && !strings.HasPrefix(kv, "LISTEN_") {
			env = append(env, kv)
		}
	}
	if bin == "" {
		bin = os.Args[0]
		env = append(env, "FUSEBOX_AGENT_MAIN=1") // the test binary runs main
	}
	p := &proxyAgent{name: name, log: &sstest.Buffer{}, up: make(chan struct{}), exited: make(chan struct{})}
	if len(handed) > 0 {
		p.cmd = exec.Command("/bin/sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`, bin}, args...)...)
		env = append(env, "LISTEN_FDS="+strconv.Itoa(len(handed)), "LISTEN_FDNAMES=proxy")
		p.cmd.ExtraFiles = handed
	} else {
		p.cmd = exec.Command(bin, args...)
	}
	p.cmd.Env = env
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		up := false
		for sc.Scan() {
			p.log.Write(append(sc.Bytes(), '\n'))
			var rec struct{ Msg, Proxy, HTTP string }
			if !up && json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "agent started" {
				p.proxy, p.http, up = rec.Proxy, rec.HTTP, true
				close(p.up)
			}
		}
		_ = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, p.log.String())
		}
	})
	select {
	case <-p.up:
	case <-p.exited:
		t.Fatalf("%s exited at start:\n%s", name, p.log.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start:\n%s", name, p.log.String())
	}
	return p
}

// terminate sends SIGTERM.
func (p *proxyAgent) terminate() { _ = p.cmd.Process.Signal(syscall.SIGTERM) }

// stop sends SIGTERM and waits for the exit (SIGKILL after 15 s); it
// reports whether the agent exited by itself.
func (p *proxyAgent) stop() bool {
	select {
	case <-p.exited:
		return true
	default:
	}
	p.terminate()
	select {
	case <-p.exited:
		return true
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return false
	}
}

// status reads a field of /proc/PID/status in bytes (VmRSS, VmHWM).
func (p *proxyAgent) status(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == field+":" && f[2] == "kB" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, p.cmd.Process.Pid)
	return 0
}

// metric is the value of the series of p's /metrics that starts with
// series (name and labels), 0 when absent.
func (p *proxyAgent) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, series+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

// proxiedClient is an HTTP client that uses proxyAddr as HTTP_PROXY from
// the loopback address src.
func proxiedClient(t *testing.T, src, proxyAddr string, timeout time.Duration) *http.Client {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxyAddr}), DialContext: d.DialContext,
		MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// buildAgent builds this package's fusebox-agent without the race
// detector (whose shadow memory would hide the agent's own): what the
// memory figures are about.
func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fusebox-agent")
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built fusebox-agent in %v", time.Since(start).Round(time.Millisecond))
	return bin
}
