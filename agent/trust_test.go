package agent

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// breakerState is what each agent holds, for "nothing changed" checks.
func breakerState(f *fleet) string {
	out := ""
	for _, a := range f.agents {
		out += fmt.Sprintf("%s: %d deps %v\n", a.Name(), a.eng.Stats().Dependencies, a.eng.Records())
	}
	return out
}

func dropped(f *fleet, reason string) (n uint64) {
	for _, a := range f.agents {
		n += a.gossip.Stats().Dropped[reason]
	}
	return n
}

// newStranger is a memberlist that never joined: what anyone who can reach
// the gossip port can run.
func newStranger(t *testing.T) *memberlist.Memberlist {
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort = "stranger", "127.0.0.1", 0
	mc.LogOutput = io.Discard
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ml.Shutdown() })
	return ml
}

// The attacks of issue 10 through the real UDP receive path: one forged
// packet from a non-member (the record at generation 2^64-1, open, since
// 2262; the same claiming a member as origin; 3,000 rows under an invented
// node name) changes no breaker and adds no dependency on any agent; only
// the dropped counter moves.
func TestForgedPacketsChangeNothing(t *testing.T) {
	f := newFleet(t, 3, false)
	before := breakerState(f)
	stranger := newStranger(t)
	var codec protocol.Codec
	send := func(to *testAgent, b *fuseboxv1.GossipBatch) {
		t.Helper()
		frame, err := codec.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := stranger.SendToAddress(memberlist.Address{Addr: to.GossipAddr(), Name: to.Name()}, frame); err != nil {
			t.Fatal(err)
		}
	}
	forged := func(origin string, gen uint64) *fuseboxv1.GossipBatch {
		return &fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{{
			Dependency: "payments", Generation: gen, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN,
			SinceUnixNano: math.MaxInt64, OpenCount: 1, Origin: origin, Reason: "forged"}}}
	}
	sent := 0
	for _, a := range f.agents {
		send(a, forged("anything", math.MaxUint64))
		send(a, forged("agent-1", 2)) // a member's name, from a stranger's address
		sent += 2                     // packets: the guard drops a stranger's user message whole
	}
	// 3,000 rows under an invented node name, 20 per packet.
	for i := 0; i < 3000; i += 20 {
		b := &fuseboxv1.GossipBatch{}
		for j := i; j < i+20; j++ {
			b.Rows = append(b.Rows, &fuseboxv1.NodeWindow{Node: "invented", Dependency: fmt.Sprintf("fake-%d", j), Seq: 1,
				Counts: &fuseboxv1.Counts{FirstAttempts: 100, Failures: 100}})
		}
		send(f.agents[i/20%3], b)
		sent++
	}
	sstest.Eventually(t, 10*time.Second, "every forged item counted as dropped", func() bool {
		return dropped(f, "not_member") >= uint64(sent)
	})
	if after := breakerState(f); after != before {
		t.Fatalf("forged packets changed the fleet:\nbefore\n%s\nafter\n%s", before, after)
	}
}

// liar is a real gossip member (it joined) that lies in its push-pull state
// and broadcasts.
type liar struct {
	state *fuseboxv1.PushPullState
}

func (l *liar) ApplyBatch(*fuseboxv1.GossipBatch) (*fuseboxv1.GossipBatch, int) { return nil, 0 }
func (l *liar) ApplyState(*fuseboxv1.PushPullState, bool) (*fuseboxv1.GossipBatch, int) {
	return nil, 0
}
func (l *liar) LocalState(bool) *fuseboxv1.PushPullState { return l.state }

func newLiar(t *testing.T, name string, role gossip.Role, state *fuseboxv1.PushPullState) *gossip.Gossip {
	gc := gossip.DefaultConfig()
	gc.Name, gc.BindAddr = name, "127.0.0.1:0"
	gc.Meta = gossip.NodeMeta{Role: role}
	gc.Handler = &liar{state: state}
	gc.GossipInterval, gc.ProbeInterval, gc.PushPullInterval = 50*time.Millisecond, 200*time.Millisecond, time.Second
	gc.Logger = discardLogger()
	g, err := gossip.New(gc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(0) })
	return g
}

// Push-pull state from members that lie: an observer's state is refused
// whole; an agent's state with the record at 2^64-1, 7,000 zone records of
// a fleet-scoped dependency, a jump of 2^40 generations, a since in 2262
// and rows of other nodes changes no breaker and adds no zone. Push-pull
// stays below the frame limit (the 7,000-record state of the issue no
// longer stops anti-entropy: the receivers refuse it item by item).
func TestLyingPushPullChangesNothing(t *testing.T) {
	f := newFleet(t, 2, false)
	before := breakerState(f)
	st := &fuseboxv1.PushPullState{Node: "liar"}
	st.Records = append(st.Records, &fuseboxv1.BreakerRecord{Dependency: "payments", Generation: math.MaxUint64,
		State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN, Origin: "liar"})
	st.Records = append(st.Records, &fuseboxv1.BreakerRecord{Dependency: "payments", Generation: 1 << 40,
		State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN, Origin: "liar"})
	st.Records = append(st.Records, &fuseboxv1.BreakerRecord{Dependency: "payments", Generation: 1,
		State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN, SinceUnixNano: math.MaxInt64, Origin: "liar"})
	for i := range 7000 {
		st.Records = append(st.Records, &fuseboxv1.BreakerRecord{Dependency: "payments", Zone: fmt.Sprint("zone-", i),
			Generation: 1, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN, Origin: "liar"})
	}
	st.Rows = append(st.Rows, &fuseboxv1.NodeWindow{Node: "agent-1", Dependency: "payments", Seq: math.MaxUint64,
		Counts: &fuseboxv1.Counts{Failures: 1000}})
	for _, role := range []gossip.Role{gossip.RoleObserver, gossip.RoleAgent} {
		name := "liar-" + string(role)
		st.Node = name
		for _, r := range st.Records {
			r.Origin = name
		}
		l := newLiar(t, name, role, proto.Clone(st).(*fuseboxv1.PushPullState))
		if _, err := l.Join([]string{f.agents[0].GossipAddr()}); err != nil {
			t.Fatal(err)
		}
		l.Close(0)
	}
	defer func() {
		if t.Failed() {
			t.Logf("dropped: %v / %v", f.agents[0].gossip.Stats().Dropped, f.agents[1].gossip.Stats().Dropped)
		}
	}()
	sstest.Eventually(t, 10*time.Second, "the lies counted as dropped", func() bool {
		// The observer's state: not_agent, or not_member when its push-pull
		// is merged before its membership (either way refused whole).
		return dropped(f, "not_agent")+dropped(f, "not_member") >= 7004 && dropped(f, "generation_max") >= 1 && dropped(f, "generation_jump") >= 1 &&
			dropped(f, "since_future") >= 1 && dropped(f, "zone_scope") >= 7000 && dropped(f, "row_not_sender") >= 1
	})
	if after := breakerState(f); after != before {
		t.Fatalf("lying push-pull changed the fleet:\nbefore\n%s\nafter\n%s", before, after)
	}
}

// A client Session delta that would wrap the counts (successes 2^64-6,
// failures 30: a failure rate of 1.25 before) is refused and counted; the
// breaker stays closed and the agent's window is unchanged.
func TestWrappingSessionDeltaRefused(t *testing.T) {
	a := startAgent(t, testConfig(t, "solo"))
	stream, err := dial(t, a.Agent).Session(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{Service: "s", Instance: "i"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // Welcome
		t.Fatal(err)
	}
	delta := func(c *fuseboxv1.Counts) *fuseboxv1.SessionRequest {
		return &fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Deltas{Deltas: &fuseboxv1.CountDeltas{
			Deltas: []*fuseboxv1.DependencyCounts{{Dependency: "shipping-api", Counts: c}}}}}
	}
	for _, c := range []*fuseboxv1.Counts{
		{FirstAttempts: 30, Successes: math.MaxUint64 - 5, Failures: 30},
		{FirstAttempts: 30, Successes: 1, SlowCalls: 30},
	} {
		if err := stream.Send(delta(c)); err != nil {
			t.Fatal(err)
		}
	}
	refusedDelta := func() float64 { return value(t, a.m.refusedDeps.WithLabelValues("invalid_delta")) }
	sstest.Eventually(t, 5*time.Second, "both deltas refused as invalid_delta", func() bool { return refusedDelta() == 2 })
	for range 3 {
		a.tick()
	}
	if ft, ok := a.eng.Fleet("shipping-api"); ok && !ft.Node.IsZero() {
		t.Fatalf("a refused delta was counted: %+v", ft.Node)
	}
	if s := a.eng.Snapshot("shipping-api"); s != nil && s.State != sharedstate.Closed {
		t.Fatalf("breaker %s after a refused delta", s.State)
	}
}

// Push-pull never drops everything: with more records than fit, records go
// first and what does not fit is counted.
func TestPushPullStateBounded(t *testing.T) {
	cfg := testConfig(t, "big")
	cfg.maxStateBytes = 4000
	a := startAgent(t, cfg)
	for i := range 200 {
		if _, err := a.eng.MergeRecord(sharedstate.BreakerRecord{Dependency: fmt.Sprintf("dep-%03d", i), Generation: 1,
			State: sharedstate.Open, Since: time.Now(), OpenCount: 1, Origin: "big"}); err != nil {
			t.Fatal(err)
		}
		a.confirm(fmt.Sprintf("dep-%03d", i)) // its own records go out once confirmed
	}
	if err := a.eng.AddCounts("own", sharedstate.Counts{FirstAttempts: 1, Successes: 1}); err != nil {
		t.Fatal(err)
	}
	a.confirm("own") // as a client on the socket would
	a.tick()
	st := (*gossipHandler)(a.Agent).LocalState(false)
	var codec protocol.Codec
	frame, err := codec.EncodePushPull(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(frame) > 4000+16 || len(st.GetRecords()) == 0 || len(st.GetRecords()) == 200 {
		t.Fatalf("state of %d bytes with %d records, want within the budget and some records", len(frame), len(st.GetRecords()))
	}
	omitted := value(t, a.m.stateOmitted.WithLabelValues("record")) + value(t, a.m.stateOmitted.WithLabelValues("row"))
	if int(omitted) != 200-len(st.GetRecords())+1-len(st.GetRows()) {
		t.Fatalf("omitted %v, sent %d records and %d rows", omitted, len(st.GetRecords()), len(st.GetRows()))
	}
}

// No trip storm: with 20 agents that all see the failures, the trip is
// proposed by at most Proposers (3) of them, and the direct packets of the
// transition are at most 3 × 19. Counts, not times.
func TestAtMostThreeProposersAt20Agents(t *testing.T) {
	if testing.Short() {
		t.Skip("20 agents")
	}
	const n = 20
	// Registered first, so it runs after the agents closed: memberlist's
	// probes in flight at Shutdown end within a probe interval.
	t.Cleanup(func() {
		sstest.Eventually(t, 10*time.Second, "memberlist probes of closed agents ended", func() bool {
			buf := make([]byte, 1<<20)
			return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "memberlist.(*Memberlist).probeNode")
		})
	})
	f := &fleet{t: t, change: func(c *Config) {
		c.ProposerDelay = time.Minute // a slow machine must not make the next rank group propose
		c.GossipInterval = 100 * time.Millisecond
		c.TickInterval = 100 * time.Millisecond
		c.ProbeInterval = time.Second // 20 agents under -race on 2 shared cores: no flapping suspicions
		c.LogLevel = "info"
	}}
	for i := range n {
		f.add(fmt.Sprintf("agent-%d", i))
	}
	// 20 agents with -race on a shared 2-core machine: generous deadlines.
	sstest.Eventually(t, 120*time.Second, "every agent sees 20 agents", func() bool {
		for _, a := range f.agents {
			if a.gossip.NumAgents() != n {
				return false
			}
		}
		return true
	})
	const dep = "inventory"
	directBefore := uint64(0)
	for _, a := range f.agents {
		directBefore += a.gossip.Stats().DirectRecordsOut
	}
	for _, a := range f.agents {
		if _, err := dial(t, a.Agent).Report(ctxT(t, 60*time.Second), failures(dep, 5)); err != nil {
			t.Fatal(err)
		}
	}
	sstest.Eventually(t, 60*time.Second, "every agent holds the open record", func() bool {
		for _, a := range f.agents {
			if s := a.eng.Snapshot(dep); s == nil || s.Generation == 0 {
				return false
			}
		}
		return true
	})
	proposers, direct := 0, uint64(0)
	for _, a := range f.agents {
		proposers += int(value(t, a.m.transitions.WithLabelValues(dep, "open", "self")))
		direct += a.gossip.Stats().DirectRecordsOut
	}
	direct -= directBefore
	// Urgent rows (a node's freshest counts turning to failures) also go
	// out directly, from every failing node; the bound is on the packets
	// that carry the transition's record.
	t.Logf("%d agents: %d proposed the trip, %d direct packets with records", n, proposers, direct)
	if proposers < 1 || proposers > sharedstate.DefaultProposers {
		t.Fatalf("%d agents proposed the trip, want 1..%d", proposers, sharedstate.DefaultProposers)
	}
	if direct > uint64(sharedstate.DefaultProposers*(n-1)) {
		t.Fatalf("%d direct packets with records for one transition, want at most %d", direct, sharedstate.DefaultProposers*(n-1))
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func rowBatch(rows ...*fuseboxv1.NodeWindow) *fuseboxv1.RowBatch {
	return &fuseboxv1.RowBatch{Rows: rows}
}

// insider is a real gossip member: it holds the keyring, joined the fleet
// and is registered in etcd with a key of its own, as a compromised host
// would be. It sends whatever frames the test gives it.
type insider struct {
	ml   *memberlist.Memberlist
	meta []byte
}

func (d *insider) NodeMeta(int) []byte             { return d.meta }
func (d *insider) NotifyMsg([]byte)                {}
func (d *insider) GetBroadcasts(int, int) [][]byte { return nil }
func (d *insider) LocalState(bool) []byte          { return nil }
func (d *insider) MergeRemoteState([]byte, bool)   {}

func newInsider(t *testing.T, f *fleet, keyringFile string) (*insider, ed25519.PrivateKey) {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kr, err := gossip.LoadKeyringFile(keyringFile)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := gossip.NodeMeta{Version: 1, Role: gossip.RoleAgent, Wire: int(protocol.MaxVersion),
		Key: gossip.EncodeKey(key.Public().(ed25519.PublicKey))}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	d := &insider{meta: meta}
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort = "insider", "127.0.0.1", 0
	mc.Keyring, mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = kr, true, true
	mc.Delegate = d
	mc.LogOutput = io.Discard
	if d.ml, err = memberlist.Create(mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.ml.Shutdown() })
	reg, err := f.store.Register(ctxT(t, 10*time.Second), store.Member{Node: "insider", Role: "agent",
		GossipAddr: d.ml.LocalNode().Address(), PublicKey: gossip.EncodeKey(key.Public().(ed25519.PublicKey)), Wire: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	if _, err := d.ml.Join([]string{f.agents[0].GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	return d, key
}

func (d *insider) sendAll(t *testing.T, f *fleet, b *fuseboxv1.GossipBatch) {
	t.Helper()
	frame, err := protocol.Codec{}.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range f.agents {
		if err := d.ml.SendToAddress(memberlist.Address{Addr: a.GossipAddr(), Name: a.Name()}, frame); err != nil {
			t.Fatal(err)
		}
	}
}

// signedItem signs m (a record, or a RowBatch of rows) with key as its
// origin would.
func signedItem(t *testing.T, key ed25519.PrivateKey, m proto.Message, context string) *fuseboxv1.SignedItem {
	t.Helper()
	body, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := key.Sign(nil, body, &ed25519.Options{Context: context})
	if err != nil {
		t.Fatal(err)
	}
	return &fuseboxv1.SignedItem{Body: body, Signature: sig}
}

// One member cannot speak for another: an insider (keyring, membership and
// an etcd registration of its own) sends failure rows in two other agents'
// names at the highest seq, plain and signed with its own key, and records
// opening a dependency in another agent's name, straight to every agent,
// again and again. Nothing opens, no dependency appears, the real agents'
// rows are not locked out; only the dropped counters move, counted under
// the origins claimed. A genuine row of agent-1 sent again after its copy
// went stale (a replay of captured bytes) is refused too.
func TestMemberCannotSpeakForAnother(t *testing.T) {
	keyring := writeKeyring(t, []byte("0123456789abcdef0123456789abcdef"))
	f := newFleetWith(t, 3, true, func(c *Config) { c.KeyringFile = keyring })
	liar, liarKey := newInsider(t, f, keyring)
	sstest.Eventually(t, 10*time.Second, "every agent sees the insider and knows every member's key", func() bool {
		for _, a := range f.agents {
			if len(a.gossip.Members()) != 4 {
				return false
			}
			for _, m := range a.gossip.Members() {
				if _, st := a.keys.Key(m.Name); st != gossip.KeyKnown {
					return false
				}
			}
		}
		return true
	})
	before := breakerState(f)
	const dep = "payments"
	forgedRow := func(node string) *fuseboxv1.NodeWindow {
		return &fuseboxv1.NodeWindow{Node: node, Dependency: dep, Seq: math.MaxUint64 - 1,
			Counts: &fuseboxv1.Counts{FirstAttempts: 500, Failures: 500}, RecentFailures: []uint64{500}}
	}
	forgedRecord := &fuseboxv1.BreakerRecord{Dependency: dep, Generation: 1, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN,
		SinceUnixNano: time.Now().UnixNano(), OpenCount: 1, Origin: "agent-1", Reason: "forged"}
	for range 5 {
		liar.sendAll(t, f, &fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{forgedRow("agent-1"), forgedRow("agent-2")}})
		liar.sendAll(t, f, &fuseboxv1.GossipBatch{
			SignedRows: []*fuseboxv1.SignedItem{signedItem(t, liarKey, rowBatch(forgedRow("agent-1")), "fusebox/v2/rows"),
				signedItem(t, liarKey, rowBatch(forgedRow("agent-2")), "fusebox/v2/rows")},
			SignedRecords: []*fuseboxv1.SignedItem{signedItem(t, liarKey, forgedRecord, "fusebox/v2/record")}})
	}
	defer func() {
		if t.Failed() {
			for _, a := range f.agents {
				t.Logf("%s dropped %v", a.Name(), a.gossip.Stats().Dropped)
			}
		}
	}()
	sstest.Eventually(t, 10*time.Second, "every forgery counted", func() bool {
		// Per round: 2 plain rows at each agent; 2 signed rows at agent-0
		// and 1 at the others (an agent skips rows in its own name), and
		// the record at each.
		return dropped(f, "unsigned") >= 2*5*3 && dropped(f, "bad_signature") >= 5*(3+2+2)
	})
	for _, a := range f.agents {
		bad := a.gossip.Stats().BadSignatures
		if bad["agent-1"] == 0 || (a.Name() != "agent-2" && bad["agent-2"] == 0) || bad["insider"] != 0 {
			t.Fatalf("%s counts bad signatures by claimed origin %v, want agent-1 and agent-2", a.Name(), bad)
		}
	}
	if after := breakerState(f); after != before {
		t.Fatalf("forgeries changed the fleet:\nbefore\n%s\nafter\n%s", before, after)
	}
	// agent-1's real rows still count everywhere: the forged seq locked
	// nothing out.
	if _, err := dial(t, f.agents[1].Agent).Report(ctxT(t, 10*time.Second), successes(dep, 3)); err != nil {
		t.Fatal(err)
	}
	var genuine sharedstate.NodeWindow
	sstest.Eventually(t, 10*time.Second, "agent-0 holds agent-1's genuine row", func() bool {
		for _, r := range f.agents[0].eng.Rows(dep) {
			if r.Node == "agent-1" && r.Counts.Successes == 3 {
				genuine = r
				return true
			}
		}
		return false
	})

	// A replay: agent-1's genuine row, signed with agent-1's own key (as
	// captured off the wire), sent again once its copy has gone stale.
	key1, err := gossip.LoadOrCreateKey(filepath.Join(f.agents[1].cfg.DataDir, KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	replay := convert.RowToProto(genuine)
	// agent-1 reports nothing more: its row empties with its window, and
	// agent-0 drops it 2×window after the last one arrived.
	sstest.Eventually(t, 20*time.Second, "agent-1's row stale on agent-0", func() bool {
		return len(f.agents[0].eng.Rows(dep)) == 0
	})
	replayedBefore := f.agents[0].gossip.Stats().Dropped["replayed"]
	frame, err := protocol.Codec{}.EncodeBatch(&fuseboxv1.GossipBatch{SignedRows: []*fuseboxv1.SignedItem{signedItem(t, key1, rowBatch(replay), "fusebox/v2/rows")}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := liar.ml.SendToAddress(memberlist.Address{Addr: f.agents[0].GossipAddr(), Name: "agent-0"}, frame); err != nil {
			t.Fatal(err)
		}
	}
	sstest.Eventually(t, 10*time.Second, "the replay refused", func() bool {
		return f.agents[0].gossip.Stats().Dropped["replayed"] > replayedBefore
	})
	if rows := f.agents[0].eng.Rows(dep); len(rows) != 0 {
		t.Fatalf("a replayed row was merged: %+v", rows)
	}
}
