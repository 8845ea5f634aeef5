package control

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
// dies for 5 s and recovers; their breaker opens, fails probes and closes.
// Once their breaker closed and the coordinator's history holds, settled,
// every call the agents counted (their cumulative counts, exactly) and the
// close, the replay of that history under the same policy
// (SimulatePolicy) opens and closes as the agents did: the same sequence,
// each change within 1 s of theirs (the history dates counts at the
// agents' readings, within a gossip round; the replay steps in 100 ms
// sub-buckets). The agents' later reopens follow their first open by the
// open durations, so an offset of the first carries over; the probes'
// outcomes are those the agents' probes had, from their records.
func TestReplayMatchesTheAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and three agents")
	}
	const dep = "ledger-api"
	f := startCoordinator(t, setup{})
	c := f.Coordinator()
	ctx := ctxFor(t, 90*time.Second)
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
	sstest.Eventually(t, 40*time.Second, "the agents' breaker to have opened and closed again", func() bool {
		for _, a := range agents {
			if s := a.Engine().Snapshot(dep); s == nil || s.State != sharedstate.Closed || s.Generation < 2 {
				return false
			}
		}
		return true
	})
	stop()
	var counted sharedstate.Counts
	for _, a := range agents {
		cum, ok := a.Engine().Cumulative(dep)
		if !ok {
			t.Fatalf("%s does not track %s", a.Engine().Node(), dep)
		}
		counted = counted.Plus(cum.Node)
	}
	// The history as GET /api/v1/series shows it (up to a settled end)
	// holds every call the agents counted and ends closed; the replay is
	// asked for once its own end (whole seconds) has reached that one.
	var resp *fuseboxv1.SimulatePolicyResponse
	sstest.EventuallyNoError(t, 20*time.Second, "the coordinator's history to hold, settled, every call the agents counted and the close", func() error {
		held, to, err := seriesOf(ctx, c.HTTPAddr(), dep)
		if err != nil {
			return err
		}
		if held != counted {
			return fmt.Errorf("the history holds %+v, the agents counted %+v", held, counted)
		}
		r, err := admin.SimulatePolicy(ctx, &fuseboxv1.SimulatePolicyRequest{Dependency: dep, PolicyJson: []byte(incidentPolicy),
			Since: durationpb.New(time.Since(start) + 2*time.Second)})
		if err != nil {
			return err
		}
		if end := r.GetTo().AsTime(); end.Before(to) {
			return fmt.Errorf("the replay ends at %v, before the history that holds every call (%v)", end, to)
		}
		if cs := changes(r.GetFleetStates()); len(cs) == 0 || !strings.HasPrefix(cs[len(cs)-1], "closed") {
			return fmt.Errorf("the fleet's timeline: %v", cs)
		}
		resp = r
		return nil
	})

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

// seriesOf sums what GET /api/v1/series holds of dep over the last 5
// minutes, and says where it ends.
func seriesOf(ctx context.Context, httpAddr, dep string) (sharedstate.Counts, time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/api/v1/series?dependency="+dep+"&since=5m", nil)
	if err != nil {
		return sharedstate.Counts{}, time.Time{}, err
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return sharedstate.Counts{}, time.Time{}, err
	}
	defer r.Body.Close()
	body, err := io.ReadAll(r.Body)
	if err != nil || r.StatusCode != http.StatusOK {
		return sharedstate.Counts{}, time.Time{}, fmt.Errorf("/api/v1/series: %d %s (%v)", r.StatusCode, body, err)
	}
	var s struct {
		To     time.Time            `json:"to"`
		Points []sharedstate.Counts `json:"points"` // each point's counts, among its other fields
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return sharedstate.Counts{}, time.Time{}, fmt.Errorf("/api/v1/series: %w: %s", err, body)
	}
	var held sharedstate.Counts
	for _, p := range s.Points {
		held = held.Plus(p)
	}
	return held, s.To, nil
}
