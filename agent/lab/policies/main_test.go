package policies

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

func TestMain(m *testing.M) { fleettest.Main(m) }

var admin = store.WriteOptions{Actor: "test"}

// world is n agents on an embedded etcd, each with fleettest.Policy() as
// its own default (a wiped etcd gives it back), and a store of that etcd.
type world struct {
	*fleettest.Fleet
	cli   *store.Client
	store *store.Store
}

// start starts the world; it waits until every agent synced its policies
// from etcd.
func start(t testing.TB, n int) *world {
	t.Helper()
	f := fleettest.Start(t, fleet.Config{N: n, Etcd: true,
		Options: fleettest.Own(agent.WithDefaultPolicy(fleettest.Policy())),
		Tune:    func(_ int, c *agent.Config) { fleet.Quick(c) }})
	cli := embeddedtest.Client(t, f.EtcdServer())
	st, err := store.New(store.Config{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{Fleet: f, cli: cli, store: st}
	w.waitAll(t, 10*time.Second, "every agent synced policies from etcd", func(i int) error {
		if src := w.Metric(t, i, "fusebox_agent_policy_source", "source", "etcd"); src != 1 {
			return fmt.Errorf("%s does not take its policies from etcd", fleet.Name(i))
		}
		return nil
	})
	return w
}

// waitAll waits up to d until ok holds for every running agent.
func (w *world) waitAll(t testing.TB, d time.Duration, what string, ok func(i int) error) {
	t.Helper()
	sstest.EventuallyNoError(t, d, what, func() error {
		for i := range w.Size() {
			if w.Agent(i) == nil {
				continue // stopped
			}
			if err := ok(i); err != nil {
				return err
			}
		}
		return nil
	})
}

// follows says how a is not in step with the catalog policy and override
// etcd holds now ("" when it is): minimumRequests min, and the override
// (0 for none).
func follows(a *agent.Agent, dep string, min int, ov sharedstate.OverrideState) string {
	if got := a.Engine().Policy(dep).Breaker.MinimumRequests; got != min {
		return fmt.Sprintf("%s: minimumRequests %d, want %d", a.Name(), got, min)
	}
	got := sharedstate.OverrideState(0)
	if s := a.Engine().Snapshot(dep); s != nil {
		got = s.Override
	}
	if got != ov {
		return fmt.Sprintf("%s: override %v, want %v", a.Name(), got, ov)
	}
	return ""
}

func (w *world) waitFollow(t *testing.T, what, dep string, min int, ov sharedstate.OverrideState) {
	t.Helper()
	w.waitAll(t, 15*time.Second, what, func(i int) error {
		if miss := follows(w.Agent(i), dep, min, ov); miss != "" {
			return fmt.Errorf("%s", miss)
		}
		return nil
	})
}

// waitRegisteredRewind waits until every agent's registration says it is
// synced after a rewind for reason ("": any).
func (w *world) waitRegisteredRewind(t *testing.T, ctx context.Context, reason store.RewindReason) {
	t.Helper()
	sstest.EventuallyNoError(t, 15*time.Second, "every agent's registration to report the rewind, synced", func() error {
		ms, _, err := w.store.ListMembers(ctx)
		if err != nil {
			return err
		}
		byNode := map[string]store.MemberEntry{}
		for _, m := range ms {
			byNode[m.Node] = m
		}
		for i := range w.Size() {
			name := fleet.Name(i)
			m, ok := byNode[name]
			switch {
			case !ok:
				return fmt.Errorf("%s is not registered", name)
			case m.Etcd == nil || !m.Etcd.Synced || m.Etcd.LastRewind == nil || (reason != "" && m.Etcd.LastRewind.Reason != reason):
				return fmt.Errorf("%s registered with etcd %+v", name, m.Etcd)
			}
		}
		return nil
	})
}
