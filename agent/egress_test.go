package agent

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// withProxy turns the proxy on (loopback, port 0) and the other TCP
// listeners too, so that the tests can aim at them; the tests' upstreams
// listen on ports of the moment, so their dependencies are named by
// Fusebox-Dependency (--proxy-allow-any-dependency).
func withProxy(c *Config) {
	c.Proxy.Addr = "127.0.0.1:0"
	c.Proxy.AllowAnyDependency = true
	c.GRPCAddr = "127.0.0.1:0"
	c.HTTPAddr = "127.0.0.1:0"
}

// startProxyAgent starts an agent on an embedded etcd, its config changed
// by change, with attempts (and probes) timed out after a generous 2 s
// (under -race);
// it returns the agent and a store of its etcd.
func startProxyAgent(t *testing.T, change func(*Config)) (*testAgent, *store.Store) {
	t.Helper()
	cfg := testConfig(t, "proxy")
	change(&cfg)
	p := testPolicy()
	p.Retry.PerAttemptTimeout = sharedstate.Duration(2 * time.Second)
	p.Breaker.ProbeTimeout = sharedstate.Duration(2 * time.Second)
	return startWithEtcd(t, cfg, WithDefaultPolicy(p))
}

// putPolicy writes dep's policy to etcd and waits until a applies it
// (check tells).
func putPolicy(t *testing.T, st *store.Store, a *testAgent, dep, policy string, check func(sharedstate.Policy) bool) {
	t.Helper()
	if _, err := st.PutPolicy(ctxT(t, 10*time.Second), dep, []byte(policy), store.WriteOptions{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the agent applies the policy of "+dep, func() bool {
		return check(a.eng.Policy(dep))
	})
}

// proxyClient is an HTTP client that uses a's proxy as HTTP_PROXY.
func proxyClient(t *testing.T, a *Agent) *http.Client {
	t.Helper()
	u, err := url.Parse("http://" + a.ProxyAddr())
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(u)}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// call makes one request and returns the answer with its body read.
func call(t *testing.T, c *http.Client, method, target, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, target, err)
	}
	return resp, string(b)
}

func TestProxyAddrMustBeLoopback(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name, cfg.DataDir = "a", t.TempDir()
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.Proxy.Addr = "0.0.0.0:7952"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--insecure-proxy") {
		t.Fatalf("Validate(proxy-addr 0.0.0.0) = %v, want a refusal naming --insecure-proxy", err)
	}
	cfg.Proxy.Insecure = true
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate(proxy-addr 0.0.0.0, --insecure-proxy) = %v", err)
	}
	cfg.Proxy.Routes = []string{"x"}
	cfg.Proxy.AllowHosts = []string{"a b"}
	cfg.Proxy.MaxConns = 0
	cfg.Proxy.MaxConnsPerClient = 0
	cfg.Proxy.BodyBufferBudget = -1
	cfg.Proxy.BodyTimeout = 0
	err = cfg.Validate()
	for _, flag := range []string{"proxy-routes", "proxy-allow-hosts", "proxy-max-conns", "proxy-max-conns-per-client",
		"proxy-body-buffer-budget", "proxy-body-timeout"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("Validate does not name --%s: %v", flag, err)
		}
	}
}
