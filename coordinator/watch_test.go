package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/coordinator/internal/events"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// watch opens a Watch stream and waits until the coordinator has
// subscribed it (the response headers): every later event reaches it.
func watch(t *testing.T, a fuseboxv1.AdminClient, req *fuseboxv1.WatchRequest) fuseboxv1.Admin_WatchClient {
	t.Helper()
	s, err := a.Watch(ctxFor(t, 60*time.Second), req)
	if err != nil {
		t.Fatalf("Watch(%v): %v", req, err)
	}
	// Header hides a failure (nil, nil): Recv then returns it.
	if md, err := s.Header(); err != nil || md == nil {
		_, err = s.Recv()
		t.Fatalf("Watch(%v): no headers: %v", req, err)
	}
	return s
}

// recvN receives n events (each Recv is bounded by the stream's deadline).
func recvN(t *testing.T, s fuseboxv1.Admin_WatchClient, n int) []*fuseboxv1.WatchEvent {
	t.Helper()
	var out []*fuseboxv1.WatchEvent
	for len(out) < n {
		e, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(out), n, err)
		}
		out = append(out, e)
	}
	return out
}

// recvErr receives until the stream fails and returns the events and the
// status.
func recvErr(s fuseboxv1.Admin_WatchClient) ([]*fuseboxv1.WatchEvent, *status.Status) {
	var out []*fuseboxv1.WatchEvent
	for { // bounded by the stream's 60 s context (watch)
		e, err := s.Recv()
		if err != nil {
			return out, status.Convert(err)
		}
		out = append(out, e)
	}
}

// counterValue reads a counter without gathering the whole registry.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func ids(evs []*fuseboxv1.WatchEvent) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.GetId()
	}
	return out
}

// publishPolicyEvents publishes n events straight into the coordinator's
// broker (what its etcd watch does for every policy write) and returns
// their IDs.
func publishPolicyEvents(c *Coordinator, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = c.broker.Publish(events.Event{Type: events.TypePolicy, Dependency: "x", State: "put", At: time.Now()}).ID
	}
	return out
}

// TestWatchOverrideSetAndClearedQuickly is the case a polling watch
// missed: an override set and cleared within one poll interval. A viewer
// may watch; no token is refused.
func TestWatchOverrideSetAndClearedQuickly(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)

	none, err := adminClient(t, c.GRPCAddr(), "").Watch(ctxFor(t, 10*time.Second), &fuseboxv1.WatchRequest{})
	if err == nil {
		_, err = none.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Watch without a token = %v, want Unauthenticated", err)
	}
	viewer := adminClient(t, c.GRPCAddr(), viewerToken)
	bad, err := viewer.Watch(ctxFor(t, 10*time.Second), &fuseboxv1.WatchRequest{Dependency: "bad name!"})
	if err == nil {
		_, err = bad.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Watch of a bad dependency name = %v, want InvalidArgument", err)
	}

	all := watch(t, viewer, &fuseboxv1.WatchRequest{})
	mail := watch(t, viewer, &fuseboxv1.WatchRequest{Dependency: "mail"})
	if n := counterValue(t, c.metrics.sseDropped); n != 0 {
		t.Fatalf("dropped = %v before any event", n)
	}
	admin := adminClient(t, c.GRPCAddr(), adminToken)
	ctx := ctxFor(t, 20*time.Second)
	if _, err := admin.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "mail", Reason: "vendor outage", Actor: "dana"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ForceClosed(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "search"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ClearOverride(ctx, &fuseboxv1.ClearOverrideRequest{Dependency: "mail"}); err != nil {
		t.Fatal(err)
	}

	type ev struct{ dep, state string }
	got := recvN(t, all, 3)
	want := []ev{{"mail", "forced-open"}, {"search", "forced-closed"}, {"mail", "none"}}
	for i, e := range got {
		if e.GetType() != fuseboxv1.EventType_EVENT_TYPE_OVERRIDE || (ev{e.GetDependency(), e.GetState()}) != want[i] {
			t.Fatalf("event %d = %v, want override %v", i, e, want[i])
		}
		if i > 0 && e.GetId() <= got[i-1].GetId() {
			t.Fatalf("IDs out of order: %v", ids(got))
		}
		if e.GetRevision() == 0 || e.GetAt() == nil {
			t.Errorf("event %d lacks its revision or time: %v", i, e)
		}
	}
	if e := got[0]; e.GetReason() != "vendor outage" || e.GetActor() != "dana (ops-admin)" || e.GetExpires() != nil {
		t.Errorf("forced-open event = %v", e)
	}
	filtered := recvN(t, mail, 2)
	if filtered[0].GetId() != got[0].GetId() || filtered[1].GetId() != got[2].GetId() {
		t.Fatalf("the mail stream got %v, want the IDs %d and %d", filtered, got[0].GetId(), got[2].GetId())
	}
}

func TestWatchResumesAfterID(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	a := adminClient(t, c.GRPCAddr(), "")

	s1 := watch(t, a, &fuseboxv1.WatchRequest{})
	first := publishPolicyEvents(c, 2)
	if got := ids(recvN(t, s1, 2)); got[0] != first[0] || got[1] != first[1] {
		t.Fatalf("first stream got %v, want %v", got, first)
	}
	// The watcher goes away; two events happen meanwhile.
	missed := publishPolicyEvents(c, 2)
	s2 := watch(t, a, &fuseboxv1.WatchRequest{AfterId: first[1]})
	live := publishPolicyEvents(c, 1)
	got := ids(recvN(t, s2, 3))
	if want := append(missed, live...); got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("resumed stream got %v, want %v: the missed events once each, then the new one", got, want)
	}
	// Resuming where it is already up to date replays nothing.
	s3 := watch(t, a, &fuseboxv1.WatchRequest{AfterId: live[0]})
	next := publishPolicyEvents(c, 1)
	if e := recvN(t, s3, 1)[0]; e.GetId() != next[0] {
		t.Fatalf("up-to-date stream got %d first, want %d", e.GetId(), next[0])
	}

	// More events than the coordinator keeps: resuming from the start
	// cannot be honest, so it is refused; so are IDs it never published
	// (another coordinator's, or its own from before a restart).
	latest := publishPolicyEvents(c, 600)[599]
	for _, after := range []uint64{first[1], latest + 1, first[0] - 1, 7} {
		s, err := a.Watch(ctxFor(t, 10*time.Second), &fuseboxv1.WatchRequest{AfterId: after})
		if err == nil {
			_, err = s.Recv()
		}
		if st := status.Convert(err); st.Code() != codes.OutOfRange || !strings.Contains(st.Message(), "fusebox: watch after event") {
			t.Fatalf("Watch after %d = %v, want OutOfRange", after, err)
		}
	}
}

// TestWatchSlowWatcherIsDropped fills a watcher that does not read: the
// coordinator ends it after what it had queued, with ResourceExhausted,
// counts it, and the watcher resumes without a gap.
func TestWatchSlowWatcherIsDropped(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	// Fixed 64 KiB flow-control windows (no BDP growth): the coordinator's
	// sends block soon after the client stops reading.
	a := adminClient(t, c.GRPCAddr(), "", grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	slow := watch(t, a, &fuseboxv1.WatchRequest{})
	var published []uint64
	for counterValue(t, c.metrics.sseDropped) == 0 {
		if len(published) > 1_000_000 {
			t.Fatal("a watcher that reads nothing was never dropped")
		}
		published = append(published, publishPolicyEvents(c, 1)...)
	}
	got, st := recvErr(slow)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "fusebox: watch fell behind") {
		t.Fatalf("slow watcher ended with %v, want ResourceExhausted \"fusebox: watch fell behind\"", st)
	}
	// Everything up to the event that did not fit was delivered, in order.
	if len(got) != len(published)-1 {
		t.Fatalf("slow watcher got %d events, want %d (all but the last)", len(got), len(published)-1)
	}
	for i, e := range got {
		if e.GetId() != published[i] {
			t.Fatalf("slow watcher's event %d has ID %d, want %d", i, e.GetId(), published[i])
		}
	}
	if v := counterValue(t, c.metrics.sseDropped); v != 1 {
		t.Errorf("sse_events_dropped_total = %v, want 1", v)
	}
	last := published[len(published)-1]
	resumed := watch(t, a, &fuseboxv1.WatchRequest{AfterId: got[len(got)-1].GetId()})
	next := publishPolicyEvents(c, 1)
	if got := ids(recvN(t, resumed, 2)); got[0] != last || got[1] != next[0] {
		t.Fatalf("resumed with %v, want [%d %d]", got, last, next[0])
	}
}

// TestWatchEndsOnClose: Close does not hang on open streams, one that
// reads and one that stopped reading.
func TestWatchEndsOnClose(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	a := adminClient(t, c.GRPCAddr(), "")
	reading := watch(t, a, &fuseboxv1.WatchRequest{Dependency: "y"}) // none of the events below
	stuck := watch(t, adminClient(t, c.GRPCAddr(), "", grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16)),
		&fuseboxv1.WatchRequest{Dependency: "x"})
	// Until the stuck stream falls behind; its queue then holds more than
	// the flow-control window (4 KiB events), so its handler blocks in a
	// send that only Close can end.
	reason := strings.Repeat("r", 4<<10)
	for i := 0; counterValue(t, c.metrics.sseDropped) == 0; i++ {
		if i > 1_000_000 {
			t.Fatal("a watcher that reads nothing was never dropped")
		}
		c.broker.Publish(events.Event{Type: events.TypeTransition, Dependency: "x", State: "open", Reason: reason})
	}

	closed := make(chan struct{})
	start := time.Now()
	go func() { _ = c.Close(); close(closed) }()
	timer := time.NewTimer(15 * time.Second) // ShutdownTimeout is 2s
	defer timer.Stop()
	select {
	case <-closed:
	case <-timer.C:
		t.Fatal("Close hangs on open Watch streams")
	}
	_, st := recvErr(reading)
	if st.Code() != codes.Unavailable {
		t.Fatalf("an open stream ended with %v at Close, want Unavailable", st)
	}
	t.Logf("at Close the reading stream got %v", st)
	t.Logf("Close took %v", time.Since(start))
	if got, st := recvErr(stuck); st.Code() == codes.OK {
		t.Fatal("the stuck stream ended without an error")
	} else {
		t.Logf("the stuck stream got %d events, then %v", len(got), st)
	}
}
