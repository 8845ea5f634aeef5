package agent

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

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
