package sharedstate

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"time"
)

// Bounds on what other nodes and clients may make an engine hold or count.
// Every one has an EngineConfig field; these are the defaults.
const (
	// DefaultMaxGenerationStep is how far past the generation a node holds
	// a received record may go. A real fleet moves a breaker's generation by
	// one per transition (at most a few per minute for a flapping
	// dependency), so 2^32 is never reached by real transitions in the
	// lifetime of a fleet, even by a new agent that starts at 0, while a
	// member that lies needs 2^32 accepted records to reach the top.
	DefaultMaxGenerationStep uint64 = 1 << 32
	// DefaultMaxClockSkew is how far in the future a received record's
	// since may be (proposers stamp since with their clock; NTP keeps hosts
	// far closer than this).
	DefaultMaxClockSkew = time.Minute
	// DefaultMaxRowsPerNode caps the rows one other node may have in this
	// engine (one per dependency it reports).
	DefaultMaxRowsPerNode = 1000
	// DefaultMaxZones caps the zone records of one dependency (scope zone):
	// a dependency holds at most 1 + MaxZones records.
	DefaultMaxZones = 64

	// MaxGeneration is the highest generation a record may carry; a record
	// at math.MaxUint64 is refused, so that generation+1 never wraps.
	MaxGeneration uint64 = math.MaxUint64 - 1

	// MaxCount is where window counters and sums of counts saturate. It
	// leaves room for 2^62 single increments above it before a uint64
	// could wrap, so the lock-free +1 of Record needs no check.
	MaxCount uint64 = 1 << 62
	// MaxDelta bounds each count of one AddCounts call (one Session delta or
	// one Report). clientlib flushes every 50 ms or less; 2^24 outcomes in
	// one flush would be 335 million calls a second from one process to one
	// dependency, so a larger delta is a bug or a lie, never traffic.
	MaxDelta uint64 = 1 << 24

	// DefaultProposers is how many agents propose a trip (EngineConfig.Proposers).
	DefaultProposers = 3
	// DefaultProposerDelay is how long each further rank group waits for the
	// trip record before proposing it itself (EngineConfig.ProposerDelay).
	DefaultProposerDelay = time.Second

	// remoteDependencyShare is the share of MaxDependencies that rows and
	// records from other nodes may fill: the rest is kept for the
	// dependencies this node's own clients call.
	remoteDependencyShareNum, remoteDependencyShareDen = 9, 10
)

// Errors of MergeRow, MergeRecord and AddCounts; RefusalReason names each.
var (
	ErrInvalidRecord  = errors.New("fusebox: invalid breaker record")
	ErrGenerationMax  = errors.New("fusebox: record at the maximum generation")
	ErrGenerationJump = errors.New("fusebox: record generation jumps too far past the known one")
	ErrSinceFuture    = errors.New("fusebox: record since too far in the future")
	ErrZoneScope      = errors.New("fusebox: zone record for a dependency whose policy is not scope zone")
	ErrTooManyZones   = errors.New("fusebox: too many zone records for one dependency")
	ErrTooManyRows    = errors.New("fusebox: too many rows from one node")
	ErrInvalidDelta   = fmt.Errorf("%w: count delta", ErrInvalidArgument)
)

// RefusalReason names why MergeRow, MergeRecord or AddCounts refused an
// item, as a metric label value: "invalid_item", "generation_max",
// "generation_jump", "since_future", "zone_scope", "too_many_zones",
// "too_many_rows", "too_many_dependencies", "invalid_delta", "replayed",
// "evicted"; "" for nil.
func RefusalReason(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range refusalReasons {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return "invalid_item"
}

// refusalReasons are RefusalReason's labels, in the order it tries them.
var refusalReasons = [...]struct {
	err   error
	label string
}{
	{ErrGenerationMax, "generation_max"}, {ErrGenerationJump, "generation_jump"}, {ErrSinceFuture, "since_future"},
	{ErrZoneScope, "zone_scope"}, {ErrTooManyZones, "too_many_zones"}, {ErrTooManyRows, "too_many_rows"},
	{ErrTooManyDependencies, "too_many_dependencies"}, {ErrInvalidDelta, "invalid_delta"},
	{ErrReplayed, "replayed"}, {ErrEvicted, "evicted"},
}

// CheckDelta checks one client delta: every count at most MaxDelta, and no
// more slow calls than requests (a slow call is a success or a failure that
// was also slow).
func (c Counts) CheckDelta() error {
	// The common case in two compares: an OR is at least each of its
	// operands, so an OR within MaxDelta means every count is.
	if c.FirstAttempts|c.Retries|c.Successes|c.Failures|c.SlowCalls|c.Rejected <= MaxDelta &&
		c.SlowCalls <= c.Successes+c.Failures {
		return nil
	}
	for _, f := range [...]struct {
		name string
		v    uint64
	}{{"firstAttempts", c.FirstAttempts}, {"retries", c.Retries}, {"successes", c.Successes},
		{"failures", c.Failures}, {"slowCalls", c.SlowCalls}, {"rejected", c.Rejected}} {
		if f.v > MaxDelta {
			return fmt.Errorf("%w: %s %d exceeds %d per delta", ErrInvalidDelta, f.name, f.v, MaxDelta)
		}
	}
	if c.SlowCalls > c.Successes+c.Failures {
		return fmt.Errorf("%w: slowCalls %d exceed successes + failures %d", ErrInvalidDelta, c.SlowCalls, c.Successes+c.Failures)
	}
	return nil
}

// satAdd returns a+b, or MaxCount when the sum exceeds it (or wraps).
func satAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	return min(s|-carry, MaxCount) // a wrapped sum becomes all ones, then MaxCount
}

// rowCounter counts rows per other node across dependencies (a leaf lock).
type rowCounter struct {
	mu sync.Mutex
	n  map[string]int
}

// take reserves a row for node; false at max.
func (c *rowCounter) take(node string, max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[node] >= max {
		return false
	}
	c.n[node]++
	return true
}

func (c *rowCounter) release(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[node] <= 1 {
		delete(c.n, node)
		return
	}
	c.n[node]--
}

// checkRecord applies the record bounds against the record held for r's
// zone (MergeRecord has refused a generation past MaxGeneration already).
// Caller holds d.mu.
func (d *depState) checkRecord(e *Engine, r BreakerRecord, now time.Time) error {
	cur, ok := d.records[r.Zone]
	if r.Generation > cur.Generation && r.Generation-cur.Generation > e.maxGenStep {
		return fmt.Errorf("%w: %s generation %d, known %d, step at most %d", ErrGenerationJump, r.Dependency, r.Generation, cur.Generation, e.maxGenStep)
	}
	if r.Since.After(now.Add(e.maxSkew)) {
		return fmt.Errorf("%w: %s since %s, now %s, skew at most %s", ErrSinceFuture, r.Dependency,
			r.Since.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), e.maxSkew)
	}
	if r.Zone != "" {
		if d.pol.Breaker.Scope != ScopeZone {
			return fmt.Errorf("%w: %s zone %q", ErrZoneScope, r.Dependency, r.Zone)
		}
		if _, fleet := d.records[""]; !ok && len(d.records)-b2i(fleet) >= e.maxZones {
			return fmt.Errorf("%w: %s has %d zones", ErrTooManyZones, r.Dependency, e.maxZones)
		}
	}
	return nil
}

// proposerRank is this node's rank (0 = first) among the live agents of the
// dependency's scope, this node included, by rendezvous score of
// (dependency, generation): the first Proposers ranks propose a trip at
// once. Caller holds d.mu.
func (d *depState) proposerRank(e *Engine, gen uint64) int {
	zoned := d.pol.Breaker.Scope == ScopeZone
	mine := probeScore(d.name, gen, proposerSalt, e.node)
	rank := 0
	e.members.eachLive(func(node, zone string) {
		if node != e.node && (!zoned || zone == e.zone) && ranksBefore(probeScore(d.name, gen, proposerSalt, node), node, mine, e.node) {
			rank++
		}
	})
	return rank
}

// proposerSalt separates proposer ranks from probe rounds in probeScore.
const proposerSalt = 1<<64 - 1

// mayPropose applies the proposer rule to a trip that holds at now for the
// next generation gen: the first Proposers ranks propose at once; rank group
// g (ranks g×Proposers … (g+1)×Proposers-1) proposes only if the rule has held
// for g×ProposerDelay and no record arrived meanwhile (its proposers may be
// gone or cut off). Caller holds d.mu.
func (d *depState) mayPropose(e *Engine, gen uint64, now time.Time) bool {
	if d.tripHeld.gen != gen || !d.tripHeld.valid {
		d.tripHeld = tripHeld{valid: true, gen: gen, since: now}
	}
	group := d.proposerRank(e, gen) / e.proposers
	if group == 0 {
		return true
	}
	waited := now.Sub(d.tripHeld.since)
	return waited >= time.Duration(group)*e.proposerDelay
}

// tripHeld is when this node first saw the trip rule hold for generation gen.
type tripHeld struct {
	valid bool
	gen   uint64
	since time.Time
}
