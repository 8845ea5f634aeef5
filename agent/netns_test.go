package agent

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// netnsLab is a small network the test builds: one namespace per agent,
// each with a veth to a bridge in a "switch" namespace, addresses
// 10.77.0.1.. in a /24. Nothing touches the host's own namespace.
type netnsLab struct {
	t      *testing.T
	prefix string
	n      int
}

func (l *netnsLab) ns(i int) string { return fmt.Sprintf("%s-%d", l.prefix, i) }
func (l *netnsLab) sw() string      { return l.prefix + "-sw" }
func (l *netnsLab) addr(i int) string {
	return fmt.Sprintf("10.77.0.%d", i+1)
}

func (l *netnsLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// requireNetns skips (or, with CI=true, fails) when the test cannot build
// namespaces.
func requireNetns(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "`ip` (iproute2) not found"
	}
	if why == "" {
		return
	}
	msg := "network namespace test needs root and iproute2's `ip`: " + why
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: failing instead of skipping)")
	}
	t.Skip(msg)
}

func newNetnsLab(t *testing.T, n int) *netnsLab {
	l := &netnsLab{t: t, prefix: fmt.Sprintf("fbx%d", os.Getpid()%100000), n: n}
	t.Cleanup(func() {
		for i := range n {
			exec.Command("ip", "netns", "del", l.ns(i)).Run()
		}
		exec.Command("ip", "netns", "del", l.sw()).Run()
	})
	l.ip("netns", "add", l.sw())
	l.ip("-n", l.sw(), "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.sw(), "link", "set", "br0", "up")
	for i := range n {
		l.ip("netns", "add", l.ns(i))
		host, peer := fmt.Sprintf("v%d", i), "eth0"
		l.ip("-n", l.sw(), "link", "add", host, "type", "veth", "peer", "name", peer, "netns", l.ns(i))
		l.ip("-n", l.sw(), "link", "set", host, "master", "br0")
		l.ip("-n", l.sw(), "link", "set", host, "up")
		l.ip("-n", l.ns(i), "addr", "add", l.addr(i)+"/24", "dev", peer)
		l.ip("-n", l.ns(i), "link", "set", peer, "up")
		l.ip("-n", l.ns(i), "link", "set", "lo", "up")
	}
	return l
}

// cut adds (or, with del, removes) blackhole routes between every namespace
// of a and every address of b, both ways.
func (l *netnsLab) cut(a, b []int, del bool) {
	op := "add"
	if del {
		op = "del"
	}
	for _, i := range a {
		for _, j := range b {
			l.ip("-n", l.ns(i), "route", op, "blackhole", l.addr(j)+"/32")
			l.ip("-n", l.ns(j), "route", op, "blackhole", l.addr(i)+"/32")
		}
	}
}

// netnsAgent is a fusebox-agent process in a namespace; its /metrics is
// read over its unix socket's neighbour: a small HTTP-over-netns dial.
type netnsAgent struct {
	name, sock, http string
	cmd              *exec.Cmd
	log              *logBuffer
}

// metrics reads the agent's /metrics from inside its namespace (ip netns
// exec + the test binary as a tiny HTTP client).
func (l *netnsLab) metrics(i int, a *netnsAgent) (map[string]float64, error) {
	cmd := exec.Command("ip", "netns", "exec", l.ns(i), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FUSEBOX_AGENT_TEST_HELPER=fetch", "FUSEBOX_FETCH_URL=http://"+a.http+"/metrics")
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			m[k] = f
		}
	}
	return m, nil
}

// fetchHelper is what the test binary does as FUSEBOX_AGENT_TEST_HELPER=fetch.
func fetchHelper() int {
	resp, err := http.Get(os.Getenv("FUSEBOX_FETCH_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer resp.Body.Close()
	b := bufio.NewReader(resp.Body)
	if _, err := b.WriteTo(os.Stdout); err != nil {
		return 1
	}
	return 0
}

// Six agents, each in its own network namespace on one bridge, split 3 | 3
// by blackhole routes for longer than memberlist's dead-node timeouts, then
// healed: they agree again on one membership and on every breaker record,
// including a record each side changed on its own.
func TestPartitionHealsAcrossNamespaces(t *testing.T) {
	requireNetns(t)
	if testing.Short() {
		t.Skip("builds fusebox-agent and six namespaces")
	}
	const n = 6
	bin := filepath.Join(t.TempDir(), "fusebox-agent")
	build := exec.Command("go", "build", "-o", bin, "./fusebox-agent")
	build.Dir = "../cmd" // the cmd module
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	l := newNetnsLab(t, n)
	sockDir := shortTempDir(t)
	var agents []*netnsAgent
	var joins []string
	for i := range n {
		joins = append(joins, l.addr(i)+":7946")
	}
	var wg sync.WaitGroup
	for i := range n {
		a := &netnsAgent{name: fmt.Sprintf("ns-agent-%d", i), sock: filepath.Join(sockDir, fmt.Sprintf("a%d.sock", i)),
			http: l.addr(i) + ":7951", log: &logBuffer{}}
		a.cmd = exec.Command("ip", "netns", "exec", l.ns(i), bin,
			"--name", a.name, "--zone", "z1", "--data-dir", filepath.Join(t.TempDir(), "data"),
			"--gossip-addr", l.addr(i)+":7946", "--insecure-gossip", "--join", strings.Join(joins, ","),
			"--socket", a.sock, "--grpc-addr", "", "--http-addr", a.http,
			"--gossip-interval", "50ms", "--probe-interval", "200ms", "--push-pull-interval", "2s",
			"--tick-interval", "50ms", "--rejoin-interval", "500ms", "--log-level", "info")
		a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
		if err := a.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); a.cmd.Wait() }()
		agents = append(agents, a)
	}
	t.Cleanup(func() {
		for _, a := range agents {
			a.cmd.Process.Signal(os.Interrupt)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		tm := time.NewTimer(10 * time.Second)
		defer tm.Stop()
		select {
		case <-done:
		case <-tm.C:
			for _, a := range agents {
				a.cmd.Process.Kill()
			}
			<-done
		}
		if t.Failed() {
			for _, a := range agents {
				t.Logf("log of %s:\n%s", a.name, a.log.String())
			}
		}
	})

	members := func(i int) int {
		m, err := l.metrics(i, agents[i])
		if err != nil {
			return -1
		}
		return int(m[`fusebox_agent_members{role="agent",state="alive"}`])
	}
	generation := func(i int, dep string) int {
		m, err := l.metrics(i, agents[i])
		if err != nil {
			return -1
		}
		return int(m[fmt.Sprintf(`fusebox_agent_breaker_generation{dependency=%q}`, dep)])
	}
	all := []int{0, 1, 2, 3, 4, 5}
	sideA, sideB := []int{0, 1, 2}, []int{3, 4, 5}
	everyone := func(idx []int, what string, want int, get func(int) int) {
		t.Helper()
		sstest.Eventually(t, 30*time.Second, what, func() bool {
			for _, i := range idx {
				if get(i) != want {
					return false
				}
			}
			return true
		})
	}
	everyone(all, "six agents see six members", n, members)

	l.cut(sideA, sideB, false)
	everyone(all, "each side sees only its own three", 3, members)
	// Hold the partition past the dead-node timeouts (a condition, not a
	// sleep: memberlist has reaped the other side when each sees 3), then
	// let each side move a breaker on its own.
	trip := func(i int, dep string) {
		if _, err := dialSock(t, agents[i].sock).Report(ctxT(t, 5*time.Second), failures(dep, 20)); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range sideA[:2] {
		trip(i, "payments")
	}
	for _, i := range sideB[:2] {
		trip(i, "shipping")
	}
	everyone(sideA, "side A opened payments", 1, func(i int) int { return generation(i, "payments") })
	everyone(sideB, "side B opened shipping", 1, func(i int) int { return generation(i, "shipping") })
	everyone(sideB, "side B knows nothing of payments", 0, func(i int) int { return generation(i, "payments") })

	l.cut(sideA, sideB, true)
	healed := time.Now()
	everyone(all, "one membership after the heal", n, members)
	everyone(all, "payments agreed everywhere", 1, func(i int) int { return generation(i, "payments") })
	everyone(all, "shipping agreed everywhere", 1, func(i int) int { return generation(i, "shipping") })
	t.Logf("converged %v after the heal (membership and both records)", time.Since(healed).Round(10*time.Millisecond))
}
