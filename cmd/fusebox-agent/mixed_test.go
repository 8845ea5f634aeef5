package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// releaseFile names the last release: its tag and commit.
const releaseFile = "../../protocol/testdata/release"

// buildRelease builds the last release's fusebox-agent from git (the tag,
// or the commit recorded in releaseFile for a clone without tags) into dir.
// It skips the test only when the clone is shallow and lacks the commit.
func buildRelease(t *testing.T, dir string) (bin, version string) {
	t.Helper()
	data, err := os.ReadFile(releaseFile)
	if err != nil {
		t.Fatal(err)
	}
	var tag, commit string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(line, "#") {
			tag, commit = f[0], f[1]
		}
	}
	if tag == "" {
		t.Fatalf("%s names no release", releaseFile)
	}
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	top, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		t.Skipf("not a git checkout (%v): cannot build release %s to run beside this build", err, tag)
	}
	rev, err := git("-C", top, "rev-parse", "--verify", "--quiet", tag+"^{commit}")
	if err != nil {
		if _, cerr := git("-C", top, "cat-file", "-e", commit+"^{commit}"); cerr != nil {
			if shallow, _ := git("-C", top, "rev-parse", "--is-shallow-repository"); shallow == "true" {
				t.Skipf("shallow clone without release %s (commit %s): `git fetch --unshallow --tags` to run this test", tag, commit)
			}
			t.Fatalf("release %s: neither the tag nor commit %s is in this clone", tag, commit)
		}
		rev = commit
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", top, "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	var archiveErr strings.Builder
	archive.Stderr = &archiveErr
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("untar %s: %v", rev, err)
	}
	bin = filepath.Join(dir, "fusebox-agent-"+tag)
	build := exec.Command("go", "build", "-o", bin, "./cmd/fusebox-agent")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off")
	start := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s (%s): %v\n%s", tag, rev, err, out)
	}
	t.Logf("built %s (%s) in %v", tag, rev[:12], time.Since(start).Round(time.Millisecond))
	return bin, strings.TrimPrefix(tag, "v")
}

// member is one agent process of the mixed fleet.
type member struct {
	name, bin string
	old       bool
	cmd       *exec.Cmd
	exited    chan struct{}
	log       *sstest.Buffer
	up        chan struct{}
	gossip    string
	http      string
	socket    string
	api       fuseboxv1.AgentClient
	conn      *grpc.ClientConn
}

func startMember(t *testing.T, m *member, dataDir string, etcd []string, join string) {
	t.Helper()
	args := []string{"--name", m.name, "--zone", "z1", "--data-dir", dataDir, "--gossip-addr", "127.0.0.1:0",
		"--socket", m.socket, "--http-addr", "127.0.0.1:0", "--etcd", strings.Join(etcd, ","),
		"--log-format", "json", "--log-level", "info",
		"--proposers", "1", "--proposer-delay", "1m", // the first rank alone proposes: the test knows who
		"--gossip-interval", "100ms", "--push-pull-interval", "2s", "--probe-interval", "500ms",
		"--tick-interval", "50ms", "--rejoin-interval", "500ms", "--member-ttl", "2s"}
	if join != "" {
		args = append(args, "--join", join)
	}
	m.cmd = exec.Command(m.bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FUSEBOX_") {
			m.cmd.Env = append(m.cmd.Env, kv)
		}
	}
	if !m.old {
		m.cmd.Env = append(m.cmd.Env, "FUSEBOX_AGENT_MAIN=1") // the test binary runs main
	}
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	m.log, m.up, m.exited = &sstest.Buffer{}, make(chan struct{}), make(chan struct{})
	stderr, err := m.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(m.exited)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		up := false
		for sc.Scan() {
			m.log.Write(append(sc.Bytes(), '\n'))
			var rec struct{ Msg, Gossip, HTTP string }
			if !up && json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "agent started" {
				m.gossip, m.http, up = rec.Gossip, rec.HTTP, true
				close(m.up)
			}
		}
		_ = m.cmd.Wait()
	}()
	t.Cleanup(func() { m.stop(t) })
	select {
	case <-m.up:
	case <-m.exited:
		t.Fatalf("%s exited at start:\n%s", m.name, m.log.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start:\n%s", m.name, m.log.String())
	}
	if m.conn, err = grpc.NewClient("unix://"+m.socket, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	m.api = fuseboxv1.NewAgentClient(m.conn)
}

// stop sends SIGTERM and waits for the exit (SIGKILL after 10 s).
func (m *member) stop(t *testing.T) {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	select {
	case <-m.exited:
	default:
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(10 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
	}
	if m.conn != nil {
		m.conn.Close()
		m.conn = nil
	}
	if t.Failed() {
		t.Logf("log of %s:\n%s", m.name, lastLines(m.log.String(), 40))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

var sampleRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// metrics returns the member's /metrics samples: name{labels} -> value.
func (m *member) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + m.http + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", m.name, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if s := sampleRe.FindStringSubmatch(sc.Text()); s != nil {
			v, _ := strconv.ParseFloat(s[3], 64)
			out[s[1]+s[2]] = v
		}
	}
	return out
}

// sum adds the samples of name whose labels contain every given label.
func sum(samples map[string]float64, name string, labels ...string) float64 {
	total := 0.0
	for k, v := range samples {
		if !strings.HasPrefix(k, name+"{") && k != name {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(k, l)
		}
		if ok {
			total += v
		}
	}
	return total
}

// traffic reports, every 100 ms until stop, ok successes and bad failures
// of each dependency to each member.
func traffic(t *testing.T, ms []*member, deps []string, ok, bad uint32) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				req := &fuseboxv1.ReportRequest{}
				for _, d := range deps {
					req.Outcomes = append(req.Outcomes,
						&fuseboxv1.OutcomeReport{Dependency: d, Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_SUCCESS, Count: ok},
						&fuseboxv1.OutcomeReport{Dependency: d, Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_FAILURE, Count: bad})
				}
				rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
				_, _ = m.api.Report(rctx, req)
				rcancel()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

func rejects(t *testing.T, m *member, dep string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d, err := m.api.Check(ctx, &fuseboxv1.CheckRequest{Dependency: dep, Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST})
	return err == nil && d.GetVerdict() == fuseboxv1.Verdict_VERDICT_REJECT
}

// A rolling upgrade from the last release: two agents of the release
// (built from its git tag) and two of this build, on one embedded etcd,
// gossiping over loopback. The fleet speaks frame version 1 while a
// release agent is alive (this build sends the release's plain items, and
// signs copies for its own kind); a dependency at 10% failures opens
// nowhere; a trip whose proposer is a release agent is adopted by this
// build's agents and one proposed by this build's agent by the release's;
// nobody refuses a frame or misreads an item (dropped invalid_item,
// malformed, unknown_version, bad_signature stay 0 everywhere). Once the
// release agents are gone, this build's agents speak version 2 and verify
// each other's signatures.
func TestMixedFleetWithLastRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the last release and runs four agent processes")
	}
	dir, err := os.MkdirTemp("", "fbmix")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	oldBin, oldVersion := buildRelease(t, dir)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	etcd := embeddedtest.Start(t)
	cli := embeddedtest.Client(t, etcd)
	st, err := store.New(store.Config{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The release's default policy with a 4 s window and no half-open while
	// the test watches, spelled out: the release decodes policies strictly,
	// so the fields must be the ones it knows.
	if _, err := st.PutPolicy(ctx, sharedstate.DefaultPolicyName, []byte(`{"schema":1,"dependency":"_default",
		"breaker":{"failureRateThreshold":0.5,"slowCallRateThreshold":1,"slowCallDuration":"2s","minimumRequests":20,
			"minFailingNodes":2,"window":"4s","openDuration":"10m","maxOpenDuration":"10m","halfOpenProbes":3,
			"probeSuccessThreshold":3,"probeTimeout":"5s","scope":"fleet","mode":"enforce","confidence":0.95,"fastPath":true},
		"retry":{"maxAttempts":3,"perAttemptTimeout":"500ms","backoff":{"base":"100ms","max":"5s","jitter":"full"},
			"budget":{"ratio":0.1,"minRetriesPerSecond":10},"hedge":{"delay":"0s","maxHedges":0}},
		"throttle":{"enabled":false,"k":2,"minRequests":20},"concurrency":{"maxInFlight":0}}`), store.WriteOptions{Actor: "test"}); err != nil {
		t.Fatal(err)
	}

	ms := []*member{
		{name: "agent-0", bin: oldBin, old: true}, {name: "agent-1", bin: self},
		{name: "agent-2", bin: oldBin, old: true}, {name: "agent-3", bin: self},
	}
	var names []string
	for i, m := range ms {
		m.socket = filepath.Join(dir, fmt.Sprintf("%d.sock", i))
		join := ""
		if i > 0 {
			join = ms[0].gossip
		}
		startMember(t, m, filepath.Join(dir, m.name), etcd.Endpoints(), join)
		names = append(names, m.name)
	}
	sstest.Eventually(t, 60*time.Second, "every agent sees four agents and runs the written policy", func() bool {
		for _, m := range ms {
			s := m.metrics(t)
			if sum(s, "fusebox_agent_members", `role="agent"`, `state="alive"`) != 4 || sum(s, "fusebox_agent_policy_source", `source="etcd"`) != 1 {
				return false
			}
		}
		return true
	})
	for _, m := range ms {
		s := m.metrics(t)
		want := agent.Version
		if m.old {
			want = oldVersion
		}
		if sum(s, "fusebox_agent_info", `version="`+want+`"`) != 1 {
			t.Fatalf("%s does not say it is version %s", m.name, want)
		}
		if !m.old {
			if v := sum(s, "fusebox_agent_gossip_wire_version"); v != float64(protocol.Version1) {
				t.Fatalf("%s sends frame version %v beside release agents, want 1", m.name, v)
			}
			if v := sum(s, "fusebox_agent_gossip_member_wire_versions", `wire="1"`); v != 2 {
				t.Fatalf("%s sees %v members speaking version 1 only, want the 2 release agents", m.name, v)
			}
		}
	}

	// 10% failures from every agent, for three windows: nothing opens.
	stop := traffic(t, ms, []string{"steady"}, 18, 2)
	poll := time.NewTicker(200 * time.Millisecond) // watching for a state that must never come
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); <-poll.C {
		for _, m := range ms {
			if rejects(t, m, "steady") {
				stop()
				t.Fatalf("%s rejects a dependency at 10%% failures", m.name)
			}
		}
	}
	poll.Stop()
	stop()
	for _, m := range ms {
		if n := sum(m.metrics(t), "fusebox_agent_breaker_transitions_total", `dependency="steady"`, `to="open"`); n != 0 {
			t.Fatalf("%s saw %v transitions to open at 10%% failures", m.name, n)
		}
	}

	// Two trips at once: one whose (only) proposer is a release agent, one
	// whose proposer is this build's.
	pick := func(old bool) string {
		for i := range 100 {
			dep := fmt.Sprintf("trip-%d", i)
			first := sharedstate.ProposerOrder(dep, 1, names)[0]
			for _, m := range ms {
				if m.name == first && m.old == old {
					return dep
				}
			}
		}
		t.Fatal("no dependency name found")
		return ""
	}
	byOld, byNew := pick(true), pick(false)
	stop = traffic(t, ms, []string{byOld, byNew}, 0, 10)
	sstest.Eventually(t, 30*time.Second, "every agent rejects both tripped dependencies", func() bool {
		for _, m := range ms {
			if !rejects(t, m, byOld) || !rejects(t, m, byNew) {
				return false
			}
		}
		return true
	})
	stop()
	for _, dep := range []string{byOld, byNew} {
		first := sharedstate.ProposerOrder(dep, 1, names)[0]
		for _, m := range ms {
			self := sum(m.metrics(t), "fusebox_agent_breaker_transitions_total", `dependency="`+dep+`"`, `to="open"`, `origin="self"`)
			if (m.name == first) != (self == 1) {
				t.Fatalf("%s: %s proposed %v times; the proposer should be %s alone", dep, m.name, self, first)
			}
		}
		t.Logf("%s proposed by %s and adopted by every other agent", dep, first)
	}
	noMisreads := func(ms []*member) {
		t.Helper()
		for _, m := range ms {
			s := m.metrics(t)
			for _, r := range []string{"invalid_item", "malformed", "unknown_version", "unknown_type", "bad_signature", "truncated"} {
				if n := sum(s, "fusebox_agent_gossip_dropped_total", `reason="`+r+`"`); n != 0 {
					t.Errorf("%s dropped %v gossip items as %s", m.name, n, r)
				}
			}
		}
	}
	noMisreads(ms)

	// The release agents leave: this build's agents speak version 2, signed.
	ms[0].stop(t)
	ms[2].stop(t)
	news := []*member{ms[1], ms[3]}
	sstest.Eventually(t, 30*time.Second, "this build's agents speak frame version 2", func() bool {
		for _, m := range news {
			if sum(m.metrics(t), "fusebox_agent_gossip_wire_version") != float64(protocol.Version2) {
				return false
			}
		}
		return true
	})
	verified := func() float64 { return sum(ms[1].metrics(t), "fusebox_agent_gossip_signatures_total", `op="verify"`) }
	before := verified()
	stop = traffic(t, news, []string{"after"}, 0, 10)
	sstest.Eventually(t, 30*time.Second, "both reject a dependency that trips among them", func() bool {
		return rejects(t, ms[1], "after") && rejects(t, ms[3], "after")
	})
	stop()
	if after := verified(); after <= before {
		t.Fatalf("agent-1 verified no signature at version 2 (%v before, %v after)", before, after)
	}
	noMisreads(news)
}
