package clients

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// rankedFirst returns a dependency name for which member ranks first for
// the probes of generations 1 to gens, round 0, among members.
func rankedFirst(t *testing.T, member string, members []string, gens uint64) string {
	t.Helper()
	for i := range 100000 {
		name := fmt.Sprintf("inventory-%d", i)
		ok := true
		for g := uint64(1); g <= gens && ok; g++ {
			ok = sharedstate.ProbeHolders(name, g, 0, members, 1)[0] == member
		}
		if ok {
			return name
		}
	}
	t.Fatalf("no dependency name ranks %s first for %d generations", member, gens)
	return ""
}

// recordLog collects the distinct breaker records an engine holds for dep,
// polling until stop.
type recordLog struct {
	mu   sync.Mutex
	recs []sharedstate.BreakerRecord
}

func (l *recordLog) follow(ctx context.Context, e *sharedstate.Engine, dep string) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, r := range e.Records() {
			if r.Dependency != dep {
				continue
			}
			l.mu.Lock()
			if n := len(l.recs); n == 0 || !sharedstate.SameRecord(l.recs[n-1], r) {
				l.recs = append(l.recs, r)
			}
			l.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (l *recordLog) all() []sharedstate.BreakerRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sharedstate.BreakerRecord(nil), l.recs...)
}

// TestOneFailingAgentDoesNotHoldTheBreakerOpen: two real agents (etcd,
// memberlist on loopback, clientlib clients on their sockets) whose calls
// to a dependency all failed until its fleet breaker tripped. Then every
// call through agent-0 keeps failing while every call through agent-1
// succeeds, and agent-0 ranks first for the probes of every generation.
// agent-0's failed probe reopens the breaker once; the next generation's
// permits go to agent-1, whose probes close it: agent-1 is refused for at
// most one open duration and one probe round after agent-0's reopen, and
// agent-0's own breaker opens on its own failures.
func TestOneFailingAgentDoesNotHoldTheBreakerOpen(t *testing.T) {
	w := newWorld(t, 2)
	names := []string{w.agents[0].Name(), w.agents[1].Name()}
	dep := rankedFirst(t, names[0], names, 6)
	const (
		open  = 500 * time.Millisecond
		round = 3 * time.Second
	)
	w.putPolicy(t, dep, fmt.Sprintf(`{"breaker":{"openDuration":"%v","fleetMaxOpenDuration":"%v","probeTimeout":"%v",`+
		`"probeSuccessThreshold":3,"rampDuration":"0s"},"retry":{"perAttemptTimeout":"500ms"}}`, open, open, round),
		func(p sharedstate.Policy) bool {
			return p.Breaker.FleetMaxOpenDuration == sharedstate.Duration(open) && p.Breaker.ProbeTimeout == sharedstate.Duration(round)
		})
	deps := make([]*clientlib.Dependency, len(w.agents))
	for i, a := range w.agents {
		deps[i] = newClient(t, a, fmt.Sprintf("orders-%d", i), func(c *clientlib.Config) {
			c.Dependencies = []string{dep}
			c.AgentWait = 5 * time.Second // every probe is the agent's decision
		}).Dependency(dep)
	}
	fromAgent(t, deps...)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	var log recordLog
	wg.Add(1)
	go func() { defer wg.Done(); log.follow(ctx, w.agents[1].Engine(), dep) }()

	// 6 failed calls through each agent: 12 ≥ minimumRequests 10, from 2
	// nodes, and fewer than 10 at either, so no node-local breaker opens.
	for _, d := range deps {
		for range 6 {
			if err := d.Do(context.Background(), clientlib.NonRetryable, func(context.Context, clientlib.Attempt) error {
				return errBoom
			}); !errors.Is(err, errBoom) {
				t.Fatalf("failure not returned: %v", err)
			}
		}
	}
	sstest.Eventually(t, 10*time.Second, "the fleet breaker opens on both agents", func() bool {
		for _, a := range w.agents {
			if s := a.Engine().Snapshot(dep); s == nil || s.State == sharedstate.Closed {
				return false
			}
		}
		return true
	})

	// From now on agent-0's calls fail and agent-1's succeed.
	for i, d := range deps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pace := time.NewTimer(0)
			defer pace.Stop()
			for ctx.Err() == nil {
				err := d.Do(ctx, clientlib.NonRetryable, func(context.Context, clientlib.Attempt) error {
					if i == 0 {
						return errBoom
					}
					return nil
				})
				if err != nil && !errors.Is(err, errBoom) && !errors.Is(err, clientlib.ErrOpen) && ctx.Err() == nil {
					t.Errorf("call through %s: %v", names[i], err)
					return
				}
				pace.Reset(5 * time.Millisecond) // a caller's pace, so that refusals do not spin
				select {
				case <-pace.C:
				case <-ctx.Done():
				}
			}
		}()
	}
	sstest.Eventually(t, 30*time.Second, "the breaker closes on agent-1", func() bool {
		for _, r := range log.all() {
			if r.State == sharedstate.Closed && r.Generation > 1 {
				return true
			}
		}
		return false
	})
	recs := log.all()
	var reopen, closed sharedstate.BreakerRecord
	for _, r := range recs {
		t.Logf("generation %d %s, origin %s, open count %d, at %s: %s", r.Generation, r.State, r.Origin, r.OpenCount, r.Since.Format("15:04:05.000"), r.Reason)
		switch {
		case r.State == sharedstate.Open && r.OpenCount >= 2 && reopen.Generation == 0:
			reopen = r
		case r.State == sharedstate.Closed && r.Generation > 0 && closed.Generation == 0:
			closed = r
		}
	}
	if reopen.Origin != names[0] {
		t.Fatalf("the first reopen is %+v: want agent-0's failed probe, the first of its round", reopen)
	}
	if closed.Generation != reopen.Generation+1 {
		t.Fatalf("closed at generation %d: want the generation right after agent-0's reopen (%d)", closed.Generation, reopen.Generation)
	}
	took := closed.Since.Sub(reopen.Since)
	t.Logf("agent-1 refused for %v after agent-0's reopen (open %v, probe round %v)", took, open, round)
	if took > open+round {
		t.Errorf("closed %v after agent-0's reopen: want at most one open duration and one probe round, %v", took, open+round)
	}
	sstest.Eventually(t, 20*time.Second, "agent-0's own breaker opens on its own failures", func() bool {
		s := w.agents[0].Engine().Snapshot(dep)
		return s != nil && s.State == sharedstate.Closed && s.LocalState != sharedstate.Closed
	})
}
