package control

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// incidentPolicy reopens after 1 s, 2 s, then 4 s: a dependency dead for
// 5 s is an open, two failed probes and a close.
const incidentPolicy = `{"dependency":"ledger-api","breaker":{"openDuration":"1s","maxOpenDuration":"4s"}}`

// incident makes calls to dep from each agent every 20 ms, as clientlib
// does (first attempts from the snapshot, probes through AcquireProbe and
// ProbeResult): healthy for 3 s, failing for 5 s, then healthy, until the
// returned stop (idempotent, also run at the test's end) is called. It
// returns when the calls began.
func incident(t *testing.T, agents []*agent.Agent, dep string) (time.Time, func()) {
	confirm(t, agents, dep)
	start := time.Now()
	dead := func() bool { el := time.Since(start); return el >= 3*time.Second && el < 8*time.Second }
	stop := make(chan struct{})
	wg := drive(agents, dep, dead, stop)
	var once sync.Once
	end := func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(end)
	return start, end
}

// drive makes the calls of incident, each failing while dead says so,
// until stop is closed.
func drive(agents []*agent.Agent, dep string, dead func() bool, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := a.Engine()
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				o := sharedstate.Success
				if dead() {
					o = sharedstate.Failure
				}
				switch d := e.Snapshot(dep).DecideFirst(); d.Verdict {
				case sharedstate.Reject:
					_ = e.Record(dep, sharedstate.FirstAttempt, sharedstate.Rejected)
				case sharedstate.AllowProbe:
					p := e.AcquireProbe(dep)
					if !p.Allowed() {
						continue // AcquireProbe counted the rejection
					}
					_ = e.Record(dep, sharedstate.Probe, o)
					if p.Verdict == sharedstate.AllowProbe {
						e.ProbeResult(dep, o == sharedstate.Success)
					}
				default:
					_ = e.Record(dep, sharedstate.FirstAttempt, o)
				}
			}
		}()
	}
	return &wg
}

// changes are a timeline's transitions: every open (a new generation) and
// every return to closed.
func changes(ivs []*fuseboxv1.SimulatedInterval) []string {
	var out []string
	prev, gen := "closed", uint64(0)
	for _, iv := range ivs {
		st := iv.GetState()
		switch {
		case st == "open" && (prev != "open" || iv.GetGeneration() != gen):
			out = append(out, "open@"+iv.GetFrom().AsTime().Format("15:04:05.000"))
		case st == "closed" && prev != "closed":
			out = append(out, "closed@"+iv.GetFrom().AsTime().Format("15:04:05.000"))
		}
		prev, gen = st, iv.GetGeneration()
	}
	return out
}

func changeTimes(t *testing.T, cs []string) []time.Time {
	var out []time.Time
	for _, c := range cs {
		_, at, _ := strings.Cut(c, "@")
		tm, err := time.Parse("15:04:05.000", at)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tm)
	}
	return out
}

// TestReplayMatchesTheAgents: three real agents (real memberlist, the
// coordinator's embedded etcd) live through an incident: their dependency
// dies for 5 s and recovers; their breaker opens, fails two probes and
// closes. The coordinator's history of it, replayed under the same policy
// (SimulatePolicy), opens and closes as the agents did: the same sequence,
// each change within 1 s of theirs. The tolerance is that of the history's
// dates: rows reach the observer a gossip round or more after the agents
// counted them (more on a loaded machine), and the replay steps in 100 ms
// sub-buckets. The agents' later reopens follow their first open by the
// open durations, so an offset of the first carries over; the probes'
// outcomes are those the agents' probes had, from their records.
func TestReplayMatchesTheAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and three agents")
	}
	const dep = "ledger-api"
	f := startCoordinator(t, setup{})
	c := f.Coordinator()
	ctx := ctxFor(t, 60*time.Second)
	if _, err := c.Store().PutPolicy(ctx, dep, []byte(incidentPolicy), store.WriteOptions{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	agents := startAgents(t, f, 3)
	admin := adminClient(t, c.GRPCAddr(), "")
	sstest.Eventually(t, 20*time.Second, "the policy on every agent, and the observer seeing the three agents", func() bool {
		for _, a := range agents {
			if a.Engine().Policy(dep).Breaker.OpenDuration.Std() != time.Second {
				return false
			}
		}
		return observed(ctx, admin) == 3
	})

	start, stop := incident(t, agents, dep)
	var resp *fuseboxv1.SimulatePolicyResponse
	sstest.EventuallyNoError(t, 40*time.Second, "the agents' breaker to have opened and closed again, in the coordinator's history", func() error {
		if time.Since(start) < 9*time.Second {
			return fmt.Errorf("the incident is not over (%v)", time.Since(start).Round(time.Second))
		}
		r, err := admin.SimulatePolicy(ctx, &fuseboxv1.SimulatePolicyRequest{Dependency: dep, PolicyJson: []byte(incidentPolicy),
			Since: durationpb.New(time.Since(start) + 2*time.Second)})
		if err != nil {
			return err
		}
		cs := changes(r.GetFleetStates())
		if len(cs) == 0 || !strings.HasPrefix(cs[len(cs)-1], "closed") {
			return fmt.Errorf("the fleet's timeline: %v", cs)
		}
		resp = r
		return nil
	})
	stop()

	fleet, replayed := changes(resp.GetFleetStates()), changes(resp.GetCurrent().GetStates())
	t.Logf("agents: %v", fleet)
	t.Logf("replay: %v", replayed)
	t.Logf("notes: %v", resp.GetNotes())
	if len(fleet) < 3 {
		t.Fatalf("the agents' breaker changed %d times (%v): the scenario needs an open, a failed probe and a close", len(fleet), fleet)
	}
	if len(replayed) != len(fleet) {
		t.Fatalf("the replay changed %d times, the agents %d", len(replayed), len(fleet))
	}
	ft, rt := changeTimes(t, fleet), changeTimes(t, replayed)
	for i := range fleet {
		if strings.Split(fleet[i], "@")[0] != strings.Split(replayed[i], "@")[0] {
			t.Errorf("change %d: agents %s, replay %s", i, fleet[i], replayed[i])
		}
		if d := rt[i].Sub(ft[i]); d < -time.Second || d > time.Second {
			t.Errorf("change %d (%s): the replay is %v off the agents", i, fleet[i], d)
		}
	}
	// The same policy proposed: the same answer.
	if a, b := changes(resp.GetProposed().GetStates()), replayed; strings.Join(a, " ") != strings.Join(b, " ") {
		t.Errorf("the same policy proposed replays %v, as current %v", a, b)
	}
	if len(resp.GetIncidents()) != 1 {
		t.Errorf("%d incidents, want 1", len(resp.GetIncidents()))
	}
}
