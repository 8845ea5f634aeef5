package agent

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Bounds on what a client may make the agent hold or count. Each has a
// Config field and a flag; these are the defaults (agent/README.md,
// "Limits"; deploy/README.md, "Sizing").
const (
	// DefaultMaxSessionBytes bounds the dependency state one session holds:
	// 2 MiB is DefaultMaxDependencies followed dependencies with 128-byte
	// names.
	DefaultMaxSessionBytes = 2 << 20
	// DefaultMaxSessionsBytes bounds what all sessions hold together, within
	// the memory the manifests leave above an agent at the cap (deploy/README.md,
	// "Sizing").
	DefaultMaxSessionsBytes = 16 << 20
	// DefaultMaxReportRate is how many outcomes a second one session (and
	// all Report calls together) may report for one dependency. clientlib
	// spends about 1 µs of a core on a whole call (clientlib/README.md, "Performance"),
	// so 100,000 a second to one dependency is a tenth of a core doing
	// nothing but calling it: more than real processes make, and small
	// next to a fleet's traffic only for fleets of more than a few
	// hundred thousand calls a second to that dependency.
	DefaultMaxReportRate = 100_000
	// followCost is what a followed dependency counts against the session
	// bounds besides its name: its entries in the session's maps
	// (subscriptions, pending pushes, last push, rate bucket).
	followCost = 256
)

// ErrSessionBytes refuses a dependency a session may not follow: its state
// bound (or that of all sessions) would be passed.
var ErrSessionBytes = errors.New("fusebox: session state bound reached")

// ErrRateExceeded refuses a count delta (or Report outcome) that would take
// what its session reported for the dependency in the last second past the
// rate bound. The whole delta is refused, failures included: counts a
// client cannot have seen are never taken in part.
var ErrRateExceeded = fmt.Errorf("%w: reported outcomes above the rate bound", sharedstate.ErrInvalidArgument)

// rateBucket admits at most rate outcomes a second, a second's worth at
// once.
type rateBucket struct {
	tokens float64
	at     time.Time
}

func (b *rateBucket) take(now time.Time, n uint64, rate float64) bool {
	if b.at.IsZero() {
		b.tokens = rate
	} else if d := now.Sub(b.at).Seconds(); d > 0 {
		b.tokens = min(rate, b.tokens+rate*d)
	}
	b.at = now
	if float64(n) > b.tokens {
		return false
	}
	b.tokens -= float64(n)
	return true
}

func (a *Agent) rateErr(dep string, n uint64) error {
	return fmt.Errorf("%w: %d outcomes for %s, at most --max-report-rate=%d a second", ErrRateExceeded, n, clipName(dep), a.cfg.MaxReportRate)
}

// reportRates bounds the outcomes Report calls (which have no session) add
// to each dependency, all callers together.
type reportRates struct {
	mu      sync.Mutex
	buckets map[string]*rateBucket
}

func (a *Agent) takeReport(dep string, n uint64) error {
	r := &a.reportRate
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buckets == nil {
		r.buckets = map[string]*rateBucket{}
	}
	b, ok := r.buckets[dep]
	if !ok {
		// A bucket only for a dependency the engine tracks (it validates
		// the name and applies --max-dependencies), so they are as many.
		if a.eng.Snapshot(dep) == nil {
			if err := a.eng.AddCounts(dep, sharedstate.Counts{}); err != nil {
				return err
			}
		}
		if len(r.buckets) >= a.cfg.MaxDependencies {
			for d := range r.buckets { // forget the dependencies the engine forgot
				if a.eng.Snapshot(d) == nil {
					delete(r.buckets, d)
				}
			}
		}
		b = &rateBucket{}
		r.buckets[dep] = b
	}
	if !b.take(a.clock.Now(), n, float64(a.cfg.MaxReportRate)) {
		return a.rateErr(dep, n)
	}
	return nil
}

// reserve counts a dependency a session starts following against its own
// bound and that of all sessions.
func (s *session) reserve(dep string) error {
	cost := int64(len(dep) + followCost)
	if s.bytes+cost > int64(s.a.cfg.MaxSessionBytes) {
		return fmt.Errorf("%w: %s not followed: this session holds %d bytes of dependency state, at most --max-session-bytes=%d",
			ErrSessionBytes, clipName(dep), s.bytes, s.a.cfg.MaxSessionBytes)
	}
	if total := s.a.sessionBytes.Add(cost); total > int64(s.a.cfg.MaxSessionsBytes) {
		s.a.sessionBytes.Add(-cost)
		return fmt.Errorf("%w: %s not followed: the agent's sessions hold %d bytes of dependency state, at most --max-sessions-bytes=%d",
			ErrSessionBytes, clipName(dep), total-cost, s.a.cfg.MaxSessionsBytes)
	}
	s.bytes += cost
	return nil
}

// release gives back what the session held. Caller holds s.mu.
func (s *session) releaseBytes() {
	s.a.sessionBytes.Add(-s.bytes)
	s.bytes = 0
}

// clipName bounds a name someone else chose before it is kept or sent
// back: a refused name is remembered and reported by its first 64 bytes
// and its length.
func clipName(dep string) string {
	if len(dep) <= sharedstate.MaxDependencyNameLen {
		return dep
	}
	return fmt.Sprintf("%s…(%d bytes)", dep[:64], len(dep))
}
