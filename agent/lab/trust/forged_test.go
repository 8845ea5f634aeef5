package trust

import (
	"fmt"
	"io"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

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
	f := start(t, 3, false, nil)
	agents := f.Agents()
	before := breakerState(f)
	stranger := newStranger(t)
	var codec protocol.Codec
	send := func(to *agent.Agent, b *fuseboxv1.GossipBatch) {
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
	for _, a := range agents {
		send(a, forged("anything", math.MaxUint64))
		send(a, forged(fleet.Name(1), 2)) // a member's name, from a stranger's address
		sent += 2                         // packets: the guard drops a stranger's user message whole
	}
	// 3,000 rows under an invented node name, 20 per packet.
	for i := 0; i < 3000; i += 20 {
		b := &fuseboxv1.GossipBatch{}
		for j := i; j < i+20; j++ {
			b.Rows = append(b.Rows, &fuseboxv1.NodeWindow{Node: "invented", Dependency: fmt.Sprintf("fake-%d", j), Seq: 1,
				Counts: &fuseboxv1.Counts{FirstAttempts: 100, Failures: 100}})
		}
		send(agents[i/20%3], b)
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
	f := start(t, 2, false, nil)
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
	st.Rows = append(st.Rows, &fuseboxv1.NodeWindow{Node: fleet.Name(1), Dependency: "payments", Seq: math.MaxUint64,
		Counts: &fuseboxv1.Counts{Failures: 1000}})
	for _, role := range []gossip.Role{gossip.RoleObserver, gossip.RoleAgent} {
		name := "liar-" + string(role)
		st.Node = name
		for _, r := range st.Records {
			r.Origin = name
		}
		l := newLiar(t, name, role, proto.Clone(st).(*fuseboxv1.PushPullState))
		if _, err := l.Join([]string{f.Addr(0)}); err != nil {
			t.Fatal(err)
		}
		l.Close(0)
	}
	defer func() {
		if t.Failed() {
			t.Logf("dropped: %v / %v", f.Agent(0).Gossip().Stats().Dropped, f.Agent(1).Gossip().Stats().Dropped)
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
