package trust

import (
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

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

func newInsider(t *testing.T, f *fleettest.Fleet, keyringFile string) (*insider, ed25519.PrivateKey) {
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
	st, err := store.New(store.Config{Client: embeddedtest.Client(t, f.EtcdServer())})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := st.Register(fleettest.Ctx(t, 10*time.Second), store.Member{Node: "insider", Role: "agent",
		GossipAddr: d.ml.LocalNode().Address(), PublicKey: gossip.EncodeKey(key.Public().(ed25519.PublicKey)), Wire: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	if _, err := d.ml.Join([]string{f.Addr(0)}); err != nil {
		t.Fatal(err)
	}
	return d, key
}

func (d *insider) sendAll(t *testing.T, f *fleettest.Fleet, b *fuseboxv1.GossipBatch) {
	t.Helper()
	frame, err := protocol.Codec{}.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range f.Agents() {
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
// the origins claimed. A genuine row of agent 1 sent again after its copy
// went stale (a replay of captured bytes) is refused too.
func TestMemberCannotSpeakForAnother(t *testing.T) {
	keyring := writeKeyring(t, []byte("0123456789abcdef0123456789abcdef"))
	f := start(t, 3, true, func(c *agent.Config) { c.KeyringFile = keyring })
	agents := f.Agents()
	a0, name1, name2 := agents[0], fleet.Name(1), fleet.Name(2)
	liar, liarKey := newInsider(t, f, keyring)
	sstest.Eventually(t, 10*time.Second, "every agent sees the insider and knows every member's key", func() bool {
		for i, a := range agents {
			if len(a.Gossip().Members()) != 4 {
				return false
			}
			for _, m := range a.Gossip().Members() {
				if f.Inside(i).PeerKey(m.Name) != gossip.KeyKnown {
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
		SinceUnixNano: time.Now().UnixNano(), OpenCount: 1, Origin: name1, Reason: "forged"}
	for range 5 {
		liar.sendAll(t, f, &fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{forgedRow(name1), forgedRow(name2)}})
		liar.sendAll(t, f, &fuseboxv1.GossipBatch{
			SignedRows: []*fuseboxv1.SignedItem{signedItem(t, liarKey, rowBatch(forgedRow(name1)), "fusebox/v2/rows"),
				signedItem(t, liarKey, rowBatch(forgedRow(name2)), "fusebox/v2/rows")},
			SignedRecords: []*fuseboxv1.SignedItem{signedItem(t, liarKey, forgedRecord, "fusebox/v2/record")}})
	}
	defer func() {
		if t.Failed() {
			for _, a := range agents {
				t.Logf("%s dropped %v", a.Name(), a.Gossip().Stats().Dropped)
			}
		}
	}()
	sstest.Eventually(t, 10*time.Second, "every forgery counted", func() bool {
		// Per round: 2 plain rows at each agent; 2 signed rows at agent 0
		// and 1 at the others (an agent skips rows in its own name), and
		// the record at each.
		return dropped(f, "unsigned") >= 2*5*3 && dropped(f, "bad_signature") >= 5*(3+2+2)
	})
	for _, a := range agents {
		bad := a.Gossip().Stats().BadSignatures
		if bad[name1] == 0 || (a.Name() != name2 && bad[name2] == 0) || bad["insider"] != 0 {
			t.Fatalf("%s counts bad signatures by claimed origin %v, want %s and %s", a.Name(), bad, name1, name2)
		}
	}
	if after := breakerState(f); after != before {
		t.Fatalf("forgeries changed the fleet:\nbefore\n%s\nafter\n%s", before, after)
	}
	// Agent 1's real rows still count everywhere: the forged seq locked
	// nothing out.
	fleettest.Report(t, f.Client(1), dep, 3, 0)
	var genuine sharedstate.NodeWindow
	sstest.Eventually(t, 10*time.Second, "agent 0 holds agent 1's genuine row", func() bool {
		for _, r := range a0.Engine().Rows(dep) {
			if r.Node == name1 && r.Counts.Successes == 3 {
				genuine = r
				return true
			}
		}
		return false
	})

	// A replay: agent 1's genuine row, signed with agent 1's own key (as
	// captured off the wire), sent again once its copy has gone stale.
	key1, err := gossip.LoadOrCreateKey(filepath.Join(f.Config(1).DataDir, agent.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	replay := convert.RowToProto(genuine)
	// Agent 1 reports nothing more: its row empties with its window, and
	// agent 0 drops it 2×window after the last one arrived.
	sstest.Eventually(t, 20*time.Second, "agent 1's row stale on agent 0", func() bool {
		return len(a0.Engine().Rows(dep)) == 0
	})
	replayedBefore := a0.Gossip().Stats().Dropped["replayed"]
	frame, err := protocol.Codec{}.EncodeBatch(&fuseboxv1.GossipBatch{SignedRows: []*fuseboxv1.SignedItem{signedItem(t, key1, rowBatch(replay), "fusebox/v2/rows")}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := liar.ml.SendToAddress(memberlist.Address{Addr: a0.GossipAddr(), Name: a0.Name()}, frame); err != nil {
			t.Fatal(err)
		}
	}
	sstest.Eventually(t, 10*time.Second, "the replay refused", func() bool {
		return a0.Gossip().Stats().Dropped["replayed"] > replayedBefore
	})
	if rows := a0.Engine().Rows(dep); len(rows) != 0 {
		t.Fatalf("a replayed row was merged: %+v", rows)
	}
}
