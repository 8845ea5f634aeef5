package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// policyWrite is one `fuseboxctl policy set` run by the writer loop.
type policyWrite struct {
	name     string
	at       time.Time // when it ended
	ok       bool
	revision int64
	out      string
}

// TestWritesAndWatchesSurviveEtcdLeaderLoss: a coordinator and three
// agents on a 3-member etcd cluster, each given all three endpoints (the
// leader's first, so a component that used only the first would be lost
// with it). `fuseboxctl policy set` writes one new policy after another
// while the leader is killed. fuseboxctl writes succeed again within a
// generous deadline, and those that fail say etcd was unavailable;
// afterwards every successful write is in etcd with
// exactly one audit entry, and every policy etcd holds — those written
// right after the kill included — is enforced by every agent and shown by
// the coordinator: an agent whose watch died with the leader, or skipped a
// revision while resuming, would lack one.
func TestWritesAndWatchesSurviveEtcdLeaderLoss(t *testing.T) {
	cl := embeddedtest.StartCluster(t, 3)
	leader := cl.WaitLeader(t, 10*time.Second)
	f := startCoordinator(t, setup{etcd: cl.EndpointsFirst(leader)})
	c := f.Coordinator()
	agents := startAgents(t, f, 3)
	for i, a := range agents {
		sstest.Eventually(t, 15*time.Second, a.Name()+" to sync policies from etcd", func() bool {
			return f.Metric(t, i, "fusebox_agent_etcd_synced") == 1
		})
	}

	// The writer: one fuseboxctl run after another, each a new policy.
	ctlPath := ctlBinary(t)
	var (
		mu     sync.Mutex
		writes []policyWrite
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("ha-%03d", i)
			w := runPolicySet(ctlPath, c.GRPCAddr(), name, `{"breaker": {"mode": "shadow"}}`)
			mu.Lock()
			writes = append(writes, w)
			mu.Unlock()
		}
	}()
	stopWriter := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		timer := time.NewTimer(time.Minute)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			t.Fatal("the writer did not stop within a minute")
		}
	}
	t.Cleanup(stopWriter)
	// succeeded counts the successful writes that ended after after, and
	// says when the first of them ended.
	succeeded := func(after time.Time) (n int, first time.Time) {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range writes {
			if w.ok && w.at.After(after) {
				if n == 0 {
					first = w.at
				}
				n++
			}
		}
		return n, first
	}

	sstest.Eventually(t, 30*time.Second, "3 fuseboxctl writes before the kill", func() bool {
		n, _ := succeeded(time.Time{})
		return n >= 3
	})
	if now := cl.WaitLeader(t, 10*time.Second); now != leader {
		t.Logf("leadership moved from member %d to %d before the kill", leader, now)
		leader = now
	}
	killing := time.Now()
	cl.Kill(leader)
	killed := time.Now() // writes that ended after this ran without the old leader
	// Generous: an election takes ~100 ms here, a write ~1 s at worst on a
	// loaded machine.
	sstest.Eventually(t, 20*time.Second, "a fuseboxctl write to succeed after the leader was killed", func() bool {
		n, _ := succeeded(killed)
		return n >= 1
	})
	_, first := succeeded(killed)
	t.Logf("killed member %d in %v; the first fuseboxctl write after it succeeded %v later",
		leader, killed.Sub(killing), first.Sub(killed))
	sstest.Eventually(t, 30*time.Second, "5 fuseboxctl writes after the kill", func() bool {
		n, _ := succeeded(killed)
		return n >= 5
	})
	stopWriter()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.New(store.Config{Client: cl.Client(t), Prefix: coordinator.DefaultEtcdPrefix})
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := st.ListPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inEtcd := map[string]int64{}
	for _, e := range entries {
		inEtcd[e.Name] = e.ModRevision
	}
	failed := 0
	for _, w := range writes {
		if !w.ok {
			// Its outcome is unknown to the caller, and it must say so: etcd
			// unavailable, try again — never an internal error.
			failed++
			t.Logf("write of %s failed (etcd has it: %v): %s", w.name, inEtcd[w.name] != 0, w.out)
			if !strings.Contains(w.out, "Unavailable") && !strings.Contains(w.out, "DeadlineExceeded") {
				t.Errorf("write of %s failed without saying that etcd was unavailable: %s", w.name, w.out)
			}
			continue
		}
		if inEtcd[w.name] != w.revision {
			t.Errorf("%s written at revision %d, etcd has revision %d", w.name, w.revision, inEtcd[w.name])
		}
	}
	t.Logf("%d fuseboxctl writes, %d failed, %d policies in etcd", len(writes), failed, len(inEtcd))

	// Exactly one audit entry per policy in etcd, newest first.
	r := ctl(t, c, nil, "audit", "--limit", "1000", "-o", "json")
	r.want(t, 0, nil, nil)
	var audit struct {
		Entries []auditDoc `json:"entries"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &audit); err != nil {
		t.Fatalf("audit -o json: %v: %s", err, r.stdout)
	}
	perDep := map[string]int{}
	for i, e := range audit.Entries {
		perDep[e.Dependency]++
		if e.Action != "policy.put" {
			t.Errorf("audit entry %+v: want only policy.put", e)
		}
		if i > 0 && e.Revision >= audit.Entries[i-1].Revision {
			t.Errorf("audit entries out of order: revision %d after %d", e.Revision, audit.Entries[i-1].Revision)
		}
	}
	for name := range inEtcd {
		if perDep[name] != 1 {
			t.Errorf("%s has %d audit entries, want 1", name, perDep[name])
		}
	}
	if len(perDep) != len(inEtcd) {
		t.Errorf("audit entries for %d dependencies, etcd holds %d policies", len(perDep), len(inEtcd))
	}

	// Every agent and the coordinator follow etcd: every policy, in
	// particular those written after the kill.
	admin := adminClient(t, c.GRPCAddr(), "")
	lacking := func() string { // who lacks which policy, "" when nobody
		for _, a := range agents {
			for name := range inEtcd {
				if a.Engine().Policy(name).Breaker.Mode != sharedstate.ModeShadow {
					return a.Name() + " lacks " + name
				}
			}
		}
		snap, err := admin.GetFleet(ctx, &fuseboxv1.GetFleetRequest{})
		if err != nil {
			return "the coordinator's fleet view: " + err.Error()
		}
		shadow := map[string]bool{}
		for _, d := range snap.GetDependencies() {
			shadow[d.GetDependency()] = d.GetMode() == fuseboxv1.Mode_MODE_SHADOW
		}
		for name := range inEtcd {
			if !shadow[name] {
				return "the coordinator lacks " + name
			}
		}
		return ""
	}
	// The agents' registrations (on leases) outlive the leader too, or are
	// made again.
	sstest.Eventually(t, 20*time.Second, "the three agents to be registered in etcd", func() bool {
		members, _, err := st.ListMembers(ctx)
		agentsSeen := 0
		for _, m := range members {
			if m.Member.Role == string(gossip.RoleAgent) {
				agentsSeen++
			}
		}
		return err == nil && agentsSeen == 3
	})
	sstest.EventuallyNoError(t, 20*time.Second, "every agent and the coordinator to follow etcd", func() error {
		if miss := lacking(); miss != "" {
			return errors.New(miss)
		}
		return nil
	})
	// A leader killed is no rewind: etcd kept its history.
	for i, a := range agents {
		if n := counterSum(t, f.Fleet, i, "fusebox_agent_etcd_rewinds_total"); n != 0 {
			t.Errorf("%s counted %v etcd rewinds after a leader kill, want 0", a.Name(), n)
		}
	}
	m := grepLines(scrape(t, c), "fusebox_coordinator_etcd_rewinds_total{")
	for _, l := range strings.Split(m, "\n") {
		if !strings.HasSuffix(l, "} 0") {
			t.Errorf("the coordinator's rewinds after a leader kill:\n%s\nwant every reason at 0", m)
			break
		}
	}
}

// runPolicySet runs `fuseboxctl policy set NAME -f -` (bin) against the
// coordinator at addr with the policy doc on stdin. It may run on any
// goroutine (it never fails the test).
func runPolicySet(bin, addr, name, doc string) policyWrite {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "policy", "set", "--yes", name, "-f", "-", "-o", "json")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "USER=tester", "FUSEBOX_COORDINATOR=" + addr}
	cmd.Stdin = strings.NewReader(doc)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	w := policyWrite{name: name, at: time.Now(), out: out.String()}
	if err != nil {
		return w
	}
	var e policyDoc
	if json.Unmarshal(out.Bytes(), &e) != nil || e.ModRevision == 0 {
		return w
	}
	w.ok, w.revision = true, e.ModRevision
	return w
}

// counterSum is the sum of every series of the counter name of agent i.
func counterSum(t *testing.T, f *fleet.Fleet, i int, name string) float64 {
	t.Helper()
	m, err := f.Metrics(context.Background(), i)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	if mf := m[name]; mf != nil {
		for _, s := range mf.GetMetric() {
			sum += s.GetCounter().GetValue()
		}
	}
	return sum
}

// scrape returns the coordinator's /metrics.
func scrape(t *testing.T, co *coordinator.Coordinator) string {
	t.Helper()
	resp, err := http.Get("http://" + co.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
