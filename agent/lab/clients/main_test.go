package clients

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

func TestMain(m *testing.M) { fleettest.Main(m) }

// fleetPolicy is the fleet default of these tests: a 2 s window, 10
// requests, failures from 2 nodes, and a breaker that stays open for the
// length of a test once it opened.
func fleetPolicy() sharedstate.Policy {
	p := sharedstate.DefaultPolicy()
	p.Breaker.Window = sharedstate.Duration(2 * time.Second)
	p.Breaker.MinimumRequests = 10
	p.Breaker.MinFailingNodes = 2
	p.Breaker.OpenDuration = sharedstate.Duration(30 * time.Second)
	p.Breaker.MaxOpenDuration = sharedstate.Duration(time.Minute)
	p.Retry.PerAttemptTimeout = sharedstate.Duration(2 * time.Second) // generous under -race
	p.Breaker.ProbeTimeout = sharedstate.Duration(2 * time.Second)
	return p
}

// world is n agents that found each other through an embedded etcd (with
// etcd), each with fleetPolicy() as its own default, and a store of the
// etcd.
type world struct {
	*fleettest.Fleet
	store  *store.Store // nil without etcd
	agents []*agent.Agent
}

func newWorld(t *testing.T, n int) *world {
	t.Helper()
	return newWorldWith(t, n, nil)
}

// newWorldWith is newWorld with a change to every agent's config.
func newWorldWith(t *testing.T, n int, change func(*agent.Config)) *world {
	t.Helper()
	return startWorld(t, n, true, change)
}

// startWorld starts the world, with or without etcd.
func startWorld(t *testing.T, n int, etcd bool, change func(*agent.Config)) *world {
	t.Helper()
	f := fleettest.Start(t, fleet.Config{N: n, Etcd: etcd,
		Options: fleettest.Own(agent.WithDefaultPolicy(fleetPolicy())),
		Tune: func(_ int, c *agent.Config) {
			fleet.Quick(c)
			if change != nil {
				change(c)
			}
		}})
	w := &world{Fleet: f, agents: f.Agents()}
	if etcd {
		st, err := store.New(store.Config{Client: embeddedtest.Client(t, f.EtcdServer())})
		if err != nil {
			t.Fatal(err)
		}
		w.store = st
	}
	return w
}

// putPolicy writes dep's policy to etcd and waits until every agent
// applies it (check tells).
func (w *world) putPolicy(t *testing.T, dep, policy string, check func(sharedstate.Policy) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.store.PutPolicy(ctx, dep, []byte(policy), store.WriteOptions{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "every agent applies the policy of "+dep, func() bool {
		for _, a := range w.agents {
			if !check(a.Engine().Policy(dep)) {
				return false
			}
		}
		return true
	})
}

// zeroRandom makes every jittered backoff 0.
func zeroRandom() uint64 { return 0 }

// newClient connects a clientlib client to a's socket; it is closed at
// cleanup, and its log is printed if the test failed.
func newClient(t testing.TB, a *agent.Agent, service string, mutate func(*clientlib.Config)) *clientlib.Client {
	t.Helper()
	log := &sstest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of client %s:\n%s", service, log.String())
		}
	})
	cfg := clientlib.Config{
		Logger:       slog.New(slog.NewTextHandler(log, nil)),
		AgentAddress: "unix://" + a.SocketPath(),
		Service:      service,
		Instance:     service + "@" + a.Name(),
		Random:       zeroRandom,
		ReconnectMin: 10 * time.Millisecond,
		ReconnectMax: 100 * time.Millisecond,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := clientlib.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fromAgent waits until every handle decides from its agent's snapshot.
func fromAgent(t testing.TB, deps ...*clientlib.Dependency) {
	t.Helper()
	sstest.Eventually(t, 10*time.Second, "every client decides from its agent's snapshot", func() bool {
		for _, d := range deps {
			if !d.Status().FromAgent {
				return false
			}
		}
		return true
	})
}

var (
	errBoom = errors.New("boom") // a failure, not retried
	errDown = status.Error(codes.Unavailable, "down")
)
