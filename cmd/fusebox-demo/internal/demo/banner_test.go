package demo_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestBannerCommandsWork runs the fusebox-demo binary as `make run` does
// (fusebox-demo and fuseboxctl in bin/, started from the directory above
// it): the banner's first fuseboxctl line, run by a shell as printed in
// that directory with no FUSEBOX_* variable of the test's, exits 0; the
// banner lists each agent's socket as a FUSEBOX_AGENT=unix://… line, and
// each socket answers; agent-c's egress proxy line works as the note under
// it says (see checkProxyLine). Ctrl-C then stops the demo with exit code 0, no
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
	checkProxyLine(ctx, t, out)

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

// checkProxyLine: the banner names agent-c's egress proxy as
// http_proxy=… HTTP_PROXY=…, and what the note under it says holds
// against a loopback upstream: a Go client whose transport names the proxy
// goes through it, and so does curl with http_proxy, but not curl with
// HTTP_PROXY alone (curl reads only the lower-case name). The curl checks
// are skipped, saying so, where curl is not installed.
func checkProxyLine(ctx context.Context, t *testing.T, out *lines) {
	t.Helper()
	m := out.find(regexp.MustCompile(`^  Egress proxy   agent-c's: http_proxy=(http://127\.0\.0\.1:\d+) HTTP_PROXY=(\S+)$`))
	if m == nil {
		t.Error("the banner has no egress proxy line for agent-c")
		return
	}
	if m[2] != m[1] {
		t.Errorf("the banner's http_proxy=%s and HTTP_PROXY=%s differ", m[1], m[2])
	}
	for _, w := range []string{"http_proxy", "http.ProxyURL", "proxyTunnel: false"} {
		if out.find(regexp.MustCompile(regexp.QuoteMeta(w))) == nil {
			t.Errorf("the banner's note on proxy clients does not mention %s", w)
		}
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer upstream.Close()

	u, err := url.Parse(m[1])
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(u)}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, upstream.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("a Go client through %s: %v", m[1], err)
	}
	resp.Body.Close()
	if resp.Header.Get(proxy.HeaderAttempts) == "" {
		t.Errorf("a Go client whose transport names %s: no %s header, the call did not go through the proxy", m[1], proxy.HeaderAttempts)
	}

	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Logf("curl is not installed: its http_proxy and HTTP_PROXY are not checked")
		return
	}
	viaCurl := func(env ...string) bool {
		cmd := exec.CommandContext(ctx, curl, "-s", "-o", "/dev/null", "-D", "-", "--max-time", "10", upstream.URL)
		for _, kv := range cleanEnv() {
			name, _, _ := strings.Cut(kv, "=")
			switch strings.ToLower(name) {
			case "http_proxy", "https_proxy", "all_proxy", "no_proxy":
				continue
			}
			cmd.Env = append(cmd.Env, kv)
		}
		cmd.Env = append(cmd.Env, env...)
		got, err := cmd.Output()
		if err != nil {
			t.Errorf("curl with %q: %v", env, err)
		}
		return strings.Contains(strings.ToLower(string(got)), strings.ToLower(proxy.HeaderAttempts)+":")
	}
	if !viaCurl("http_proxy=" + m[1]) {
		t.Errorf("curl with http_proxy=%s did not go through the proxy", m[1])
	}
	if viaCurl("HTTP_PROXY=" + m[2]) {
		t.Errorf("curl with HTTP_PROXY=%s alone went through the proxy: the note says curl reads only http_proxy", m[2])
	}
}
