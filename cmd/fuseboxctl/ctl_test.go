package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

const (
	goodPolicy = `{"dependency":"shipping","breaker":{"minimumRequests":50},"retry":{"maxAttempts":5,"perAttemptTimeout":"500ms"}}`
	badPolicy  = `{"dependency":"shipping","breaker":{"failureRateThreshold":1.5,"minimumRequests":0},"retry":{"maxAttempts":0}}`
)

// messyPolicy has a bad duration, a wrong type, an unknown field and an
// out-of-range value: messyProblems are what a refusal must name.
const messyPolicy = `{"dependency":"shipping","breaker":{"window":"abc","minimumRequests":"5","colour":1},"retry":{"maxAttempts":0}}`

var messyProblems = []string{"4 violation(s)", `breaker.window: invalid duration "abc"`, `breaker.minimumRequests: must be an integer`,
	"breaker.colour: unknown field", "retry.maxAttempts: must be between 1 and 100"}

func TestPolicyCommands(t *testing.T) {
	c := startCoordinator(t, false)
	good := writeFile(t, "good.json", goodPolicy)
	bad := writeFile(t, "bad.json", badPolicy)

	ctl(t, c, nil, "policy", "get", "shipping", "--stored").want(t, 1, nil, []string{"policy shipping: none stored: it runs on the fleet default"})
	r := ctl(t, c, nil, "policy", "set", "--yes", "-f", good)
	r.want(t, 0, []string{"policy shipping written at revision"}, nil)

	r = ctl(t, c, nil, "policy", "get", "shipping", "-o", "json")
	r.want(t, 0, nil, nil)
	var doc struct {
		Dependency  string `json:"dependency"`
		ModRevision int64  `json:"modRevision"`
		Policy      struct {
			Breaker struct {
				MinimumRequests int `json:"minimumRequests"`
			} `json:"breaker"`
		} `json:"policy"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("policy get -o json: %v: %s", err, r.stdout)
	}
	if doc.Dependency != "shipping" || doc.ModRevision == 0 || doc.Policy.Breaker.MinimumRequests != 50 {
		t.Fatalf("policy get -o json = %+v", doc)
	}
	ctl(t, c, nil, "policy", "get", "shipping", "--stored").want(t, 0, []string{"\"minimumRequests\": 50", "\"schema\": 1"}, nil)
	ctl(t, c, nil, "policy", "get", "shipping", "-o", "yaml").want(t, 0, []string{"modRevision: ", "minimumRequests: 50"}, nil)
	ctl(t, c, nil, "policy", "get").want(t, 0, []string{"NAME", "REVISION", "shipping"}, nil)

	// Three violations: all three on stderr, exit 2, etcd unchanged.
	r = ctl(t, c, nil, "policy", "set", "--yes", "-f", bad)
	r.want(t, 2, nil, []string{"3 violation(s)", "breaker.failureRateThreshold", "breaker.minimumRequests", "retry.maxAttempts"})
	if n := strings.Count(r.stderr, "\n"); n != 4 {
		t.Errorf("want a header and one line per violation on stderr, got %d lines: %s", n, r.stderr)
	}
	r = ctl(t, c, nil, "policy", "get", "shipping", "-o", "json")
	var after struct {
		ModRevision int64 `json:"modRevision"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &after); err != nil || after.ModRevision != doc.ModRevision {
		t.Fatalf("the invalid policy changed etcd: revision %d → %d (%v)", doc.ModRevision, after.ModRevision, err)
	}

	// A stale --expected-revision conflicts: exit 3.
	ctl(t, c, nil, "policy", "set", "--yes", "shipping", "-f", good, "--expected-revision", fmt.Sprint(doc.ModRevision-1)).
		want(t, 3, nil, []string{"conflict"})
	ctl(t, c, nil, "policy", "set", "--yes", "shipping", "-f", good, "--expected-revision", fmt.Sprint(doc.ModRevision)).
		want(t, 0, []string{"written"}, nil)
	// NAME and the file's dependency field must agree.
	ctl(t, c, nil, "policy", "set", "--yes", "billing", "-f", good).want(t, 2, nil, []string{"dependency"})

	// Decoding problems and rule violations, all in one refusal with their paths.
	messy := writeFile(t, "messy.json", messyPolicy)
	ctl(t, c, nil, "policy", "set", "--yes", "-f", messy).want(t, 2, nil, messyProblems)

	ctl(t, c, nil, "policy", "rm", "shipping", "--yes").want(t, 0, []string{"policy shipping deleted"}, nil)
	ctl(t, c, nil, "policy", "rm", "shipping").want(t, 0, []string{"nothing deleted"}, nil)
	ctl(t, c, nil, "policy", "rm", "shipping", "--yes").want(t, 0, []string{"nothing deleted"}, nil)
	ctl(t, c, nil, "policy", "set", "--yes").want(t, 1, nil, []string{"file"})
}

func TestPolicyLintOffline(t *testing.T) {
	env := []string{"FUSEBOX_COORDINATOR=" + closedAddr(t)} // nobody there: lint never calls it
	bad := writeFile(t, "bad.json", badPolicy)
	r := ctl(t, nil, env, "policy", "lint", bad)
	r.want(t, 2, nil, []string{"3 violation(s)", "breaker.failureRateThreshold: must be in (0,1] (got 1.5)",
		"breaker.minimumRequests", "retry.maxAttempts"})

	good := writeFile(t, "good.json", goodPolicy)
	ctl(t, nil, env, "policy", "lint", "-f", good).want(t, 0, []string{"valid"}, nil)
	r = ctl(t, nil, env, "policy", "lint", good, "--deadline", "1s")
	r.want(t, 0, []string{"valid"}, []string{"warning: retry: maxAttempts × perAttemptTimeout + backoff", "exceeds the deadline 1s"})
	r = ctl(t, nil, env, "policy", "lint", good, "--deadline", "1s", "-o", "json")
	var doc lintDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || !doc.Valid || len(doc.Warnings) == 0 {
		t.Fatalf("lint -o json = %+v, %v", doc, err)
	}
	ctl(t, nil, env, "policy", "lint", writeFile(t, "typo.json", `{"breaker":{"minimumRequest":5}}`)).
		want(t, 2, nil, []string{"unknown field"})
	ctl(t, nil, env, "policy", "lint").want(t, 1, nil, []string{"no policy file"})

	// The throttle, concurrency and hedge sections: valid ones pass, a wrong
	// value in each is refused with its field path.
	shaped := `{"dependency": "shipping", "retry": {"hedge": {"delay": "50ms", "maxHedges": 1}},
		"throttle": {"enabled": true, "k": 1.5, "minRequests": 20}, "concurrency": {"maxInFlight": 200}}`
	ctl(t, nil, env, "policy", "lint", writeFile(t, "shaped.json", shaped)).want(t, 0, []string{"valid"}, nil)
	wrong := strings.NewReplacer(`"maxHedges": 1`, `"maxHedges": -1`, `"k": 1.5`, `"k": 0.5`, `"maxInFlight": 200`, `"maxInFlight": -2`).Replace(shaped)
	ctl(t, nil, env, "policy", "lint", writeFile(t, "wrong.json", wrong)).want(t, 2, nil,
		[]string{"3 violation(s)", "retry.hedge.maxHedges: must be between 0 and 10 (got -1)", "throttle.k: must be between 1 and 100",
			"concurrency.maxInFlight: must be between 0 and 10000000 (got -2)"})
	ctl(t, nil, env, "policy", "lint", writeFile(t, "messy.json", messyPolicy)).want(t, 2, nil, messyProblems)
}

func TestConcurrentEditsOneWins(t *testing.T) {
	c := startCoordinator(t, false)
	base := writeFile(t, "base.json", `{"dependency":"db","retry":{"maxAttempts":2}}`)
	ctl(t, c, nil, "policy", "set", "--yes", "-f", base).want(t, 0, nil, nil)
	r := ctl(t, c, nil, "policy", "get", "db", "-o", "json")
	var doc policyDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatal(err)
	}
	rev := fmt.Sprint(doc.ModRevision)

	files := []string{
		writeFile(t, "a.json", `{"dependency":"db","retry":{"maxAttempts":4}}`),
		writeFile(t, "b.json", `{"dependency":"db","retry":{"maxAttempts":5}}`),
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = ctl(t, c, nil, "policy", "set", "--yes", "-f", files[i], "--expected-revision", rev, "--actor", []string{"ann", "ben"}[i])
		}()
	}
	wg.Wait()
	codes := map[int]int{}
	winner := ""
	for i, r := range results {
		codes[r.code]++
		if r.code == 0 {
			winner = []string{"ann", "ben"}[i]
		}
		if r.code == 3 && !strings.Contains(r.stderr, "conflict") {
			t.Errorf("loser's stderr: %v", r)
		}
	}
	if codes[0] != 1 || codes[3] != 1 {
		t.Fatalf("exit codes %v, want one 0 and one 3: %v %v", codes, results[0], results[1])
	}
	r = ctl(t, c, nil, "audit", "--dependency", "db", "-o", "json")
	var audit struct {
		Entries []auditDoc `json:"entries"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &audit); err != nil {
		t.Fatal(err)
	}
	if len(audit.Entries) != 2 || audit.Entries[0].Actor != winner+" (loopback)" || audit.Entries[1].Actor != "tester@"+hostname(t)+" (loopback)" {
		t.Fatalf("audit = %+v, want the winner %s over the first write", audit.Entries, winner)
	}
	ctl(t, c, nil, "audit").want(t, 0, []string{"REVISION", "policy.put", winner + " (loopback)",
		"created: retry.maxAttempts: - → 2", "retry.maxAttempts: 2 → "}, nil)

	// policy edit: a successful edit, then one that loses to a write made
	// while the editor is open (the editor script makes that write).
	editor := writeFile(t, "editor.sh", "#!/bin/sh\nsed -i 's/\"maxAttempts\": [0-9]*/\"maxAttempts\": 7/' \"$1\"\n")
	ctl(t, c, []string{"EDITOR=sh " + editor}, "policy", "edit", "db", "--yes").want(t, 0, []string{"policy db written at revision"}, nil)
	ctl(t, c, nil, "policy", "get", "db", "--stored").want(t, 0, []string{`"maxAttempts": 7`}, nil)
	ctl(t, c, []string{"EDITOR=sh " + editor}, "policy", "edit", "db", "--yes").want(t, 0, []string{"unchanged"}, nil)

	racer := writeFile(t, "racer.sh", fmt.Sprintf("#!/bin/sh\n%s policy set --yes -f %s >/dev/null || exit 9\nsed -i 's/\"maxAttempts\": [0-9]*/\"maxAttempts\": 8/' \"$1\"\n",
		ctlBinary, files[0]))
	r = ctl(t, c, []string{"EDITOR=sh " + racer}, "policy", "edit", "db", "--yes")
	r.want(t, 3, nil, []string{"conflict", "your edit is kept in"})
	ctl(t, c, nil, "policy", "get", "db", "--stored").want(t, 0, []string{`"maxAttempts": 4`}, nil)

	// An edit of a policy that does not exist starts from a skeleton and
	// creates it only if still absent.
	ctl(t, c, []string{"EDITOR=sh " + writeFile(t, "new.sh", "#!/bin/sh\necho '{\"dependency\":\"fresh\",\"breaker\":{\"mode\":\"shadow\"}}' > \"$1\"\n")},
		"policy", "edit", "fresh", "--yes").want(t, 0, []string{"policy fresh written"}, nil)
}

func hostname(t *testing.T) string {
	t.Helper()
	r := strings.SplitN(defaultActor(), "@", 2)
	if len(r) != 2 {
		t.Fatalf("defaultActor() = %q", defaultActor())
	}
	return r[1]
}

func TestAuthExitCodes(t *testing.T) {
	c := startCoordinator(t, true)
	viewerFile := writeFile(t, "viewer", viewerToken+"\n")

	ctl(t, c, nil, "deps").want(t, 5, nil, []string{"refused", "missing or invalid bearer token"})
	ctl(t, c, []string{"FUSEBOX_TOKEN=not-a-token-0123456789"}, "deps").want(t, 5, nil, []string{"unknown token"})
	ctl(t, c, nil, "--token-file", viewerFile, "deps").want(t, 0, []string{"No dependencies yet"}, nil)
	ctl(t, c, nil, "--token-file", viewerFile, "force-open", "payments", "--reason", "drill").
		want(t, 5, nil, []string{"permission denied", "needs role admin"})
	ctl(t, c, nil, "watch").want(t, 5, nil, []string{"refused", "missing or invalid bearer token"})
	ctl(t, c, nil, "--token-file", viewerFile, "watch", "--dependency", "bad name!").want(t, 2, nil, []string{"invalid dependency name"})

	admin := []string{"FUSEBOX_TOKEN=" + adminToken}
	r := ctl(t, c, admin, "force-open", "payments", "--ttl", "10m", "--reason", "drill", "--actor", "eve")
	r.want(t, 0, []string{"payments forced-open until", "by eve (ops-admin)"}, nil)
	r = ctl(t, c, admin, "force-closed", "search", "-o", "json")
	var ov overrideDoc
	if err := json.Unmarshal([]byte(r.stdout), &ov); err != nil || ov.State != "forced-closed" || ov.Expires != nil {
		t.Fatalf("force-closed -o json = %+v, %v", ov, err)
	}
	// status reads the overrides (the fleet view follows etcd's watch).
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = ctl(t, c, admin, "status")
		if strings.Contains(r.stdout, "Overrides:     1 forced-open, 1 forced-closed") && strings.Contains(r.stdout, "payments") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status = %v", r)
		}
	}
	r = ctl(t, c, admin, "status", "-o", "json")
	var st statusDoc
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Overrides) != 2 || st.Overrides[0].Actor != "eve (ops-admin)" {
		t.Fatalf("status -o json = %+v, %v", st, err)
	}
	ctl(t, c, admin, "clear", "payments").want(t, 0, []string{"override on payments cleared"}, nil)
	ctl(t, c, admin, "clear", "payments").want(t, 0, []string{"nothing cleared"}, nil)
	ctl(t, c, admin, "force-open", "bad name!").want(t, 2, nil, []string{"invalid dependency name"})
	ctl(t, c, admin, "audit", "--dependency", "payments").want(t, 0, []string{"override.set", "forced-open until ", "\"drill\"",
		"override.clear", "cleared forced-open \"drill\"", "eve (ops-admin)"}, nil)
}

func TestUnreachableAndUsage(t *testing.T) {
	addr := closedAddr(t)
	ctl(t, nil, []string{"FUSEBOX_COORDINATOR=" + addr}, "deps").want(t, 4, nil, []string{"coordinator " + addr + " unreachable"})
	ctl(t, nil, nil, "--coordinator", addr, "status").want(t, 4, nil, []string{addr})
	ctl(t, nil, nil, "--coordinator", addr, "force-open", "x").want(t, 4, nil, []string{addr})
	ctl(t, nil, nil, "deps", "-o", "xml").want(t, 1, nil, []string{"-o must be table, json or yaml"})
	ctl(t, nil, nil, "deps", "--bogus").want(t, 1, nil, []string{"unknown flag"})
	ctl(t, nil, nil, "dep", "show").want(t, 1, nil, []string{"fuseboxctl: dep show: missing argument NAME, the dependency (usage: fuseboxctl dep show NAME"})
	ctl(t, nil, nil, "completion", "bash").want(t, 0, []string{"bash completion"}, nil)
	ctl(t, nil, nil, "completion", "zsh").want(t, 0, []string{"compdef"}, nil)
	ctl(t, nil, nil, "--help").want(t, 0, []string{"Exit codes", "force-open"}, nil)
}

// TestFleetViews feeds the coordinator's observer from a gossip member in
// role agent and checks deps, dep show, members and watch.
func TestFleetViews(t *testing.T) {
	c := startCoordinator(t, false)
	h := &stateHandler{state: &fuseboxv1.PushPullState{Node: "web-1",
		Records: []*fuseboxv1.BreakerRecord{{Dependency: "shipping", Generation: 2, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN,
			SinceUnixNano: time.Now().UnixNano(), OpenCount: 1, Origin: "web-1", Reason: "failure rate 75%"}},
		Rows: []*fuseboxv1.NodeWindow{{Node: "web-1", Zone: "eu-1a", Dependency: "shipping", Seq: 1,
			Counts: &fuseboxv1.Counts{FirstAttempts: 40, Retries: 2, Successes: 10, Failures: 30}, InFlight: 5}}}}
	gc := gossip.DefaultConfig()
	gc.Name, gc.BindAddr = "web-1", "127.0.0.1:0"
	gc.Meta = gossip.NodeMeta{Role: gossip.RoleAgent, Zone: "eu-1a", Software: "1.2.3"}
	gc.Handler, gc.Logger = h, discardLogger()
	gc.GossipInterval, gc.ProbeInterval, gc.PushPullInterval = 50*time.Millisecond, 200*time.Millisecond, 500*time.Millisecond
	// It signs its own rows and records, with the key of its etcd entry.
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	gc.Signer = key
	g, err := gossip.New(gc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(0) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg, err := c.Store().Register(ctx, store.Member{Node: "web-1", Role: "agent", GossipAddr: g.Addr(),
		PublicKey: gossip.EncodeKey(key.Public().(ed25519.PublicKey)), Wire: int(protocol.MaxVersion)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if _, err := g.Join([]string{c.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var r result
	for {
		r = ctl(t, c, nil, "deps")
		if strings.Contains(r.stdout, "shipping") && strings.Contains(r.stdout, "open") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deps never showed shipping open: %v", r)
		}
	}
	r.want(t, 0, []string{"DEPENDENCY", "STATE", "shipping", "75.0%", "enforce"}, nil)

	r = ctl(t, c, nil, "deps", "-o", "json")
	var deps struct {
		Dependencies []dependencyDoc `json:"dependencies"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &deps); err != nil || len(deps.Dependencies) != 1 {
		t.Fatalf("deps -o json = %v (%v)", r, err)
	}
	if d := deps.Dependencies[0]; d.State != "open" || d.Generation != 2 || d.FailureRate != 0.75 || d.Fleet.FirstAttempts != 40 || d.Mode != "enforce" {
		t.Fatalf("deps -o json = %+v", d)
	}
	ctl(t, c, nil, "dep", "show", "shipping").want(t, 0, []string{"Dependency:   shipping", "State:        open (generation 2",
		"Reason:       failure rate 75%", "Trip rule:    lower bound at 95% confidence, fast path on",
		"over >= 20 requests from >= 2 failing node(s), window 10s", "NODE", "web-1", "eu-1a", "ZONE", "Throttle:     off", "In flight:    5 (no limit)", "IN-FLIGHT"}, nil)
	r = ctl(t, c, nil, "dep", "show", "shipping", "-o", "json")
	var one dependencyDoc
	if err := json.Unmarshal([]byte(r.stdout), &one); err != nil || len(one.Nodes) != 1 || one.Nodes[0].Node != "web-1" || one.Nodes[0].Counts.Failures != 30 ||
		one.InFlight != 5 || one.Nodes[0].InFlight != 5 || one.ThrottleEnabled {
		t.Fatalf("dep show -o json = %+v (%v)", one, err)
	}
	if tr := one.TripRule; tr == nil || tr.Confidence != 0.95 || !tr.FastPath || tr.MinimumRequests != 20 {
		t.Errorf("dep show -o json: tripRule %+v, want the default policy's", tr)
	}
	// With throttling and a concurrency limit in the policy, dep show shows
	// the fleet's throttle probability and in-flight calls against the limit.
	shaped := writeFile(t, "shaped.json", `{"dependency": "shipping", "throttle": {"enabled": true, "k": 2, "minRequests": 10},
		"concurrency": {"maxInFlight": 20}}`)
	ctl(t, c, nil, "policy", "set", "--yes", "-f", shaped).want(t, 0, nil, nil)
	// 40 requests, 10 accepts: (40 − 2·10)/41 = 48.8%.
	deadline = time.Now().Add(10 * time.Second)
	for {
		r = ctl(t, c, nil, "dep", "show", "shipping")
		if strings.Contains(r.stdout, "Throttle:     refusing 48.8% of first attempts") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dep show never showed the throttle: %v", r)
		}
	}
	r.want(t, 0, []string{"In flight:    5 of 20 (25.0% of the fleet limit)"}, nil)
	ctl(t, c, nil, "dep", "show", "nothing-here").want(t, 1, nil, []string{"nothing-here"})
	ctl(t, c, nil, "members").want(t, 0, []string{"NODE", "WIRE", "SIGNS", "web-1", "agent", "eu-1a", "1.2.3", "alive", "observer", "yes"}, nil)
	ctl(t, c, nil, "status").want(t, 0, []string{"1 agent(s) alive in zones eu-1a, 1 observer(s)", "1 open", "shipping"}, nil)

	// watch: start it, wait until the coordinator subscribed it, then
	// change things.
	cmd := ctlCommand(t, c, nil, "watch", "--count", "3", "-o", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, bufio.NewReader(stderr), "watching", 10*time.Second)
	a := adminConn(t, c)
	ctx = t.Context()
	if _, err := a.ForceClosed(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "shipping", Reason: "known noisy", Ttl: durationpb.New(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	h.set(&fuseboxv1.PushPullState{Node: "web-1", Records: []*fuseboxv1.BreakerRecord{{Dependency: "shipping", Generation: 3,
		State: fuseboxv1.BreakerState_BREAKER_STATE_CLOSED, SinceUnixNano: time.Now().UnixNano(), Origin: "web-1"}}})
	g.SendDirect(h.get().Records)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch: %v; stdout %s", err, out.String())
	}
	evs := parseEvents(t, out.String())
	seen := map[string]bool{}
	for _, e := range evs {
		seen[e.Type+":"+e.Previous+"->"+e.State] = true
	}
	// Only a half-open breaker closes: the record of the close shows the
	// half-open the stand-in agent went through.
	if len(evs) != 3 || !seen["override:->forced-closed"] || !seen["transition:open->half-open"] || !seen["transition:half-open->closed"] {
		t.Fatalf("watch printed %+v", evs)
	}
}

// stateHandler is the gossip handler of a stand-in agent.
type stateHandler struct {
	mu    sync.Mutex
	state *fuseboxv1.PushPullState
}

func (h *stateHandler) ApplyBatch(*fuseboxv1.GossipBatch) (*fuseboxv1.GossipBatch, int) {
	return nil, 0
}
func (h *stateHandler) ApplyState(*fuseboxv1.PushPullState, bool) (*fuseboxv1.GossipBatch, int) {
	return nil, 0
}
func (h *stateHandler) LocalState(bool) *fuseboxv1.PushPullState { return h.get() }
func (h *stateHandler) get() *fuseboxv1.PushPullState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}
func (h *stateHandler) set(s *fuseboxv1.PushPullState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state = s
}
