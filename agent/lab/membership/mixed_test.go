package membership

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// releaseFile names the last release: its tag and commit (in the
// repository).
const releaseFile = "protocol/testdata/release"

// buildRelease builds the last release's fusebox-agent from git (the tag,
// or the commit recorded in releaseFile for a clone without tags) into dir.
// It skips the test only when the clone is shallow and lacks the commit.
func buildRelease(t *testing.T, dir string) (bin, version string) {
	t.Helper()
	root, err := fleet.ModuleRoot(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, releaseFile))
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
	top, err := git("-C", root, "rev-parse", "--show-toplevel")
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

// sum adds the values of agent i's series of name whose labels include
// the given name, value pairs (-1 when its /metrics cannot be read).
func sum(t *testing.T, f *fleettest.Fleet, i int, name string, labels ...string) float64 {
	t.Helper()
	m, err := f.Metrics(context.Background(), i)
	if err != nil {
		return -1
	}
	mf := m[name]
	if mf == nil {
		return 0
	}
	total := 0.0
next:
	for _, s := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range s.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for j := 0; j+1 < len(labels); j += 2 {
			if have[labels[j]] != labels[j+1] {
				continue next
			}
		}
		switch {
		case s.GetGauge() != nil:
			total += s.GetGauge().GetValue()
		case s.GetCounter() != nil:
			total += s.GetCounter().GetValue()
		case s.GetUntyped() != nil:
			total += s.GetUntyped().GetValue()
		}
	}
	return total
}

// traffic reports, every 100 ms until stop, ok successes and bad failures
// of each dependency to each of the agents idx.
func traffic(f *fleettest.Fleet, idx []int, deps []string, ok, bad uint32) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, i := range idx {
		c := f.Client(i)
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
				_, _ = c.Report(rctx, req)
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

// rejects says whether agent i refuses a first attempt to dep.
func rejects(f *fleettest.Fleet, i int, dep string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d, err := f.Client(i).Check(ctx, &fuseboxv1.CheckRequest{Dependency: dep, Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST})
	return err == nil && d.GetVerdict() == fuseboxv1.Verdict_VERDICT_REJECT
}

// A rolling upgrade from the last release: two agent processes of the
// release (built from its git tag) and two of this build, on one embedded etcd,
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
	dir := t.TempDir()
	oldBin, oldVersion := buildRelease(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bins, err := fleet.Build(ctx, dir, false, "fusebox-agent")
	if err != nil {
		t.Fatal(err)
	}
	old := func(i int) bool { return i%2 == 0 } // agents 0 and 2 run the release
	f := fleettest.Start(t, fleet.Config{N: 0, Etcd: true, Binary: bins[0], Seeds: 1,
		BinaryOf: func(i int) string {
			if old(i) {
				return oldBin
			}
			return ""
		},
		Tune: func(i int, c *agent.Config) {
			c.Name = fmt.Sprintf("agent-%d", i)
			// Only flags the release knows: the first rank alone proposes
			// (the test knows who).
			c.Proposers, c.ProposerDelay = 1, time.Minute
			c.GossipInterval, c.PushPullInterval, c.ProbeInterval = 100*time.Millisecond, 2*time.Second, 500*time.Millisecond
			c.TickInterval, c.RejoinInterval, c.MemberTTL = 50*time.Millisecond, 500*time.Millisecond, 2*time.Second
		}})

	st, err := store.New(store.Config{Client: embeddedtest.Client(t, f.EtcdServer())})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	// The release's default policy with a 4 s window and no half-open while
	// the test watches, spelled out: the release decodes policies strictly,
	// so the fields must be the ones it knows.
	if _, err := st.PutPolicy(wctx, sharedstate.DefaultPolicyName, []byte(`{"schema":1,"dependency":"_default",
		"breaker":{"failureRateThreshold":0.5,"slowCallRateThreshold":1,"slowCallDuration":"2s","minimumRequests":20,
			"minFailingNodes":2,"window":"4s","openDuration":"10m","maxOpenDuration":"10m","halfOpenProbes":3,
			"probeSuccessThreshold":3,"probeTimeout":"5s","scope":"fleet","mode":"enforce","confidence":0.95,"fastPath":true},
		"retry":{"maxAttempts":3,"perAttemptTimeout":"500ms","backoff":{"base":"100ms","max":"5s","jitter":"full"},
			"budget":{"ratio":0.1,"minRetriesPerSecond":10},"hedge":{"delay":"0s","maxHedges":0}},
		"throttle":{"enabled":false,"k":2,"minRequests":20},"concurrency":{"maxInFlight":0}}`), store.WriteOptions{Actor: "test"}); err != nil {
		t.Fatal(err)
	}

	// Every agent joins agent-0 (Seeds 1).
	var names []string
	var idx []int
	for range 4 {
		i, err := f.Add(ctx)
		if err != nil {
			t.Fatal(err)
		}
		idx = append(idx, i)
		names = append(names, fmt.Sprintf("agent-%d", i))
	}
	sstest.Eventually(t, 60*time.Second, "every agent sees four agents and runs the written policy", func() bool {
		for _, i := range idx {
			if sum(t, f, i, "fusebox_agent_members", "role", "agent", "state", "alive") != 4 || sum(t, f, i, "fusebox_agent_policy_source", "source", "etcd") != 1 {
				return false
			}
		}
		return true
	})
	for _, i := range idx {
		want := agent.Version
		if old(i) {
			want = oldVersion
		}
		if sum(t, f, i, "fusebox_agent_info", "version", want) != 1 {
			t.Fatalf("%s does not say it is version %s", names[i], want)
		}
		if !old(i) {
			if v := sum(t, f, i, "fusebox_agent_gossip_wire_version"); v != float64(protocol.Version1) {
				t.Fatalf("%s sends frame version %v beside release agents, want 1", names[i], v)
			}
			if v := sum(t, f, i, "fusebox_agent_gossip_member_wire_versions", "wire", "1"); v != 2 {
				t.Fatalf("%s sees %v members speaking version 1 only, want the 2 release agents", names[i], v)
			}
		}
	}

	// 10% failures from every agent, for three windows: nothing opens.
	stop := traffic(f, idx, []string{"steady"}, 18, 2)
	poll := time.NewTicker(200 * time.Millisecond) // watching for a state that must never come
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); <-poll.C {
		for _, i := range idx {
			if rejects(f, i, "steady") {
				stop()
				t.Fatalf("%s rejects a dependency at 10%% failures", names[i])
			}
		}
	}
	poll.Stop()
	stop()
	for _, i := range idx {
		if n := sum(t, f, i, "fusebox_agent_breaker_transitions_total", "dependency", "steady", "to", "open"); n != 0 {
			t.Fatalf("%s saw %v transitions to open at 10%% failures", names[i], n)
		}
	}

	// Two trips at once: one whose (only) proposer is a release agent, one
	// whose proposer is this build's.
	pick := func(wantOld bool) string {
		for n := range 100 {
			dep := fmt.Sprintf("trip-%d", n)
			first := sharedstate.ProposerOrder(dep, 1, names)[0]
			for _, i := range idx {
				if names[i] == first && old(i) == wantOld {
					return dep
				}
			}
		}
		t.Fatal("no dependency name found")
		return ""
	}
	byOld, byNew := pick(true), pick(false)
	stop = traffic(f, idx, []string{byOld, byNew}, 0, 10)
	sstest.Eventually(t, 30*time.Second, "every agent rejects both tripped dependencies", func() bool {
		for _, i := range idx {
			if !rejects(f, i, byOld) || !rejects(f, i, byNew) {
				return false
			}
		}
		return true
	})
	stop()
	for _, dep := range []string{byOld, byNew} {
		first := sharedstate.ProposerOrder(dep, 1, names)[0]
		for _, i := range idx {
			self := sum(t, f, i, "fusebox_agent_breaker_transitions_total", "dependency", dep, "to", "open", "origin", "self")
			if (names[i] == first) != (self == 1) {
				t.Fatalf("%s: %s proposed %v times; the proposer should be %s alone", dep, names[i], self, first)
			}
		}
		t.Logf("%s proposed by %s and adopted by every other agent", dep, first)
	}
	noMisreads := func(idx []int) {
		t.Helper()
		for _, i := range idx {
			for _, r := range []string{"invalid_item", "malformed", "unknown_version", "unknown_type", "bad_signature", "truncated"} {
				if n := sum(t, f, i, "fusebox_agent_gossip_dropped_total", "reason", r); n != 0 {
					t.Errorf("%s dropped %v gossip items as %s", names[i], n, r)
				}
			}
		}
	}
	noMisreads(idx)

	// The release agents leave: this build's agents speak version 2, signed.
	f.Stop(0)
	f.Stop(2)
	news := []int{1, 3}
	sstest.Eventually(t, 30*time.Second, "this build's agents speak frame version 2", func() bool {
		for _, i := range news {
			if sum(t, f, i, "fusebox_agent_gossip_wire_version") != float64(protocol.Version2) {
				return false
			}
		}
		return true
	})
	verified := func() float64 { return sum(t, f, 1, "fusebox_agent_gossip_signatures_total", "op", "verify") }
	before := verified()
	stop = traffic(f, news, []string{"after"}, 0, 10)
	sstest.Eventually(t, 30*time.Second, "both reject a dependency that trips among them", func() bool {
		return rejects(f, 1, "after") && rejects(f, 3, "after")
	})
	stop()
	if after := verified(); after <= before {
		t.Fatalf("agent-1 verified no signature at version 2 (%v before, %v after)", before, after)
	}
	noMisreads(news)
}
