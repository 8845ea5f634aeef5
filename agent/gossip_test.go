package agent

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func reportSuccesses(t *testing.T, a *Agent, dep string, n uint32) {
	t.Helper()
	_, err := dial(t, a).Report(ctxT(t, 5*time.Second), &fuseboxv1.ReportRequest{Outcomes: []*fuseboxv1.OutcomeReport{{
		Dependency: dep, Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_SUCCESS, Count: n}}})
	if err != nil {
		t.Fatal(err)
	}
}

// An agent killed without leaving: its rows stop counting. An agent that
// joins later learns the current breaker records through push-pull.
func TestKilledAgentAndLateJoiner(t *testing.T) {
	f := newFleet(t, 4, false)
	const dep = "inventory"
	for _, a := range f.agents[:3] {
		reportSuccesses(t, a.Agent, dep, 5)
	}
	fleetNodes := func(a *testAgent) int {
		ft, _ := a.eng.Fleet(dep)
		return ft.FleetNodes
	}
	sstest.Eventually(t, 10*time.Second, "agent 0 counts 3 nodes", func() bool { return fleetNodes(f.agents[0]) == 3 })

	f.agents[2].crash()
	start := time.Now()
	sstest.Eventually(t, 10*time.Second, "the killed agent's rows stop counting", func() bool {
		return fleetNodes(f.agents[0]) == 2 && fleetNodes(f.agents[1]) == 2
	})
	t.Logf("killed agent's rows dropped after %v", time.Since(start))

	// Open a breaker, then let a new agent join: push-pull brings the record.
	const broken = "payments"
	for _, a := range f.agents[:2] {
		if _, err := dial(t, a.Agent).Report(ctxT(t, 5*time.Second), failures(broken, 10)); err != nil {
			t.Fatal(err)
		}
	}
	hasOpen := func(a *testAgent) bool {
		for _, r := range a.eng.Records() {
			if r.Dependency == broken && r.State == sharedstate.Open {
				return true
			}
		}
		return false
	}
	sstest.Eventually(t, 10*time.Second, "breaker open on the running agents", func() bool {
		return hasOpen(f.agents[0]) && hasOpen(f.agents[1]) && hasOpen(f.agents[3])
	})
	late := f.add("agent-late")
	start = time.Now()
	sstest.Eventually(t, 10*time.Second, "the late joiner holds the open record", func() bool { return hasOpen(late) })
	t.Logf("late joiner learned the record after %v", time.Since(start))
	if s := late.eng.Snapshot(broken); s == nil || s.State == sharedstate.Closed {
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

	cfgA := testConfig(t, "keyed-a")
	cfgA.KeyringFile = writeKeyring(t, k1)
	a := startAgent(t, cfgA)

	cfgB := testConfig(t, "wrong-key")
	cfgB.KeyringFile = writeKeyring(t, k2)
	cfgB.Join = []string{a.GossipAddr()}
	b := startAgent(t, cfgB)
	sstest.Eventually(t, 10*time.Second, "the wrong-key agent logs its failed join", func() bool {
		return strings.Contains(b.log.String(), "gossip join failed")
	})
	logB := b.log.String()
	if !strings.Contains(logB, "keyring") || !strings.Contains(logB, "could decrypt") {
		t.Errorf("the failed join does not say that the keys differ:\n%s", logB)
	}
	if a.gossip.NumAgents() != 1 || b.gossip.NumAgents() != 1 {
		t.Fatalf("members: a sees %d, b sees %d; want 1 each", a.gossip.NumAgents(), b.gossip.NumAgents())
	}
	if b.Ready() {
		t.Error("the wrong-key agent is ready though its --join failed")
	}

	// Rotation, first step: c has added a new key (k2) after the cluster's
	// primary k1; it sends with k1 and accepts both.
	cfgC := testConfig(t, "rotating")
	cfgC.KeyringFile = writeKeyring(t, k1, k2)
	cfgC.Join = []string{a.GossipAddr()}
	c := startAgent(t, cfgC)
	sstest.Eventually(t, 10*time.Second, "an agent holding the cluster's key joins", func() bool {
		return a.gossip.NumAgents() == 2 && c.gossip.NumAgents() == 2
	})
	sstest.Eventually(t, 10*time.Second, "the joined agent is ready", c.Ready)

	// Rotation, second step, without restarts: a and c promote k2. Then an
	// agent that knows only k2 joins, and a and c drop k1.
	for _, cfg := range []Config{cfgA, cfgC} {
		if err := os.WriteFile(cfg.KeyringFile, []byte(base64.StdEncoding.EncodeToString(k2)+"\n"+base64.StdEncoding.EncodeToString(k1)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sstest.Eventually(t, 10*time.Second, "a and c use k2", func() bool {
		return string(a.keyring.GetPrimaryKey()) == string(k2) && string(c.keyring.GetPrimaryKey()) == string(k2)
	})
	cfgD := testConfig(t, "new-key-only")
	cfgD.KeyringFile = writeKeyring(t, k2)
	cfgD.Join = []string{a.GossipAddr()}
	d := startAgent(t, cfgD)
	sstest.Eventually(t, 10*time.Second, "an agent with only the new key joins", func() bool { return d.gossip.NumAgents() >= 3 })
	for _, cfg := range []Config{cfgA, cfgC} {
		if err := os.WriteFile(cfg.KeyringFile, []byte(base64.StdEncoding.EncodeToString(k2)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sstest.Eventually(t, 10*time.Second, "a and c dropped k1", func() bool {
		return len(a.keyring.GetKeys()) == 1 && len(c.keyring.GetKeys()) == 1
	})
	// Gossip still flows: a record proposed on a reaches d.
	reportSuccesses(t, a.Agent, "after-rotation", 1)
	sstest.Eventually(t, 10*time.Second, "rows flow after the rotation", func() bool {
		ft, _ := d.eng.Fleet("after-rotation")
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
	f := newFleet(t, 2, false)
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
	if _, err := obs.Join([]string{f.agents[0].GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "agents see the observer", func() bool { return len(f.agents[1].gossip.Members()) == 3 })
	for _, a := range f.agents {
		if n := a.gossip.NumAgents(); n != 2 {
			t.Errorf("%s counts %d agents with an observer present, want 2", a.Name(), n)
		}
	}
	for _, a := range f.agents {
		if _, err := dial(t, a.Agent).Report(ctxT(t, 5*time.Second), failures("observed", 10)); err != nil {
			t.Fatal(err)
		}
	}
	sstest.Eventually(t, 10*time.Second, "the observer hears both agents' rows and the breaker record", func() bool {
		rows, records := rec.seen()
		return rows >= 2 && records >= 1
	})
	sstest.Eventually(t, 10*time.Second, "both agents count both agents", func() bool {
		for _, a := range f.agents {
			if ft, _ := a.eng.Fleet("observed"); ft.FleetNodes != 2 {
				return false
			}
		}
		return true
	})
	for _, a := range f.agents {
		for _, m := range a.gossip.Members() {
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
	f := newFleetWith(t, 2, false, func(c *Config) {
		c.GossipInterval, c.ProbeInterval, c.PushPullInterval = time.Hour, time.Hour, time.Hour
	})
	const dep = "inventory"
	_, err := dial(t, f.agents[1].Agent).Report(ctxT(t, 5*time.Second), &fuseboxv1.ReportRequest{Outcomes: []*fuseboxv1.OutcomeReport{{
		Dependency: dep, Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_FAILURE, Count: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "agent-0 holds agent-1's row with the fresh failures", func() bool {
		for _, r := range f.agents[0].eng.Rows(dep) {
			if r.Node == "agent-1" && r.Recent[0].Failures == 3 {
				return true
			}
		}
		return false
	})
}

// Gossip rows and records are validated in one place, the engine's merge:
// the handler converts and hands both over, and a malformed one of each
// is refused there (the engine counts it) and reported as invalid.
func TestGossipItemsValidatedByTheEngine(t *testing.T) {
	a := startAgent(t, testConfig(t, "validator"))
	before := a.eng.Stats()
	_, refused := (*gossipHandler)(a.Agent).ApplyBatch(&fuseboxv1.GossipBatch{
		Rows: []*fuseboxv1.NodeWindow{{Node: "peer", Dependency: "bad name!", Seq: 1}},
		Records: []*fuseboxv1.BreakerRecord{{Dependency: "d", Generation: 1, Origin: "peer",
			State: fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN}}, // records never carry half-open
	})
	after := a.eng.Stats()
	if refused != 2 || after.InvalidRows != before.InvalidRows+1 || after.InvalidRecords != before.InvalidRecords+1 {
		t.Fatalf("refused %d; engine counted %d invalid rows and %d invalid records more, want 2, 1 and 1", refused,
			after.InvalidRows-before.InvalidRows, after.InvalidRecords-before.InvalidRecords)
	}
	if a.eng.Snapshot("d") != nil {
		t.Fatal("a refused record left a dependency behind")
	}
}
