package gossip

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// deadAddrs returns n loopback addresses nobody listens on (connections are
// refused at once).
func deadAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l.Addr().String())
		l.Close()
	}
	return out
}

// Rejoin joins a bounded sample of the missing targets, all of them when
// there are few, and one answer is enough to merge.
func TestRejoinIsBounded(t *testing.T) {
	a := newMember(t, testConfig("a", RoleAgent, newRecorder()))
	b := newMember(t, testConfig("b", RoleAgent, newRecorder()))

	dead := deadAddrs(t, 10)
	missing, joined, err := a.Rejoin(dead)
	if len(missing) != len(dead) || joined != 0 {
		t.Fatalf("10 dead targets: %d missing, %d joined; want 10, 0", len(missing), joined)
	}
	var multi interface{ Unwrap() []error }
	if !errors.As(err, &multi) || len(multi.Unwrap()) != RejoinFanout {
		t.Fatalf("10 dead targets: want %d join attempts (errors), got %v", RejoinFanout, err)
	}

	// Fewer targets than the fanout: every one is tried, the live one joins.
	missing, joined, _ = a.Rejoin([]string{dead[0], b.Addr()})
	if len(missing) != 2 || joined != 1 {
		t.Fatalf("one dead and one live target: %d missing, %d joined; want 2, 1", len(missing), joined)
	}
	sstest.Eventually(t, 10*time.Second, "a and b see each other", func() bool {
		return a.NumAgents() == 2 && b.NumAgents() == 2
	})
	if missing, _, _ := a.Rejoin([]string{b.Addr()}); len(missing) != 0 {
		t.Fatalf("b is a member now, yet missing: %v", missing)
	}
}

// Records go out before rows however many fresh rows wait: a breaker
// transition must not queue behind a hundred busy dependencies' rows.
func TestRecordsGoOutBeforeRows(t *testing.T) {
	cfg := testConfig("a", RoleAgent, newRecorder())
	cfg.RowFanout = 0 // in memberlist's gossip packets
	g := newMember(t, cfg)
	rows := &fuseboxv1.GossipBatch{}
	for i := range 200 {
		rows.Rows = append(rows.Rows, &fuseboxv1.NodeWindow{Node: "a", Dependency: fmt.Sprintf("dep-%03d", i), Seq: 1,
			Counts: &fuseboxv1.Counts{FirstAttempts: 1000, Successes: 900, Failures: 100}})
	}
	g.Broadcast(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{{Dependency: "dep-x", Generation: 2, Origin: "a"}}})
	g.Broadcast(rows) // newer, and larger: memberlist's order alone would send them first
	out := (*delegate)(g).GetBroadcasts(2, 1400)
	if len(out) < 2 {
		t.Fatalf("%d broadcasts in a 1400-byte packet, want the record and some rows", len(out))
	}
	f, err := g.cfg.Codec.Decode(out[0])
	if err != nil {
		t.Fatal(err)
	}
	first := f.Batch
	if len(first.GetRecords()) != 1 || first.GetRecords()[0].GetDependency() != "dep-x" {
		t.Fatalf("the first broadcast is %v, want the record of dep-x", first)
	}
}

// batchCounter is a recorder that also counts the batches it is handed.
type batchCounter struct {
	*recorder
	mu        sync.Mutex
	batches   int
	withBoth  int // batches holding a record and rows
	rowsInMax int
}

func (c *batchCounter) ApplyBatch(b *fuseboxv1.GossipBatch) (*fuseboxv1.GossipBatch, int) {
	c.mu.Lock()
	c.batches++
	if len(b.GetRecords()) > 0 && len(b.GetRows()) > 0 {
		c.withBoth++
	}
	c.rowsInMax = max(c.rowsInMax, len(b.GetRows()))
	c.mu.Unlock()
	return c.recorder.ApplyBatch(b)
}

func (c *batchCounter) counts() (batches, withBoth, rowsInMax int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.batches, c.withBoth, c.rowsInMax
}

// A broadcast round sends one packet per chosen member: queued records
// first, then as many rows as fit, all in one frame within the packet
// budget; memberlist's gossip packets carry none of them.
func TestRoundsBundleRecordsAndRows(t *testing.T) {
	ca := testConfig("a", RoleAgent, newRecorder())
	ca.GossipInterval = time.Hour // a's rounds run only when the test calls them
	ca.RowFanout = 1
	a := newMember(t, ca)
	hb := &batchCounter{recorder: newRecorder()}
	b := newMember(t, testConfig("b", RoleAgent, hb))
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "a and b see each other", func() bool { return a.NumAgents() == 2 && b.NumAgents() == 2 })

	rows := &fuseboxv1.GossipBatch{}
	for i := range 200 {
		rows.Rows = append(rows.Rows, &fuseboxv1.NodeWindow{Node: "a", Dependency: fmt.Sprintf("dep-%03d", i), Seq: 1,
			Counts: &fuseboxv1.Counts{FirstAttempts: 1000, Successes: 900, Failures: 100}})
	}
	a.Broadcast(rows)
	a.Broadcast(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{{Dependency: "dep-x", Generation: 2, Origin: "a", State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN}}})
	if out := (*delegate)(a).GetBroadcasts(2, 1400); len(out) != 0 {
		t.Fatalf("memberlist's gossip got %d broadcasts, want none (they go in rounds)", len(out))
	}
	before := a.Stats()
	a.round()
	s := a.Stats()
	if got := s.RoundsOut - before.RoundsOut; got != 1 {
		t.Fatalf("one round to one member sent %d packets, want 1", got)
	}
	if sent := s.BytesOut["message"] - before.BytesOut["message"]; sent > roundPacketBytes {
		t.Errorf("the round's frame is %d bytes, over the %d-byte packet budget", sent, roundPacketBytes)
	}
	sstest.Eventually(t, 10*time.Second, "b got the round's packet", func() bool { n, _, _ := hb.counts(); return n >= 1 })
	_, both, most := hb.counts()
	if both != 1 || most < 10 || most >= 200 {
		t.Errorf("b got %d batches with the record and rows, at most %d rows in one; want 1, and 10 to 199 rows", both, most)
	}
}

// The rows a departed member sends before this node holds it alive again
// (after a heal, its greeting often comes first) are held, the newest
// batch, and applied when it is back; a forgery of them is refused and
// counted, and an older batch does not replace the newer one.
func TestRowsOfAMemberBackAreHeld(t *testing.T) {
	rec := newRecorder()
	ka := newKey(t)
	gs := joined(t, signedConfig("recv", rec, newKey(t)), signedConfig("a", newRecorder(), ka))
	recv := gs[0]
	if err := gs[1].Close(time.Second); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 5*time.Second, "a left", func() bool { return len(recv.Members()) == 1 })

	row := func(seq uint64) *fuseboxv1.NodeWindow {
		return &fuseboxv1.NodeWindow{Node: "a", Dependency: "payments", Seq: seq, Counts: &fuseboxv1.Counts{Successes: seq}}
	}
	send := func(env *fuseboxv1.SignedItem) {
		(*delegate)(recv).NotifyMsg(frameAt(t, protocol.Version2, &fuseboxv1.GossipBatch{SignedRows: []*fuseboxv1.SignedItem{env}}))
	}
	send(signRowWith(t, ka, row(5)))
	send(signRowWith(t, newKey(t), row(6))) // forged
	send(signRowWith(t, ka, row(3)))        // older
	if n, _ := rec.seen(); n != 0 {
		t.Fatalf("rows of a member that is not alive were applied: %d", n)
	}
	st := recv.Stats()
	if st.Dropped["bad_signature"] != 1 || st.Dropped["not_member"] != 0 {
		t.Fatalf("dropped %v: want the forgery counted as bad_signature and the genuine rows not dropped", st.Dropped)
	}

	// a restarts with its key; it has no rows of its own to send.
	if _, err := newMember(t, signedConfig("a", newRecorder(), ka)).Join([]string{recv.Addr()}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 5*time.Second, "the held row applied when a is back", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.rows["a/payments"] == 5
	})
}

// stateOnly answers push-pull with rows, but not a join's.
type stateOnly struct {
	*recorder
	rows []*fuseboxv1.NodeWindow
}

func (s stateOnly) LocalState(join bool) *fuseboxv1.PushPullState {
	if join {
		return nil
	}
	return &fuseboxv1.PushPullState{Rows: s.rows}
}

// A member that comes back gets this node's current rows (its push-pull
// state's) straight away, even when none is queued for the rounds any
// more (a row that did not change for a while has gone out as often as
// it does).
func TestMemberBackGetsCurrentRows(t *testing.T) {
	row := &fuseboxv1.NodeWindow{Node: "a", Dependency: "payments", Seq: 5, Counts: &fuseboxv1.Counts{Failures: 5}}
	slow := func(c Config) Config { c.PushPullInterval = time.Hour; return c }
	gs := joined(t, slow(signedConfig("a", stateOnly{newRecorder(), []*fuseboxv1.NodeWindow{row}}, newKey(t))),
		slow(signedConfig("b", newRecorder(), newKey(t))))
	a := gs[0]
	if err := gs[1].Close(time.Second); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 5*time.Second, "b left", func() bool { return len(a.Members()) == 1 })

	rec := newRecorder()
	if _, err := newMember(t, slow(signedConfig("b", rec, newKey(t)))).Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 5*time.Second, "b, back, has a's row", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.rows["a/payments"] == 5
	})
}
