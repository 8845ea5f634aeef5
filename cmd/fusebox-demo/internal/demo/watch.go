package demo

import (
	"fmt"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Transition is a change of a dependency's breaker as one agent decides
// with it.
type Transition struct {
	At time.Time
	// Elapsed is At relative to the start of the first phase.
	Elapsed    time.Duration
	Agent      string
	Dependency string
	// From and To are the states as the dashboard names them: closed,
	// open, half-open, forced-open, forced-closed; "local-open" and
	// "local-half-open" for the agent's node-local breaker (its own traffic
	// failing while the fleet's is not); "shadow:" prefixes states of a
	// policy in shadow mode.
	From, To string
	// Generation and OpenCount are those of the breaker record in force.
	Generation uint64
	OpenCount  uint32
	// Cycle and Phase say when it happened.
	Cycle int
	Phase Phase
}

// String is the transition's log line, e.g.
//
//	16.32s  transition  shipping-api @agent-b: closed -> open  (gen 1, failing)
func (t Transition) String() string {
	extra := ""
	if t.From == t.To {
		// The poll missed a short state in between (e.g. a half-open whose
		// first probe failed at once): only the record moved on.
		extra = ", new record"
	}
	if t.OpenCount > 1 && (t.To == "open" || t.To == "half-open") {
		extra += fmt.Sprintf(", open #%d", t.OpenCount)
	}
	return fmt.Sprintf("%7.2fs  transition  %s @%s: %s -> %s  (gen %d%s, %s)",
		t.Elapsed.Seconds(), t.Dependency, t.Agent, t.From, t.To, t.Generation, extra, t.Phase)
}

// stateName is a snapshot's state as the dashboard names it.
func stateName(s *sharedstate.Snapshot) string {
	if s == nil {
		return sharedstate.Closed.String()
	}
	if s.Override != sharedstate.OverrideNone {
		return s.Override.String()
	}
	name := s.State.String()
	if s.State == sharedstate.Closed && s.LocalState != sharedstate.Closed {
		name = "local-" + s.LocalState.String()
	}
	if s.Shadow() {
		name = "shadow:" + name
	}
	return name
}

// watcher turns the agents' snapshots into transitions.
//
// agent.Agent has no change hook of its own to offer (its engine's
// OnChange is taken by the agent, to push snapshots to sessions), but its
// Engine publishes an immutable, versioned Snapshot per dependency: the
// watcher polls them (one atomic load each when nothing changed) and
// reports every change of state or breaker generation. A state shorter
// than the poll interval can be missed; the generation change still shows
// (From == To, "new record").
type watcher struct {
	agents []*agent.Agent
	sched  schedule
	emit   func(Transition)
	last   map[[2]string]seen // (agent, dependency) → last snapshot seen
}

type seen struct {
	version    uint64
	state      string
	generation uint64
}

func newWatcher(agents []*agent.Agent, sched schedule, emit func(Transition)) *watcher {
	return &watcher{agents: agents, sched: sched, emit: emit, last: map[[2]string]seen{}}
}

// poll reads every agent's snapshots once. It is called from one goroutine.
func (w *watcher) poll() {
	now := time.Now()
	for _, a := range w.agents {
		eng := a.Engine()
		for _, dep := range eng.Dependencies() {
			snap := eng.Snapshot(dep)
			if snap == nil {
				continue
			}
			key := [2]string{a.Name(), dep}
			prev, known := w.last[key]
			if known && prev.version == snap.Version {
				continue
			}
			cur := seen{version: snap.Version, state: stateName(snap), generation: snap.Generation}
			w.last[key] = cur
			if !known {
				prev = seen{state: "closed", generation: cur.generation}
			}
			if cur.state == prev.state && cur.generation == prev.generation {
				continue
			}
			k := w.sched.index(now)
			w.emit(Transition{
				At: now, Elapsed: now.Sub(w.sched.start), Agent: a.Name(), Dependency: dep,
				From: prev.state, To: cur.state, Generation: snap.Generation, OpenCount: snap.OpenCount,
				Cycle: k / int(numPhases), Phase: Phase(k % int(numPhases)),
			})
		}
	}
}
