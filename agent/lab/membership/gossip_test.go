package membership

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// An agent killed without leaving: its rows stop counting. An agent that
// joins later learns the current breaker records through push-pull.
func TestKilledAgentAndLateJoiner(t *testing.T) {
	f := start(t, 4, false, nil)
	const dep = "inventory"
	for i := range 3 {
		fleettest.Report(t, f.Client(i), dep, 5, 0)
	}
	a0, a1, a3 := f.Agent(0), f.Agent(1), f.Agent(3)
	fleetNodes := func(a *agent.Agent) int {
		ft, _ := a.Engine().Fleet(dep)
		return ft.FleetNodes
	}
	sstest.Eventually(t, 10*time.Second, "agent 0 counts 3 nodes", func() bool { return fleetNodes(a0) == 3 })

	f.Crash(2)
	start := time.Now()
	sstest.Eventually(t, 10*time.Second, "the killed agent's rows stop counting", func() bool {
		return fleetNodes(a0) == 2 && fleetNodes(a1) == 2
	})
	t.Logf("killed agent's rows dropped after %v", time.Since(start))

	// Open a breaker, then let a new agent join: push-pull brings the record.
	const broken = "payments"
	for i := range 2 {
		fleettest.Report(t, f.Client(i), broken, 0, 10)
	}
	hasOpen := func(a *agent.Agent) bool {
		for _, r := range a.Engine().Records() {
			if r.Dependency == broken && r.State == sharedstate.Open {
				return true
			}
		}
		return false
	}
	sstest.Eventually(t, 10*time.Second, "breaker open on the running agents", func() bool {
		return hasOpen(a0) && hasOpen(a1) && hasOpen(a3)
	})
	i, err := f.Add(fleettest.Ctx(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	late := f.Agent(i)
	start = time.Now()
	sstest.Eventually(t, 10*time.Second, "the late joiner holds the open record", func() bool { return hasOpen(late) })
	t.Logf("late joiner learned the record after %v", time.Since(start))
	if s := late.Engine().Snapshot(broken); s == nil || s.State == sharedstate.Closed {
		t.Fatalf("late joiner's snapshot: %+v, want open or half-open", s)
	}
}

func writeKeyring(t *testing.T, keys ...[]byte) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# test keyring\n")
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	p := filepath.Join(t.TempDir(), "keyring")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// An agent with the wrong gossip key cannot join and says why in its log;
// one that sends with the cluster's key and also holds a new one (the first
// step of a rotation) can.
func TestGossipKeyring(t *testing.T) {
	k1 := []byte("0123456789abcdef0123456789abcdef")
	k2 := []byte("fedcba9876543210fedcba9876543210")
	// Agent 0 holds the cluster's key, agent 1 the wrong one, agent 2 both
	// (rotating), agent 3 only the new one; each joins agent 0.
	keyrings := []string{writeKeyring(t, k1), writeKeyring(t, k2), writeKeyring(t, k1, k2), writeKeyring(t, k2)}
	f := fleettest.Start(t, fleet.Config{N: 1, Seeds: 1,
		Options: fleettest.Own(agent.WithDefaultPolicy(fleettest.Policy())),
		Tune: func(i int, c *agent.Config) {
			fleet.Quick(c)
			c.KeyringFile, c.KeyringReloadInterval = keyrings[i], 50*time.Millisecond
		}})
	ctx := fleettest.Ctx(t, time.Minute)
	add := func() (int, *agent.Agent) {
		t.Helper()
		i, err := f.Add(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return i, f.Agent(i)
	}
	keys := func(i int) [][]byte { return f.Inside(i).GossipKeys() }
	a := f.Agent(0)

	ib, b := add()
	sstest.Eventually(t, 10*time.Second, "the wrong-key agent logs its failed join", func() bool {
		return strings.Contains(f.Log(ib), "gossip join failed")
	})
	logB := f.Log(ib)
	if !strings.Contains(logB, "keyring") || !strings.Contains(logB, "could decrypt") {
		t.Errorf("the failed join does not say that the keys differ:\n%s", logB)
	}
	if a.Gossip().NumAgents() != 1 || b.Gossip().NumAgents() != 1 {
		t.Fatalf("members: a sees %d, b sees %d; want 1 each", a.Gossip().NumAgents(), b.Gossip().NumAgents())
	}
	if b.Ready() {
		t.Error("the wrong-key agent is ready though its --join failed")
	}

	// Rotation, first step: c has added a new key (k2) after the cluster's
	// primary k1; it sends with k1 and accepts both.
	ic, c := add()
	sstest.Eventually(t, 10*time.Second, "an agent holding the cluster's key joins", func() bool {
		return a.Gossip().NumAgents() == 2 && c.Gossip().NumAgents() == 2
	})
	sstest.Eventually(t, 10*time.Second, "the joined agent is ready", c.Ready)

	// Rotation, second step, without restarts: a and c promote k2. Then an
	// agent that knows only k2 joins, and a and c drop k1.
	for _, i := range []int{0, ic} {
		if err := os.WriteFile(keyrings[i], []byte(base64.StdEncoding.EncodeToString(k2)+"\n"+base64.StdEncoding.EncodeToString(k1)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sstest.Eventually(t, 10*time.Second, "a and c use k2", func() bool {
		return string(keys(0)[0]) == string(k2) && string(keys(ic)[0]) == string(k2)
	})
	_, d := add()
	sstest.Eventually(t, 10*time.Second, "an agent with only the new key joins", func() bool { return d.Gossip().NumAgents() >= 3 })
	for _, i := range []int{0, ic} {
		if err := os.WriteFile(keyrings[i], []byte(base64.StdEncoding.EncodeToString(k2)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sstest.Eventually(t, 10*time.Second, "a and c dropped k1", func() bool {
		return len(keys(0)) == 1 && len(keys(ic)) == 1
	})
	// Gossip still flows: a record proposed on a reaches d.
	fleettest.Report(t, f.Client(0), "after-rotation", 1, 0)
	sstest.Eventually(t, 10*time.Second, "rows flow after the rotation", func() bool {
		ft, _ := d.Engine().Fleet("after-rotation")
		return ft.FleetNodes >= 1 && ft.Fleet.Successes == 1
	})
}

// recorder is an observer's gossip.Handler: it keeps what it hears.
type recorder struct {
	mu      sync.Mutex
	rows    map[string]uint64 // node/dependency -> seq
	records map[string]uint64 // dependency -> generation
}

func (r *recorder) ApplyBatch(b *fuseboxv1.GossipBatch) (*fuseboxv1.GossipBatch, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range b.GetRows() {
		r.rows[w.GetNode()+"/"+w.GetDependency()] = w.GetSeq()
	}
	for _, rec := range b.GetRecords() {
		r.records[rec.GetDependency()] = max(r.records[rec.GetDependency()], rec.GetGeneration())
	}
	return nil, 0
}

func (r *recorder) ApplyState(s *fuseboxv1.PushPullState, join bool) (*fuseboxv1.GossipBatch, int) {
	return r.ApplyBatch(&fuseboxv1.GossipBatch{Rows: s.GetRows(), Records: s.GetRecords()})
}

func (r *recorder) LocalState(bool) *fuseboxv1.PushPullState { return nil }

func (r *recorder) seen() (rows, records int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.rows), len(r.records)
}

// A fleet observer (the coordinator's) reuses Gossip in role observer: it
// hears rows and records, and agents never count it.
func TestObserverGossip(t *testing.T) {
	f := start(t, 2, false, nil)
	agents := f.Agents()
	rec := &recorder{rows: map[string]uint64{}, records: map[string]uint64{}}
	gc := gossip.DefaultConfig()
	gc.Name, gc.BindAddr = "observer-1", "127.0.0.1:0"
	gc.Meta = gossip.NodeMeta{Role: gossip.RoleObserver, Software: "test"}
	gc.Handler = rec
	gc.GossipInterval, gc.ProbeInterval, gc.PushPullInterval = 50*time.Millisecond, 200*time.Millisecond, time.Second
	obs, err := gossip.New(gc)
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close(time.Second)
	if _, err := obs.Join([]string{f.Addr(0)}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "agents see the observer", func() bool { return len(agents[1].Gossip().Members()) == 3 })
	for _, a := range agents {
		if n := a.Gossip().NumAgents(); n != 2 {
			t.Errorf("%s counts %d agents with an observer present, want 2", a.Name(), n)
		}
	}
	for i := range agents {
		fleettest.Report(t, f.Client(i), "observed", 0, 10)
	}
	sstest.Eventually(t, 10*time.Second, "the observer hears both agents' rows and the breaker record", func() bool {
		rows, records := rec.seen()
		return rows >= 2 && records >= 1
	})
	sstest.Eventually(t, 10*time.Second, "both agents count both agents", func() bool {
		for _, a := range agents {
			if ft, _ := a.Engine().Fleet("observed"); ft.FleetNodes != 2 {
				return false
			}
		}
		return true
	})
	for _, a := range agents {
		for _, m := range a.Gossip().Members() {
			if m.Name == "observer-1" && (m.Meta.IsAgent() || m.Meta.Role != gossip.RoleObserver) {
				t.Errorf("%s sees the observer as %+v", a.Name(), m.Meta)
			}
		}
	}
}

// A failure burst at one agent reaches the others straight away (an urgent
// row sent to every member), not at the next gossip round: here gossip,
// probes and push-pull are an hour apart, so nothing else could carry it.
func TestUrgentRowsGoStraightToEveryMember(t *testing.T) {
	f := start(t, 2, false, func(_ int, c *agent.Config) {
		c.GossipInterval, c.ProbeInterval, c.PushPullInterval = time.Hour, time.Hour, time.Hour
	})
	const dep = "inventory"
	fleettest.Report(t, f.Client(1), dep, 0, 3)
	sstest.Eventually(t, 10*time.Second, "agent 0 holds agent 1's row with the fresh failures", func() bool {
		for _, r := range f.Agent(0).Engine().Rows(dep) {
			if r.Node == fleet.Name(1) && r.Recent[0].Failures == 3 {
				return true
			}
		}
		return false
	})
}
