package coordinator

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fusebox-dev/fusebox/coordinator/internal/events"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// fakeAgent is a gossip member in role agent whose push-pull state is set
// by the test: what a real agent would gossip, without its engine.
type fakeAgent struct {
	g   *gossip.Gossip
	key ed25519.PrivateKey // what it signs its own rows and records with

	mu    sync.Mutex
	state *fuseboxv1.PushPullState
}

func (f *fakeAgent) ApplyBatch(*fuseboxv1.GossipBatch) (*fuseboxv1.GossipBatch, int) { return nil, 0 }
func (f *fakeAgent) ApplyState(*fuseboxv1.PushPullState, bool) (*fuseboxv1.GossipBatch, int) {
	return nil, 0
}
func (f *fakeAgent) LocalState(bool) *fuseboxv1.PushPullState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

func (f *fakeAgent) setState(s *fuseboxv1.PushPullState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = s
}

func startFakeAgent(t *testing.T, name, zone string) *fakeAgent {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAgent{key: key}
	gc := gossip.DefaultConfig()
	gc.Signer = key
	gc.Name, gc.BindAddr = name, "127.0.0.1:0"
	gc.Meta = gossip.NodeMeta{Role: gossip.RoleAgent, Zone: zone, Software: "test"}
	gc.Handler, gc.Logger = f, testLogger()
	gc.GossipInterval, gc.ProbeInterval, gc.PushPullInterval = 50*time.Millisecond, 200*time.Millisecond, 500*time.Millisecond
	g, err := gossip.New(gc)
	if err != nil {
		t.Fatal(err)
	}
	f.g = g
	t.Cleanup(func() { _ = g.Close(0) })
	return f
}

// sseClient reads /api/v1/events into a channel until the test ends.
func sseClient(t *testing.T, httpAddr, token string) <-chan events.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/api/v1/events", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		resp.Body.Close()
		t.Fatalf("GET /api/v1/events: %s", resp.Status)
	}
	ch := make(chan events.Event, 64)
	done := make(chan struct{})
	br := bufio.NewReader(resp.Body)
	// The stream starts with a comment line once the subscription exists.
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, ":") {
		t.Fatalf("first SSE line = %q, %v", line, err)
	}
	go func() {
		defer close(done)
		defer close(ch)
		for { // bounded by the response body, closed at cleanup
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
				var e events.Event
				if json.Unmarshal([]byte(data), &e) == nil {
					select {
					case ch <- e:
					default:
					}
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return ch
}

// waitEvent returns the first event matching match within d.
func waitEvent(t *testing.T, ch <-chan events.Event, d time.Duration, what string, match func(events.Event) bool) events.Event {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("event stream ended while waiting for %s", what)
			}
			if match(e) {
				return e
			}
		case <-timer.C:
			t.Fatalf("no %s event within %v", what, d)
		}
	}
}

func TestFleetObserverFollowsTheGossip(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	a := adminClient(t, c.GRPCAddr(), "")
	ctx := ctxFor(t, 30*time.Second)
	evs := sseClient(t, c.HTTPAddr(), "")
	// The first record stays open for the whole test however slow the
	// machine: the observer derives half-open once the policy's open
	// duration has passed since the record's open.
	if _, err := a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "shipping-api", Actor: "t",
		PolicyJson: []byte(`{"breaker": {"openDuration": "5m", "maxOpenDuration": "5m", "fleetMaxOpenDuration": "5m"}}`)}); err != nil {
		t.Fatalf("PutPolicy: %v", err)
	}

	ag1, ag2 := startFakeAgent(t, "agent-1", "zone-a"), startFakeAgent(t, "agent-2", "zone-b")
	register(t, c.Store(), ag1) // the observer takes what an agent signs with its registered key
	register(t, c.Store(), ag2)
	now := time.Now()
	record := &fuseboxv1.BreakerRecord{Dependency: "shipping-api", Generation: 3, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN,
		SinceUnixNano: now.UnixNano(), OpenCount: 1, Origin: "agent-1", Reason: "failure rate 80%"}
	ag1.setState(&fuseboxv1.PushPullState{Node: "agent-1", Records: []*fuseboxv1.BreakerRecord{record},
		Rows: []*fuseboxv1.NodeWindow{{Node: "agent-1", Zone: "zone-a", Dependency: "shipping-api", Seq: 7,
			Counts:     &fuseboxv1.Counts{FirstAttempts: 100, Retries: 5, Successes: 20, Failures: 80},
			Cumulative: &fuseboxv1.Counts{FirstAttempts: 100, Retries: 5, Successes: 20, Failures: 80}, CumulativeSinceUnixMs: now.UnixMilli(), CumulativeAgeMs: 1}}})
	ag2.setState(&fuseboxv1.PushPullState{Node: "agent-2",
		Rows: []*fuseboxv1.NodeWindow{{Node: "agent-2", Zone: "zone-b", Dependency: "shipping-api", Seq: 2, NodeLocalOpen: true,
			Counts:     &fuseboxv1.Counts{FirstAttempts: 50, Successes: 10, Failures: 40, SlowCalls: 10},
			Cumulative: &fuseboxv1.Counts{FirstAttempts: 50, Successes: 10, Failures: 40, SlowCalls: 10}, CumulativeSinceUnixMs: now.UnixMilli(), CumulativeAgeMs: 1}}})
	for _, f := range []*fakeAgent{ag1, ag2} {
		if _, err := f.g.Join([]string{c.GossipAddr()}); err != nil {
			t.Fatal(err)
		}
	}

	var d *fuseboxv1.DependencyView
	sstest.Eventually(t, 10*time.Second, "the fleet view to show both agents' rows", func() bool {
		snap, err := a.GetFleet(ctx, &fuseboxv1.GetFleetRequest{Dependency: "shipping-api"})
		if err != nil || len(snap.GetDependencies()) != 1 {
			return false
		}
		d = snap.GetDependencies()[0]
		return len(d.GetNodes()) == 2 && d.GetGeneration() == 3
	})
	if d.GetState() != fuseboxv1.BreakerState_BREAKER_STATE_OPEN || d.GetReason() != "failure rate 80%" || d.GetOpenCount() != 1 {
		t.Errorf("breaker = %v gen %d reason %q", d.GetState(), d.GetGeneration(), d.GetReason())
	}
	if f := d.GetFleet(); f.GetFirstAttempts() != 150 || f.GetFailures() != 120 || f.GetSuccesses() != 30 || f.GetRetries() != 5 {
		t.Errorf("fleet counts = %v", f)
	}
	if d.GetFailureRate() != 0.8 || len(d.GetZones()) != 2 || d.GetZones()[0].GetZone() != "zone-a" {
		t.Errorf("failure rate %v, zones %v", d.GetFailureRate(), d.GetZones())
	}
	if got := d.GetNodeLocalOpen(); len(got) != 1 || got[0] != "agent-2" {
		t.Errorf("node-local opens = %v, want [agent-2]", got)
	}
	// budget = max(10/s × 10s, 0.1 × 150) = 100; 5 retries used.
	if d.GetBudgetUsed() != 0.05 {
		t.Errorf("budget used = %v, want 0.05", d.GetBudgetUsed())
	}
	e := waitEvent(t, evs, 5*time.Second, "transition", func(e events.Event) bool {
		return e.Type == events.TypeTransition && e.Dependency == "shipping-api"
	})
	if e.State != "open" || e.Generation != 3 || e.Origin != "agent-1" {
		t.Errorf("transition event = %+v", e)
	}

	// The observer is a member but never an agent: agents count only agents.
	sstest.Eventually(t, 10*time.Second, "agent-1 to see 3 members of which 2 agents (the observer is not one)", func() bool {
		return len(ag1.g.Members()) == 3 && ag1.g.NumAgents() == 2
	})
	members, err := a.ListMembers(ctx, &fuseboxv1.ListMembersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]string{}
	for _, m := range members.GetMembers() {
		roles[m.GetNode()] = m.GetRole() + "/" + m.GetStatus()
	}
	if roles["agent-1"] != "agent/alive" || roles["agent-2"] != "agent/alive" || roles[c.cfg.Name] != "observer/alive" {
		t.Errorf("members = %v", roles)
	}

	// Half-open is derived from the policy: a record opened long ago.
	old := now.Add(-10 * time.Minute)
	record2 := &fuseboxv1.BreakerRecord{Dependency: "shipping-api", Generation: 4, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN,
		SinceUnixNano: old.UnixNano(), OpenCount: 1, Origin: "agent-2"}
	ag2.g.SendDirect([]*fuseboxv1.BreakerRecord{record2})
	sstest.Eventually(t, 10*time.Second, "half-open with probers", func() bool {
		snap, err := a.GetFleet(ctx, &fuseboxv1.GetFleetRequest{Dependency: "shipping-api"})
		if err != nil {
			return false
		}
		d = snap.GetDependencies()[0]
		return d.GetState() == fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN
	})
	// halfOpenProbes 3, two agents with traffic, but agent-2's own breaker
	// is open: the agents leave it out (sharedstate.ProbeCandidates).
	if got := d.GetProbers(); len(got) != 1 || got[0] != "agent-1" {
		t.Errorf("probers = %v, want [agent-1] (agent-2 is node-local open)", got)
	}
	waitEvent(t, evs, 5*time.Second, "half-open transition", func(e events.Event) bool {
		return e.Type == events.TypeTransition && e.State == "half-open" && e.Generation == 4
	})

	// An agent leaving takes its rows with it.
	if err := ag2.g.Close(time.Second); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "agent-2's rows to go", func() bool {
		snap, err := a.GetFleet(ctx, &fuseboxv1.GetFleetRequest{Dependency: "shipping-api"})
		return err == nil && len(snap.GetDependencies()[0].GetNodes()) == 1
	})

	// The JSON API, and the history: the agents' cumulative counts (they
	// began after the coordinator did) and the breaker's states.
	body := httpGet(t, "http://"+c.HTTPAddr()+"/api/v1/fleet?dependency=shipping-api", "", http.StatusOK)
	var snap fuseboxv1.FleetSnapshot
	if err := protojson.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatalf("/api/v1/fleet: %v: %s", err, body)
	}
	if len(snap.GetDependencies()) != 1 || snap.GetDependencies()[0].GetState() != fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN ||
		len(snap.GetMembers()) != 3 {
		t.Errorf("/api/v1/fleet = %s", body)
	}
	sstest.EventuallyNoError(t, 10*time.Second, "the history of both agents' calls", func() error {
		body := httpGet(t, "http://"+c.HTTPAddr()+"/api/v1/series?dependency=shipping-api&since=1m", "", http.StatusOK)
		var s struct {
			Points []struct {
				FirstAttempts uint64 `json:"firstAttempts"`
				Failures      uint64 `json:"failures"`
			} `json:"points"`
			States []struct {
				State string `json:"state"`
			} `json:"states"`
		}
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			return err
		}
		var first, failures uint64
		for _, p := range s.Points {
			first += p.FirstAttempts
			failures += p.Failures
		}
		if first != 150 || failures != 120 || len(s.States) == 0 {
			return fmt.Errorf("/api/v1/series = %s", body)
		}
		return nil
	})
}

func httpGet(t *testing.T, url, token string, want int) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %s, want %d: %s", url, resp.Status, want, b)
	}
	return string(b)
}

func TestEventsStreamOverridesAndPolicies(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)
	httpGet(t, "http://"+c.HTTPAddr()+"/api/v1/events", "", http.StatusUnauthorized)
	httpGet(t, "http://"+c.HTTPAddr()+"/api/v1/fleet", "wrong-token-0123456789", http.StatusUnauthorized)
	httpGet(t, "http://"+c.HTTPAddr()+"/healthz", "", http.StatusOK)
	httpGet(t, "http://"+c.HTTPAddr()+"/", "", http.StatusOK)
	httpGet(t, "http://"+c.HTTPAddr()+"/nothing-here", "", http.StatusNotFound)

	evs := sseClient(t, c.HTTPAddr(), viewerToken)
	a := adminClient(t, c.GRPCAddr(), adminToken)
	ctx := ctxFor(t, 20*time.Second)
	if _, err := a.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "mail", Reason: "vendor outage", Actor: "dana"}); err != nil {
		t.Fatal(err)
	}
	e := waitEvent(t, evs, 5*time.Second, "override", func(e events.Event) bool { return e.Type == events.TypeOverride })
	if e.Dependency != "mail" || e.State != "forced-open" || e.Reason != "vendor outage" || e.Actor != "dana (ops-admin)" {
		t.Errorf("override event = %+v", e)
	}
	if _, err := a.ClearOverride(ctx, &fuseboxv1.ClearOverrideRequest{Dependency: "mail"}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, evs, 5*time.Second, "override cleared", func(e events.Event) bool {
		return e.Type == events.TypeOverride && e.State == "none" && e.Dependency == "mail"
	})
	if _, err := a.PutPolicy(ctx, &fuseboxv1.PutPolicyRequest{Dependency: "mail", PolicyJson: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, evs, 5*time.Second, "policy", func(e events.Event) bool {
		return e.Type == events.TypePolicy && e.State == "put" && e.Dependency == "mail"
	})
}

// The observer verifies what agents sign, as agents do: an agent whose
// gossip is signed with another key than the one of its etcd entry (what
// a host that forges in its name would send) shows no row and no record
// in the fleet view; its failed signatures are counted.
func TestObserverVerifiesSignatures(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	a := adminClient(t, c.GRPCAddr(), "")
	honest, forger := startFakeAgent(t, "agent-1", "zone-a"), startFakeAgent(t, "agent-2", "zone-a")
	register(t, c.Store(), honest)
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signedWith := forger.key
	forger.key = other // its entry names a key it does not sign with
	register(t, c.Store(), forger)
	forger.key = signedWith
	now := time.Now().UnixNano()
	for _, f := range []*fakeAgent{honest, forger} {
		name := f.g.Name()
		f.setState(&fuseboxv1.PushPullState{Node: name,
			Records: []*fuseboxv1.BreakerRecord{{Dependency: "dep-" + name, Generation: 1, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN,
				SinceUnixNano: now, OpenCount: 1, Origin: name}},
			Rows: []*fuseboxv1.NodeWindow{{Node: name, Zone: "zone-a", Dependency: "dep-" + name, Seq: 1,
				Counts: &fuseboxv1.Counts{FirstAttempts: 10, Failures: 10}}}})
		if _, err := f.g.Join([]string{c.GossipAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := ctxFor(t, 30*time.Second)
	sstest.Eventually(t, 10*time.Second, "the honest agent's row and record shown, the forger's signatures counted", func() bool {
		snap, err := a.GetFleet(ctx, &fuseboxv1.GetFleetRequest{Dependency: "dep-agent-1"})
		return err == nil && len(snap.GetDependencies()) == 1 && len(snap.GetDependencies()[0].GetNodes()) == 1 &&
			c.gossipNode().Stats().BadSignatures["agent-2"] >= 2
	})
	if _, err := a.GetFleet(ctx, &fuseboxv1.GetFleetRequest{Dependency: "dep-agent-2"}); status.Code(err) != codes.NotFound {
		t.Fatalf("the forger's dependency: %v, want NotFound (nothing of it taken)", err)
	}
}
