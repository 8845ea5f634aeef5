package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// openSession opens a Session with hello and reads the welcome; the stream
// ends with the test.
func openSession(t *testing.T, a *testAgent) fuseboxv1.Agent_SessionClient {
	t.Helper()
	s, err := dial(t, a.Agent).Session(ctxT(t, 60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{Service: "svc", Instance: "i"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	go func() { // drain snapshot pushes and errors
		for { // bounded by the stream's context deadline (ctxT) and the test's end
			if _, err := s.Recv(); err != nil {
				return
			}
		}
	}()
	return s
}

func sendDeltas(t *testing.T, s fuseboxv1.Agent_SessionClient, deltas ...*fuseboxv1.DependencyCounts) {
	t.Helper()
	if err := s.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Deltas{Deltas: &fuseboxv1.CountDeltas{Deltas: deltas}}}); err != nil {
		t.Fatal(err)
	}
}

func refusedBy(t *testing.T, a *testAgent, reason string) float64 {
	return value(t, a.m.refusedDeps.WithLabelValues(reason))
}

// Deltas with distinct 2 MB invalid names in one session (150 of them
// OOM-killed an agent in 256 MiB: each refused name was kept whole) leave a
// few kilobytes behind: a refused name is remembered and reported clipped.
// 40 names here (80 MiB on the wire) keep the test quick under -race.
func TestRefusedNamesKeptClipped(t *testing.T) {
	a := startAgent(t, testConfig(t, "clipped"))
	s := openSession(t, a)
	before := heapInUse()
	const n = 40
	for i := range n {
		name := fmt.Sprintf("%03d-%s", i, strings.Repeat("x!", 1<<20)) // 2 MiB, not a valid name
		sendDeltas(t, s, &fuseboxv1.DependencyCounts{Dependency: name, Counts: &fuseboxv1.Counts{FirstAttempts: 1, Successes: 1}})
	}
	sstest.Eventually(t, 60*time.Second, "every name refused", func() bool { return refusedBy(t, a, "invalid_name") >= n })
	if grown := int64(heapInUse()) - int64(before); grown > 16<<20 {
		t.Fatalf("the heap grew by %d MiB after %d refused 2 MiB names", grown>>20, n)
	}
	a.hub.mu.RLock()
	defer a.hub.mu.RUnlock()
	for sess := range a.hub.sessions {
		sess.mu.Lock()
		for name := range sess.refused {
			if len(name) > 100 {
				t.Errorf("a refused name kept at %d bytes", len(name))
			}
		}
		for _, e := range sess.errs {
			if len(e.GetDependency()) > 100 || len(e.GetMessage()) > 300 {
				t.Errorf("a refusal reported with a %d-byte name and a %d-byte message", len(e.GetDependency()), len(e.GetMessage()))
			}
		}
		sess.mu.Unlock()
	}
}

// A session holds at most --max-session-bytes of dependency state, all
// sessions --max-sessions-bytes: the dependency past either is refused
// (reason session_bytes, named in the refusal), its counts with it, and
// what the sessions hold is given back when they end.
func TestSessionBytesBounded(t *testing.T) {
	cfg := testConfig(t, "bounded")
	cfg.MaxSessionBytes = 10 * (followCost + 10) // ten dependencies of 10-byte names
	cfg.MaxSessionsBytes = 15 * (followCost + 10)
	a := startAgent(t, cfg)
	dep := func(i int) string { return fmt.Sprintf("dep-%06d", i) } // 10 bytes
	s1 := openSession(t, a)
	for i := range 12 {
		sendDeltas(t, s1, &fuseboxv1.DependencyCounts{Dependency: dep(i), Counts: &fuseboxv1.Counts{FirstAttempts: 1, Successes: 1}})
	}
	sstest.Eventually(t, 10*time.Second, "the 11th and 12th refused", func() bool { return refusedBy(t, a, "session_bytes") == 2 })
	for i := range 12 {
		if _, tracked := a.eng.Fleet(dep(i)); tracked != (i < 10) {
			t.Fatalf("%s tracked %v: a refused dependency's counts must not count", dep(i), tracked)
		}
	}
	s2 := openSession(t, a)
	for i := 100; i < 110; i++ {
		sendDeltas(t, s2, &fuseboxv1.DependencyCounts{Dependency: dep(i), Counts: &fuseboxv1.Counts{FirstAttempts: 1, Successes: 1}})
	}
	sstest.Eventually(t, 10*time.Second, "the second session stopped at the agent's bound", func() bool { return refusedBy(t, a, "session_bytes") == 2+5 })
	if got := a.sessionBytes.Load(); got != int64(cfg.MaxSessionsBytes) {
		t.Fatalf("sessions hold %d bytes, want the bound %d", got, cfg.MaxSessionsBytes)
	}
	if err := s1.CloseSend(); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the first session's bytes given back", func() bool { return a.sessionBytes.Load() == 5*(followCost+10) })
}

// One process reporting 2^24 successes every 50 ms to a dead dependency
// (which kept the fleet breaker and its own node-local breaker closed) is
// refused past --max-report-rate and counted: the breaker opens on the
// failures the honest clients report.
func TestReportRateBounded(t *testing.T) {
	cfg := testConfig(t, "rated")
	cfg.MaxReportRate = 10_000
	a := startAgent(t, cfg)
	const dead = "dead-dep"
	liar, honest := openSession(t, a), openSession(t, a)
	stop := time.NewTicker(50 * time.Millisecond)
	defer stop.Stop()
	deadline := time.Now().Add(20 * time.Second)
	for !a.rejects(dead) {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker never opened: rate_exceeded %v", refusedBy(t, a, "rate_exceeded"))
		}
		sendDeltas(t, liar, &fuseboxv1.DependencyCounts{Dependency: dead, Counts: &fuseboxv1.Counts{FirstAttempts: sharedstate.MaxDelta, Successes: sharedstate.MaxDelta}})
		sendDeltas(t, honest, &fuseboxv1.DependencyCounts{Dependency: dead, Counts: &fuseboxv1.Counts{FirstAttempts: 10, Failures: 10}})
		<-stop.C
	}
	if n := refusedBy(t, a, "rate_exceeded"); n == 0 {
		t.Fatal("no delta refused as rate_exceeded")
	}
	// Report's outcomes count against one bound per dependency as well.
	resp, err := dial(t, a.Agent).Report(ctxT(t, 5*time.Second), successes("reported", 20_000))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetErrors()) != 1 || !strings.Contains(resp.GetErrors()[0].GetMessage(), "--max-report-rate=10000") {
		t.Fatalf("a Report past the rate: %v, want one refusal naming --max-report-rate", resp.GetErrors())
	}
}

// rejects reports whether a first attempt at dep is refused.
func (a *testAgent) rejects(dep string) bool {
	return a.eng.Decide(dep, sharedstate.FirstAttempt).Verdict == sharedstate.Reject
}
