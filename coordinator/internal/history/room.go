package history

import (
	"math"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// use is a dependency's traffic with its past decaying: calls counted,
// each weighing e^(−age/FineHorizon). It ranks the dependencies for the
// room rule.
type use struct {
	v  float64
	at time.Time
}

// at returns the use at now.
func (u use) valueAt(now time.Time, tau time.Duration) float64 {
	if u.v == 0 || !now.After(u.at) {
		return u.v
	}
	return u.v * math.Exp(-float64(now.Sub(u.at))/float64(tau))
}

func (u *use) add(now time.Time, tau time.Duration, calls float64) {
	u.v = u.valueAt(now, tau) + calls
	u.at = Later(u.at, now)
}

// traffic is what a row's counts weigh in a dependency's use: its calls
// (requests and refusals).
func traffic(c sharedstate.Counts) float64 { return float64(c.Requests()) + float64(c.Rejected) }

// pinned reports whether d keeps its history whatever its use: the
// coordinator pins it (a policy, an override), or its breaker is open.
func (h *History) pinned(dep string, d *depHistory) bool {
	for _, open := range d.open {
		if open {
			return true
		}
	}
	return h.cfg.Pinned != nil && h.cfg.Pinned(dep)
}

// roomLocked returns dep's history, making one when it has none and there
// is room (nil: none). The room rule: while MaxDependencies are kept, a
// newcomer takes the place of the unpinned dependency least used at now,
// when the newcomer is pinned (a policy, an override, an open breaker), or
// when it brings calls (calls: what its row counted over the node's window)
// and that dependency's use is below them. So a flood of names with little
// traffic each only ever takes the places of each other's, and a name with
// no traffic never takes one.
func (h *History) roomLocked(dep string, now time.Time, window time.Duration, calls float64, pinnedNow bool) *depHistory {
	if d, ok := h.deps[dep]; ok {
		return d
	}
	if len(h.deps) < h.cfg.MaxDependencies {
		return h.newDepLocked(dep, now, window)
	}
	pin := pinnedNow || (h.cfg.Pinned != nil && h.cfg.Pinned(dep))
	if !pin && calls <= 0 {
		h.drop(DropTooManyDependencies)
		return nil
	}
	victim, least := "", math.Inf(1)
	for name, d := range h.deps {
		if u := d.use.valueAt(now, h.cfg.FineHorizon); u < least && !h.pinned(name, d) {
			victim, least = name, u
		}
	}
	if victim == "" || (!pin && least >= calls) {
		h.drop(DropTooManyDependencies)
		return nil
	}
	delete(h.deps, victim)
	h.forgot = now
	h.drop(DropEvicted)
	return h.newDepLocked(dep, now, window)
}

// Later returns the later of a and b, Earlier the earlier: the replay and
// the coordinator clip ranges of the history with them.
func Later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func Earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
