package sharedstate

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrInvalidRow is returned by NodeWindow.Validate for a row without a
	// usable node name.
	ErrInvalidRow = errors.New("fusebox: invalid node window row")

	// ErrInvalidArgument is wrapped by errors for an unknown AttemptKind or Outcome.
	ErrInvalidArgument = errors.New("fusebox: invalid argument")
)

// deadMemberRetention is how long a node reported dead keeps its rows out.
const deadMemberRetention = time.Hour

// EngineConfig configures an Engine.
type EngineConfig struct {
	// Node is this node's name, as the membership layer knows it (required).
	Node string
	// Zone is this node's zone (optional, default ""), used by scope "zone".
	Zone string
	// Clock is the time source (optional, default SystemClock{}).
	//
	// Record and AddCounts are the hottest paths and do not read a
	// SystemClock (time.Now costs more than the rest of Record): they
	// attribute counts to the engine's latest clock reading, which Tick and
	// every other method refresh. Call Tick at least every window/100 (100 ms
	// for the default 10 s window) so that a count lands in the right bucket.
	// A *ManualClock is cheap to read, so with one every count is attributed
	// to the exact current time and tests need not Tick before recording.
	Clock Clock
	// Rand is the random source (optional, default a source seeded from Node).
	Rand Rand
	// MaxDependencies caps how many dependencies the engine tracks (optional,
	// default DefaultMaxDependencies). Past it, calls naming a new dependency
	// return a *TooManyDependenciesError (Record, AddCounts, SetPolicy,
	// SetOverride), return false (ApplyRow, ApplyRecord) or allow without
	// tracking (Decide, AcquireRetry, AcquireProbe); Stats counts them.
	MaxDependencies int
	// MaxGenerationStep is how far past the held generation a received
	// record may go (optional, default DefaultMaxGenerationStep); further is
	// refused with ErrGenerationJump.
	MaxGenerationStep uint64
	// MaxClockSkew is how far in the future a received record's since may be
	// (optional, default DefaultMaxClockSkew); further is refused with
	// ErrSinceFuture.
	MaxClockSkew time.Duration
	// MaxRowsPerNode caps the rows one other node may have here (optional,
	// default DefaultMaxRowsPerNode); past it, its rows for further
	// dependencies are refused with ErrTooManyRows.
	MaxRowsPerNode int
	// MaxZones caps the zone records of one dependency (optional, default
	// DefaultMaxZones); past it ErrTooManyZones.
	MaxZones int
	// Proposers is how many nodes propose a trip at once (optional, default
	// DefaultProposers): the first Proposers live agents of the scope by
	// rendezvous rank of (dependency, next generation); the membership comes
	// from MemberAlive and MemberDead. The others adopt the record through
	// gossip; rank group g proposes only after the trip rule held for
	// g×ProposerDelay without it. With no members known, this node ranks
	// first.
	Proposers int
	// ProposerDelay is that wait per rank group (optional, default
	// DefaultProposerDelay).
	ProposerDelay time.Duration
	// IdleRetention is how long a dependency whose breaker ever moved (a
	// record past generation 0) is kept while no node reports traffic for
	// it; then it is forgotten whatever its record, and copies of that
	// record are refused for IdleRetention+TombstoneMargin more
	// (ErrEvicted). A dependency whose record never moved is forgotten
	// after 2×window (optional, default DefaultIdleRetention).
	IdleRetention time.Duration
	// DefaultPolicy is the initial fleet default (optional, default
	// DefaultPolicy()). Change it later with SetDefaultPolicy.
	DefaultPolicy *Policy
	// OnChange, if set, is called with a dependency's name after its Snapshot
	// changed (or the dependency started or stopped being tracked; Snapshot
	// then returns nil). It is called after the engine released its locks, so
	// it may call back into the engine, from whichever goroutine made the
	// change, possibly concurrently for the same dependency: read
	// Engine.Snapshot for the current value rather than assuming an order.
	// It must not block. (optional)
	OnChange func(dependency string)
}

// Validate reports every problem with c, or nil. It has no side effects.
func (c EngineConfig) Validate() error {
	var problems []string
	if c.Node == "" {
		problems = append(problems, "Node: is required")
	} else if len(c.Node) > MaxNodeNameLen {
		problems = append(problems, fmt.Sprintf("Node: must be at most %d bytes, got %d", MaxNodeNameLen, len(c.Node)))
	}
	if len(c.Zone) > MaxNodeNameLen {
		problems = append(problems, fmt.Sprintf("Zone: must be at most %d bytes, got %d", MaxNodeNameLen, len(c.Zone)))
	}
	notNegative := func(field string, negative bool, v any) {
		if negative {
			problems = append(problems, fmt.Sprintf("%s: must not be negative, got %v", field, v))
		}
	}
	notNegative("MaxDependencies", c.MaxDependencies < 0, c.MaxDependencies)
	notNegative("MaxClockSkew", c.MaxClockSkew < 0, c.MaxClockSkew)
	notNegative("MaxRowsPerNode", c.MaxRowsPerNode < 0, c.MaxRowsPerNode)
	notNegative("Proposers", c.Proposers < 0, c.Proposers)
	notNegative("ProposerDelay", c.ProposerDelay < 0, c.ProposerDelay)
	notNegative("MaxZones", c.MaxZones < 0, c.MaxZones)
	notNegative("IdleRetention", c.IdleRetention < 0, c.IdleRetention)
	if c.DefaultPolicy != nil {
		if err := c.DefaultPolicy.Validate(); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				problems = append(problems, "DefaultPolicy: "+line)
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("fusebox: invalid engine config:\n%s", strings.Join(problems, "\n"))
	}
	return nil
}

// EngineStats are counters for the caller's metrics.
type EngineStats struct {
	Dependencies        int    // tracked now
	RefusedDependencies uint64 // names refused because MaxDependencies was reached
	InvalidRows         uint64 // rows dropped by ApplyRow as malformed
	InvalidRecords      uint64 // records dropped by ApplyRecord as malformed
	Evicted             uint64 // idle dependencies forgotten
}

// Engine is one node's view of the fleet's breakers and retry budgets.
// Inputs: Record, AddCounts (this node's traffic); ApplyRow, ApplyRecord
// (gossip); SetPolicy, SetPolicyDocument, SetDefaultPolicy, SetOverride
// (etcd); MemberDead, MemberAlive (membership); Tick (time).
// Outputs: Decide, AcquireRetry, AcquireProbe, ProbeOutcome, ProbeResult
// (decisions); Tick's proposals, RowsToSend, LocalRows, Records (what to
// gossip); Snapshot, Fleet, Rows (what to show); the OnChange hook.
//
// All methods are safe for concurrent use. Decide on a closed breaker (for a
// FirstAttempt or Probe), Record and AddCounts take no lock and allocate
// nothing once a dependency is known: they read an immutable name→state map
// through an atomic pointer and use atomic counters, striped so that
// goroutines on different cores rarely share a cache line. (The first
// lookups of a newly created dependency, and lookups of untracked names, take
// the map's lock until the read map is refreshed.) Every other method takes
// at most the lock of the dependency it names, except that Tick, RowsToSend,
// LocalRows, Records, Dependencies and the membership and default-policy
// methods visit every dependency in turn, and creating a dependency takes an
// engine-wide lock once. Tick is meant to be called by one goroutine,
// periodically (every 100 ms).
//
// Memory is bounded by MaxDependencies × (about 4 KiB, measured, + one row of
// about 200 bytes per node that reported the dependency).
type Engine struct {
	node, zone string
	clock      Clock
	manual     *ManualClock // non-nil when clock is one: cheap exact reads
	mono       MonotonicClock
	wall0      time.Time     // the clock's wall time when the engine started
	mono0      time.Duration // its monotonic reading then
	wall0ns    int64         // wall0 in Unix ns
	coarse     atomic.Int64  // latest clock reading, Unix ns
	maxDeps    int
	onChange   func(string)

	maxGenStep     uint64
	maxSkew        time.Duration
	maxRowsPerNode int
	maxZones       int
	rowCount       rowCounter
	proposers      int
	proposerDelay  time.Duration
	members        members

	deps  *depMap
	seq   atomic.Uint64
	mu    sync.Mutex // guards creation, ndeps, defaults, rnd
	ndeps int
	def   Policy
	rnd   Rand

	outMu  sync.Mutex // leaf lock
	outbox []BreakerRecord
	urgent []NodeWindow

	refused, invalidRows, invalidRecords, evicted atomic.Uint64

	// floors: per node, the highest seq of its rows dropped as stale
	// (ErrReplayed).
	floors floorTable
	// tombs: the records of dependencies evicted for want of traffic
	// (ErrEvicted).
	tombs         tombstones
	idleRetention time.Duration
}

// NewEngine returns an engine for one node.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{node: cfg.Node, zone: cfg.Zone, clock: cfg.Clock, maxDeps: cmp.Or(cfg.MaxDependencies, DefaultMaxDependencies),
		onChange: cfg.OnChange, rnd: cfg.Rand, def: DefaultPolicy(), deps: newDepMap()}
	if e.clock == nil {
		e.clock = SystemClock{}
	}
	if mc, ok := e.clock.(*ManualClock); ok {
		e.manual = mc
	}
	if mc, ok := e.clock.(MonotonicClock); ok {
		e.mono = mc
		e.wall0, e.mono0 = mc.Now(), mc.Monotonic()
		e.wall0ns = e.wall0.UnixNano()
	}
	e.maxGenStep = cmp.Or(cfg.MaxGenerationStep, DefaultMaxGenerationStep)
	e.maxSkew = cmp.Or(cfg.MaxClockSkew, DefaultMaxClockSkew)
	e.maxRowsPerNode = cmp.Or(cfg.MaxRowsPerNode, DefaultMaxRowsPerNode)
	e.maxZones = cmp.Or(cfg.MaxZones, DefaultMaxZones)
	e.idleRetention = cmp.Or(cfg.IdleRetention, DefaultIdleRetention)
	e.rowCount.n = map[string]int{}
	e.proposers = cmp.Or(cfg.Proposers, DefaultProposers)
	e.proposerDelay = cmp.Or(cfg.ProposerDelay, DefaultProposerDelay)
	e.members = newMembers()
	if e.rnd == nil {
		var h uint64 = 1469598103934665603
		for i := 0; i < len(cfg.Node); i++ {
			h = (h ^ uint64(cfg.Node[i])) * 1099511628211
		}
		e.rnd = &splitmix{s: h}
	}
	if cfg.DefaultPolicy != nil {
		e.def = *cfg.DefaultPolicy
		e.def.Dependency = DefaultPolicyName
	}
	now := e.now()
	// Sequence numbers start at the wall clock so that a restarted node's
	// rows outrank the ones it sent before the restart.
	e.seq.Store(uint64(now.UnixNano()))
	return e, nil
}

// Node returns the node name the engine was built for.
func (e *Engine) Node() string { return e.node }

// Zone returns the zone the engine was built for.
func (e *Engine) Zone() string { return e.zone }

// now reads the engine's time and refreshes the cached reading used by
// Record. With a MonotonicClock (SystemClock, ManualClock) it is the wall
// time read when the engine started plus the monotonic time elapsed since:
// windows, staleness, open durations, probe rounds and the retry budget all
// follow it, so a wall-clock step in either direction changes no decision.
// Other clocks are read as they are.
func (e *Engine) now() time.Time {
	var t time.Time
	if e.mono != nil {
		t = e.wall0.Add(e.mono.Monotonic() - e.mono0)
	} else {
		t = e.clock.Now()
	}
	if ns := t.UnixNano(); e.coarse.Load() < ns {
		e.coarse.Store(ns)
	}
	return t
}

// nowNanos is now().UnixNano() without building a time.Time (the same
// reading, and it refreshes the cached one likewise): per-row paths use it.
func (e *Engine) nowNanos() int64 {
	var ns int64
	if e.mono != nil {
		ns = e.wall0ns + int64(e.mono.Monotonic()-e.mono0)
	} else {
		ns = e.clock.Now().UnixNano()
	}
	if e.coarse.Load() < ns {
		e.coarse.Store(ns)
	}
	return ns
}

func (e *Engine) recordNanos() int64 {
	if e.manual != nil {
		return e.wall0.UnixNano() + int64(e.manual.Monotonic()-e.mono0)
	}
	return e.coarse.Load()
}

func (e *Engine) notify(dep string) {
	if e.onChange != nil {
		e.onChange(dep)
	}
}

// unlock releases d.mu and then, if changed, calls OnChange for d: the
// hook runs with no engine lock held.
func (e *Engine) unlock(d *depState, changed bool) {
	d.mu.Unlock()
	if changed {
		e.notify(d.name)
	}
}

// state returns the dependency's state, creating it if needed.
func (e *Engine) state(dep string) (*depState, error) {
	if d := e.deps.load(dep); d != nil {
		return d, nil
	}
	return e.create(dep, e.maxDeps)
}

// remoteLimit is how many dependencies rows and records from other nodes
// may bring the engine to: 9/10 of MaxDependencies, so that other nodes
// can never take the room this node's own clients need.
func (e *Engine) remoteLimit() int {
	return max(1, e.maxDeps*remoteDependencyShareNum/remoteDependencyShareDen)
}

func (e *Engine) create(dep string, limit int) (*depState, error) {
	if err := ValidateDependencyName(dep); err != nil {
		return nil, err
	}
	now := e.now()
	e.mu.Lock()
	if d := e.deps.load(dep); d != nil {
		e.mu.Unlock()
		return d, nil
	}
	if e.ndeps >= limit {
		e.mu.Unlock()
		e.refused.Add(1)
		return nil, &TooManyDependenciesError{Dependency: dep, Limit: limit}
	}
	name := strings.Clone(dep)
	d := &depState{name: name, records: map[string]BreakerRecord{}, rowIdx: map[string]int{}, rowCount: &e.rowCount, fleet: newFleetSum(now)}
	d.setPolicy(e, *e.defaultFor(name), e.rnd.Uint64())
	d.publish(e, now)
	e.deps.store(name, d)
	e.ndeps++
	e.mu.Unlock()
	e.notify(name)
	return d, nil
}

// defaultFor is the default as dep's policy. Caller holds e.mu.
func (e *Engine) defaultFor(dep string) *Policy {
	p := e.def
	p.Dependency = dep
	return &p
}

// effective reads dep's own policy document over the default (nil: none),
// validated. Caller holds e.mu.
func (e *Engine) effective(dep string, doc []byte) (Policy, error) {
	if doc == nil {
		return *e.defaultFor(dep), nil
	}
	return ParsePolicyOver(e.def, dep, doc)
}

// eachDep calls fn for every tracked dependency, in name order, holding the
// dependency's lock.
func (e *Engine) eachDep(fn func(d *depState)) {
	for _, d := range e.deps.sortedValues() {
		d.mu.Lock()
		fn(d)
		d.mu.Unlock()
	}
}

// Stats returns the engine's counters.
func (e *Engine) Stats() EngineStats {
	e.mu.Lock()
	n := e.ndeps
	e.mu.Unlock()
	return EngineStats{Dependencies: n, RefusedDependencies: e.refused.Load(),
		InvalidRows: e.invalidRows.Load(), InvalidRecords: e.invalidRecords.Load(), Evicted: e.evicted.Load()}
}
