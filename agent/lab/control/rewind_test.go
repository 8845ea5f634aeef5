package control

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// TestEtcdRewindUnderTheFleet: a coordinator and three real agents on an
// etcd that is wiped and started again empty, or restored from a snapshot
// taken before the last changes (deploy/README.md, "Backups"). After the event every
// agent and the coordinator hold exactly what etcd holds (the forced-open
// override is gone, the policy is the snapshot's or none), `fuseboxctl
// deps` and `clear` agree with etcd, a compare-and-swap with a revision
// read before the event is refused, every fuseboxctl write afterwards
// reaches every agent, each one counts the rewind and is synced, and
// `fuseboxctl status` shows the rewind, the coordinator's and the agents'.
func TestEtcdRewindUnderTheFleet(t *testing.T) {
	for _, c := range []struct {
		name    string
		restore bool
	}{{"wipe", false}, {"snapshot restore", true}} {
		t.Run(c.name, func(t *testing.T) { testEtcdRewind(t, c.restore) })
	}
}

func testEtcdRewind(t *testing.T, restore bool) {
	f := startCoordinator(t, setup{})
	srv, co := f.EtcdServer(), f.Coordinator()
	agents := startAgents(t, f, 3)
	cli := embeddedtest.Client(t, srv)
	st, err := store.New(store.Config{Client: cli, Prefix: coordinator.DefaultEtcdPrefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const dep = "catalog"
	def := sharedstate.DefaultPolicy().Breaker.MinimumRequests
	// A history long enough that its revisions are past anything written
	// after a wipe.
	for i := range 30 {
		if _, err := st.PutPolicy(ctx, fmt.Sprintf("filler-%02d", i), []byte(`{}`), store.WriteOptions{Actor: "seed"}); err != nil {
			t.Fatal(err)
		}
	}
	policySet := func(min int, extra ...string) result {
		f := writeFile(t, "policy.json", fmt.Sprintf(`{"breaker": {"minimumRequests": %d}}`, min))
		return ctl(t, co, nil, append([]string{"policy", "set", dep, "-f", f, "-o", "json", "--yes"}, extra...)...)
	}
	ctl(t, co, nil, "policy", "set", dep, "-f", writeFile(t, "p25.json", `{"breaker": {"minimumRequests": 25}}`), "--yes").want(t, 0, nil, nil)
	waitFleet(t, agents, dep, 25, "")
	var snap string
	afterMin := def // what the policy is after the event
	if restore {
		snap = embeddedtest.Snapshot(t, cli)
		afterMin = 25
	}
	r := policySet(120)
	r.want(t, 0, nil, nil)
	var old policyDoc
	if err := json.Unmarshal([]byte(r.stdout), &old); err != nil || old.ModRevision == 0 {
		t.Fatalf("policy set -o json: %v: %s", err, r.stdout)
	}
	ctl(t, co, nil, "force-open", dep, "--reason", "incident 42").want(t, 0, nil, nil)
	waitFleet(t, agents, dep, 120, "forced-open")

	if restore {
		embeddedtest.Restore(t, srv, snap, embeddedtest.RestoreOptions{})
	} else {
		embeddedtest.Wipe(t, srv)
	}
	waitFleet(t, agents, dep, afterMin, "")
	sstest.EventuallyNoError(t, 15*time.Second, "fuseboxctl deps to show what etcd holds", func() error {
		r := ctl(t, co, nil, "deps", "-o", "json")
		var deps struct {
			Dependencies []dependencyDoc `json:"dependencies"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &deps); err != nil {
			return fmt.Errorf("%v: %v", err, r)
		}
		for _, d := range deps.Dependencies {
			if d.Dependency == dep && d.Override != "" {
				return fmt.Errorf("deps shows %s %s", dep, d.Override)
			}
		}
		return nil
	})
	ctl(t, co, nil, "clear", dep).want(t, 0, []string{"nothing cleared"}, nil)

	// A write that read the policy before the event is refused.
	r = policySet(30, "--expected-revision", fmt.Sprint(old.ModRevision))
	if restore {
		r.want(t, 3, nil, []string{"conflict"})
	} else {
		r.want(t, 3, nil, []string{"not from etcd's present history"})
	}
	// Every write afterwards reaches every agent.
	ctl(t, co, nil, "force-closed", dep, "--reason", "after").want(t, 0, nil, nil)
	policySet(30).want(t, 0, nil, nil)
	waitFleet(t, agents, dep, 30, "forced-closed")
	ctl(t, co, nil, "clear", dep).want(t, 0, nil, nil)
	waitFleet(t, agents, dep, 30, "")

	for i, a := range agents {
		if n := counterSum(t, f.Fleet, i, "fusebox_agent_etcd_rewinds_total"); n != 1 {
			t.Errorf("%s: fusebox_agent_etcd_rewinds_total %v, want 1", a.Name(), n)
		}
		if v := f.Metric(t, i, "fusebox_agent_etcd_synced"); v != 1 {
			t.Errorf("%s: fusebox_agent_etcd_synced %v, want 1", a.Name(), v)
		}
	}
	if m := scrape(t, co); !strings.Contains(m, `fusebox_coordinator_etcd_rewinds_total{reason="revision_went_back"} 1`) &&
		!strings.Contains(m, `fusebox_coordinator_etcd_rewinds_total{reason="history_changed"} 1`) {
		t.Errorf("the coordinator's /metrics does not count one rewind:\n%s", grepLines(m, "etcd_rewinds_total"))
	}

	// fuseboxctl status says so.
	sstest.EventuallyNoError(t, 20*time.Second, "fuseboxctl status to show the rewind, every agent synced after it", func() error {
		r := ctl(t, co, nil, "status", "-o", "json")
		var doc statusDoc
		if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
			return fmt.Errorf("%v: %v", err, r)
		}
		if e := doc.Etcd; e == nil || !e.Synced || e.Rewinds != 1 || e.LastRewind == nil {
			return fmt.Errorf("status etcd = %+v, want the coordinator synced after one rewind", e)
		}
		seen := 0
		for _, m := range doc.Members {
			if m.Role != "agent" {
				continue
			}
			if m.Etcd == nil || !m.Etcd.Synced || m.Etcd.Rewinds != 1 || m.Etcd.LastRewind == nil {
				return fmt.Errorf("status: agent %s etcd %+v, want synced after one rewind", m.Node, m.Etcd)
			}
			seen++
		}
		if seen != len(agents) {
			return fmt.Errorf("status lists %d agents, want %d", seen, len(agents))
		}
		return nil
	})
	r = ctl(t, co, nil, "members", "-o", "json")
	var ms struct {
		Members []memberDoc `json:"members"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ms); err != nil {
		t.Fatalf("members -o json: %v: %v", err, r)
	}
	for _, m := range ms.Members {
		if m.Role == "agent" && (m.Etcd == nil || m.Etcd.LastRewind == nil) {
			t.Errorf("members -o json: agent %s etcd %+v, want its last rewind", m.Node, m.Etcd)
		}
	}
	r = ctl(t, co, nil, "status")
	t.Logf("fuseboxctl status:\n%s", r.stdout)
	r.want(t, 0, []string{
		"Etcd:          cluster ", "the coordinator is synced", "Etcd rewind:   ", " -> ",
		"Agents' etcd:  3 synced, 0 not synced, 0 unknown (no registration); 3 saw a rewind, the last ",
	}, nil)
}

// waitFleet waits until every agent enforces minimumRequests min for dep
// and the override ov ("" for none).
func waitFleet(t *testing.T, agents []*agent.Agent, dep string, min int, ov string) {
	t.Helper()
	sstest.EventuallyNoError(t, 20*time.Second, fmt.Sprintf("every agent to enforce %s minimumRequests %d override %q", dep, min, ov), func() error {
		for _, a := range agents {
			got := ""
			if s := a.Engine().Snapshot(dep); s != nil && s.Override != sharedstate.OverrideNone {
				got = s.Override.String()
			}
			if m := a.Engine().Policy(dep).Breaker.MinimumRequests; m != min || got != ov {
				return fmt.Errorf("%s: minimumRequests %d, override %q", a.Name(), m, got)
			}
		}
		return nil
	})
}
