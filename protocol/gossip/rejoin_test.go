package gossip

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

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
	g := newMember(t, testConfig("a", RoleAgent, newRecorder()))
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
