package sharedstate

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
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
	if c.MaxDependencies < 0 {
		problems = append(problems, fmt.Sprintf("MaxDependencies: must not be negative, got %d", c.MaxDependencies))
	}
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

// Member is a node the membership layer reports alive.
type Member struct {
	Node string
	Zone string
}

// EngineStats are counters for the caller's metrics.
type EngineStats struct {
	Dependencies        int    // tracked now
	RefusedDependencies uint64 // names refused because MaxDependencies was reached
	InvalidRows         uint64 // rows dropped by ApplyRow as malformed
	InvalidRecords      uint64 // records dropped by ApplyRecord as malformed
	Evicted             uint64 // idle dependencies forgotten
}

// Engine is one node's view of the fleet's breakers and retry budgets; see
// the package documentation for its inputs and outputs.
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
	coarse     atomic.Int64 // latest clock reading, Unix ns
	maxDeps    int
	onChange   func(string)

	deps  *depMap
	seq   atomic.Uint64
	dead  atomic.Pointer[map[string]int64] // node -> when reported dead (Unix ns); copy on write
	mu    sync.Mutex                       // guards creation, ndeps, defaults, rnd, dead writes
	ndeps int
	def   Policy
	rnd   Rand

	outMu  sync.Mutex // leaf lock
	outbox []BreakerRecord

	refused, invalidRows, invalidRecords, evicted atomic.Uint64
}

// NewEngine returns an engine for one node.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{node: cfg.Node, zone: cfg.Zone, clock: cfg.Clock, maxDeps: cfg.MaxDependencies,
		onChange: cfg.OnChange, rnd: cfg.Rand, def: DefaultPolicy(), deps: newDepMap()}
	if e.clock == nil {
		e.clock = SystemClock{}
	}
	if mc, ok := e.clock.(*ManualClock); ok {
		e.manual = mc
	}
	if e.maxDeps == 0 {
		e.maxDeps = DefaultMaxDependencies
	}
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
	e.dead.Store(&map[string]int64{})
	return e, nil
}

// Node returns the node name the engine was built for.
func (e *Engine) Node() string { return e.node }

// Zone returns the zone the engine was built for.
func (e *Engine) Zone() string { return e.zone }

// now reads the clock and refreshes the cached reading used by Record.
func (e *Engine) now() time.Time {
	t := e.clock.Now()
	if ns := t.UnixNano(); e.coarse.Load() < ns {
		e.coarse.Store(ns)
	}
	return t
}

func (e *Engine) recordNanos() int64 {
	if e.manual != nil {
		return e.manual.nanos()
	}
	return e.coarse.Load()
}

func (e *Engine) notify(dep string) {
	if e.onChange != nil {
		e.onChange(dep)
	}
}

func (e *Engine) lookup(dep string) *depState { return e.deps.load(dep) }

// state returns the dependency's state, creating it if needed.
func (e *Engine) state(dep string) (*depState, error) {
	if d := e.deps.load(dep); d != nil {
		return d, nil
	}
	return e.create(dep)
}

func (e *Engine) create(dep string) (*depState, error) {
	if err := ValidateDependencyName(dep); err != nil {
		return nil, err
	}
	now := e.now()
	e.mu.Lock()
	if d := e.deps.load(dep); d != nil {
		e.mu.Unlock()
		return d, nil
	}
	if e.ndeps >= e.maxDeps {
		e.mu.Unlock()
		e.refused.Add(1)
		return nil, &TooManyDependenciesError{Dependency: dep, Limit: e.maxDeps}
	}
	name := strings.Clone(dep)
	d := &depState{name: name, records: map[string]BreakerRecord{}, rowIdx: map[string]int{}}
	d.setPolicy(e, e.effective(name, nil), e.rnd.Uint64())
	d.publish(e, now)
	e.deps.store(name, d)
	e.ndeps++
	e.mu.Unlock()
	e.notify(name)
	return d, nil
}

// effective merges patch over the default for dep. Caller holds e.mu.
func (e *Engine) effective(dep string, patch *PolicyPatch) Policy {
	var p Policy
	if patch == nil {
		p = e.def
	} else {
		p = MergePolicy(e.def, *patch)
	}
	p.Dependency = dep
	return p
}

// sortedDeps returns the tracked dependencies ordered by name.
func (e *Engine) sortedDeps() []*depState {
	ds := e.deps.values()
	slices.SortFunc(ds, func(a, b *depState) int { return strings.Compare(a.name, b.name) })
	return ds
}

// Record counts one finished attempt (or one honoured rejection) of this
// node's callers. Counting rule: a FirstAttempt counts one first attempt plus
// its outcome; a Retry or a Probe counts only its outcome, because
// AcquireRetry and AcquireProbe counted the attempt when they admitted it;
// the Rejected outcome counts one rejection whatever the kind. See Outcome for
// slow calls. It allocates nothing once the dependency is known.
//
// Record does not feed the half-open logic: report a probe's result with
// ProbeResult as well.
func (e *Engine) Record(dep string, kind AttemptKind, o Outcome) error {
	if kind > Probe || o > Rejected {
		return fmt.Errorf("%w: attempt kind %d, outcome %d", ErrInvalidArgument, kind, o)
	}
	for {
		d, err := e.state(dep)
		if err != nil {
			return err
		}
		b := d.win.Load().slot(e.recordNanos())
		switch o {
		case Rejected:
			b.c[cRejected].Add(1)
		default:
			if kind == FirstAttempt {
				b.c[cFirst].Add(1)
			}
			switch o {
			case Success:
				b.c[cSuccesses].Add(1)
			case Failure:
				b.c[cFailures].Add(1)
			case Slow:
				b.c[cSuccesses].Add(1)
				b.c[cSlow].Add(1)
			case SlowFailure:
				b.c[cFailures].Add(1)
				b.c[cSlow].Add(1)
			}
		}
		// A dependency evicted while we counted lost the count with it:
		// count again in its successor (created by state).
		if !d.evicted.Load() {
			return nil
		}
	}
}

// AddCounts adds a client's aggregated count deltas to this node's window.
// The counting rule of Record applies: Retries must not include retries
// admitted by AcquireRetry, which counted them already.
func (e *Engine) AddCounts(dep string, c Counts) error {
	for {
		d, err := e.state(dep)
		if err != nil {
			return err
		}
		b := d.win.Load().slot(e.recordNanos())
		addIf(&b.c[cFirst], c.FirstAttempts)
		addIf(&b.c[cRetries], c.Retries)
		addIf(&b.c[cSuccesses], c.Successes)
		addIf(&b.c[cFailures], c.Failures)
		addIf(&b.c[cSlow], c.SlowCalls)
		addIf(&b.c[cRejected], c.Rejected)
		if !d.evicted.Load() {
			return nil
		}
	}
}

// Decide answers whether an attempt of the given kind may be made now. It
// neither counts nor reserves anything: report what happened with Record, and
// use AcquireRetry and AcquireProbe to take budget and probe permits. An
// untracked dependency is allowed. On a closed breaker a FirstAttempt or
// Probe is decided without a lock or an allocation.
//
// Answers: forced-open rejects (ReasonForcedOpen) and forced-closed allows,
// whatever else holds; an open breaker rejects (ReasonOpen); a half-open one
// answers AllowProbe where this node holds a free probe permit and rejects
// the rest (ReasonHalfOpenNoPermit, always for a Retry); a closed one allows,
// a Retry only within the retry budget (ReasonBudgetExhausted). In shadow mode
// every rejection except forced-open becomes Allow with the Reason kept.
func (e *Engine) Decide(dep string, kind AttemptKind) Decision {
	d := e.lookup(dep)
	if d == nil {
		return allow
	}
	if kind != Retry {
		if s := d.snap.Load(); s.State == Closed && s.LocalState == Closed && s.Override == OverrideNone {
			return allow
		}
	}
	now := e.now()
	d.mu.Lock()
	changed := d.refresh(e, now)
	dec, _ := d.decide(e, now, kind)
	d.mu.Unlock()
	if changed {
		e.notify(d.name)
	}
	return dec
}

// AcquireRetry decides a retry as Decide does and, when it is allowed, takes
// it from the budget (counts it as a retry); a rejection is counted as
// rejected. Report the retry's outcome with Record(dep, Retry, outcome).
func (e *Engine) AcquireRetry(dep string) Decision {
	return e.acquire(dep, Retry)
}

// AcquireProbe asks for a probe. AllowProbe means the caller holds this
// node's probe slot and must report the result with ProbeResult (and the
// outcome with Record(dep, Probe, outcome)); the slot is released by the
// result, by the end of the probe round, or after probeTimeout for a
// node-local breaker. Allow means the breaker is closed (or forced closed):
// a normal call. Allowed calls are counted as first attempts, rejections as
// rejected.
func (e *Engine) AcquireProbe(dep string) Decision {
	return e.acquire(dep, Probe)
}

func (e *Engine) acquire(dep string, kind AttemptKind) Decision {
	d, err := e.state(dep)
	if err != nil {
		return allow
	}
	now := e.now()
	d.mu.Lock()
	changed := d.refresh(e, now)
	dec, slot := d.decide(e, now, kind)
	b := d.win.Load().slot(now.UnixNano())
	switch {
	case !dec.Allowed():
		b.c[cRejected].Add(1)
	case kind == Retry:
		b.c[cRetries].Add(1)
	default:
		b.c[cFirst].Add(1)
	}
	if dec.Verdict == AllowProbe {
		switch slot {
		case slotFleet:
			rec := d.rec(e)
			d.probe.inFlight = true
			d.probe.round, _ = d.round(rec, now)
		case slotLocal:
			d.local.inFlight = true
			d.local.inFlightAt = now
		}
	}
	d.mu.Unlock()
	if changed {
		e.notify(d.name)
	}
	return dec
}

// ProbeResult reports the result of the probe admitted by AcquireProbe. A
// success counts towards probeSuccessThreshold; reaching it, or a failure,
// makes this node propose a new record (closed, or open with openCount+1),
// which ProbeResult returns with true, applies locally and also queues for the
// next Tick. For a node-local breaker the transition stays local and nothing
// is returned. A result with no probe in flight (late, or after the round
// ended) is ignored.
func (e *Engine) ProbeResult(dep string, success bool) (BreakerRecord, bool) {
	d := e.lookup(dep)
	if d == nil {
		return BreakerRecord{}, false
	}
	now := e.now()
	d.mu.Lock()
	changed := d.refresh(e, now)
	p, ok := d.probeResult(e, now, success)
	changed = d.publish(e, now) || changed
	d.mu.Unlock()
	if changed {
		e.notify(d.name)
	}
	return p, ok
}

// ApplyRow takes a row gossiped by another node. It returns true if the row
// is new (a higher Seq than the one held for that node and dependency), in
// which case the caller may pass it on. Rows from this node, from nodes
// reported dead, malformed rows and rows past MaxDependencies are dropped.
func (e *Engine) ApplyRow(r NodeWindow) bool {
	if r.Validate() != nil {
		e.invalidRows.Add(1)
		return false
	}
	if r.Node == e.node {
		return false
	}
	if _, dead := (*e.dead.Load())[r.Node]; dead {
		return false
	}
	d, err := e.state(r.Dependency)
	if err != nil {
		return false
	}
	now := e.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	r.Dependency = d.name // share one copy of the name
	if i, ok := d.rowIdx[r.Node]; ok {
		if d.rows[i].Seq >= r.Seq {
			return false
		}
		r.Node = d.rows[i].Node
		d.rows[i] = rowEntry{NodeWindow: r, received: now.UnixNano()}
		d.classify(e, &d.rows[i])
	} else {
		r.Node = strings.Clone(r.Node)
		d.rowIdx[r.Node] = len(d.rows)
		d.rows = append(d.rows, rowEntry{NodeWindow: r, received: now.UnixNano()})
		d.classify(e, &d.rows[len(d.rows)-1])
	}
	d.rowsVersion++
	return true
}

// ApplyRecord merges a breaker record from elsewhere into this node's state.
// It returns true if the record changed this node's state, in which case the
// caller should pass it on (epidemic re-broadcast). Malformed records and
// records past MaxDependencies are dropped.
func (e *Engine) ApplyRecord(r BreakerRecord) bool {
	if r.Validate() != nil {
		e.invalidRecords.Add(1)
		return false
	}
	d, err := e.state(r.Dependency)
	if err != nil {
		return false
	}
	now := e.now()
	d.mu.Lock()
	changed := d.applyRecord(e, r, now)
	published := false
	if changed {
		published = d.refresh(e, now)
	}
	d.mu.Unlock()
	if published {
		e.notify(d.name)
	}
	return changed
}

// Tick evaluates, for every dependency, the rules that depend on time and on
// the gossiped rows: it drops stale rows, expires overrides, applies the trip
// rule to the fleet's (or zone's) totals and to this node's own window,
// releases probe slots whose round ended, rotates probe permits and forgets
// idle dependencies. It returns every record this node proposed since the
// previous Tick (including those ProbeResult returned), ordered by
// dependency; the caller gossips them.
func (e *Engine) Tick() []BreakerRecord {
	now := e.now()
	var changed []string
	for _, d := range e.sortedDeps() {
		d.mu.Lock()
		ch, idle := d.tick(e, now)
		d.mu.Unlock()
		if ch {
			changed = append(changed, d.name)
		}
		if idle && e.evict(d, now) {
			changed = append(changed, d.name)
		}
	}
	e.pruneDead(now)
	for _, dep := range changed {
		e.notify(dep)
	}
	e.outMu.Lock()
	out := e.outbox
	e.outbox = nil
	e.outMu.Unlock()
	slices.SortStableFunc(out, func(a, b BreakerRecord) int {
		return cmp.Or(strings.Compare(a.Dependency, b.Dependency), strings.Compare(a.Zone, b.Zone))
	})
	return out
}

func (e *Engine) enqueue(r BreakerRecord) {
	e.outMu.Lock()
	e.outbox = append(e.outbox, r)
	e.outMu.Unlock()
}

// evict forgets an idle dependency. Counts recorded concurrently with the
// eviction may be lost (Record re-counts those it sees evicted).
func (e *Engine) evict(d *depState, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.idle(e, now) {
		return false
	}
	d.evicted.Store(true)
	e.deps.delete(d.name)
	e.ndeps--
	e.evicted.Add(1)
	return true
}

// RowsToSend returns this node's rows that changed since they were last
// returned, and rows due for a heartbeat (every window/2, slightly jittered,
// while the counts are not all zero). Each returned row has a new Seq; the
// caller gossips them.
func (e *Engine) RowsToSend() []NodeWindow {
	now := e.now()
	var out []NodeWindow
	for _, d := range e.sortedDeps() {
		d.mu.Lock()
		if r, ok := d.rowToSend(e, now); ok {
			out = append(out, r)
		}
		d.mu.Unlock()
	}
	return out
}

// LocalRows returns the rows RowsToSend last returned for every dependency
// this node has something to report for (non-zero counts, or its own breaker
// open): the node's rows for a push-pull exchange.
func (e *Engine) LocalRows() []NodeWindow {
	var out []NodeWindow
	for _, d := range e.sortedDeps() {
		d.mu.Lock()
		if d.sent.valid && (!d.sent.row.Counts.IsZero() || d.sent.row.LocalOpen) {
			out = append(out, d.sent.row)
		}
		d.mu.Unlock()
	}
	return out
}

// Records returns every breaker record this node holds beyond the initial
// closed state, ordered by dependency and zone: the records for a push-pull
// exchange.
func (e *Engine) Records() []BreakerRecord {
	var out []BreakerRecord
	for _, d := range e.sortedDeps() {
		d.mu.Lock()
		for _, r := range d.records {
			out = append(out, r)
		}
		d.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b BreakerRecord) int {
		return cmp.Or(strings.Compare(a.Dependency, b.Dependency), strings.Compare(a.Zone, b.Zone))
	})
	return out
}

// Rows returns the live rows for dep, this node's own current counts
// included, ordered by node.
func (e *Engine) Rows(dep string) []NodeWindow {
	d := e.lookup(dep)
	if d == nil {
		return nil
	}
	now := e.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	stale := 2 * int64(d.pol.Breaker.Window)
	out := []NodeWindow{d.ownRow(e, now)}
	for _, r := range d.rows {
		if now.UnixNano()-r.received < stale {
			out = append(out, r.NodeWindow)
		}
	}
	slices.SortFunc(out, func(a, b NodeWindow) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// Snapshot returns the current snapshot of dep, or nil if the engine does not
// track it.
func (e *Engine) Snapshot(dep string) *Snapshot {
	if d := e.lookup(dep); d != nil {
		return d.snap.Load()
	}
	return nil
}

// Dependencies returns the names of the tracked dependencies, sorted.
func (e *Engine) Dependencies() []string {
	ds := e.sortedDeps()
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.name
	}
	return out
}

// Policy returns the effective policy of dep (the default for an untracked one).
func (e *Engine) Policy(dep string) Policy {
	if d := e.lookup(dep); d != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.pol
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.effective(dep, nil)
}

// FleetTotals are the totals of one dependency as this node sees them.
type FleetTotals struct {
	Dependency string
	Scope      Scope

	Fleet      Counts // every live row and this node's own window
	FleetNodes int    // nodes with any count in Fleet
	Zone       Counts // the rows of this node's zone, own window included
	ZoneNodes  int
	Node       Counts // this node's own window

	// Evaluated is what the trip rule and the retry budget see: the rows in
	// the policy's scope whose generation is the current record's or newer.
	Evaluated      Counts
	EvaluatedNodes int // nodes with requests in Evaluated
	FailingNodes   int // of those, nodes whose own rates meet a threshold

	RetryBudget float64 // retries the scope may make over the window
	RetryShare  float64 // this node's share of it
}

// Fleet returns dep's totals as this node sees them, and false if the engine
// does not track dep.
func (e *Engine) Fleet(dep string) (FleetTotals, bool) {
	d := e.lookup(dep)
	if d == nil {
		return FleetTotals{}, false
	}
	now := e.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.scan(e, now.UnixNano(), d.rec(e).Generation)
	budget, share := d.pol.Retry.Budget.compute(d.pol.Breaker.Window.Std(), s)
	return FleetTotals{
		Dependency: d.name, Scope: d.pol.Breaker.Scope,
		Fleet: s.fleet, FleetNodes: s.fleetNodes, Zone: s.zone, ZoneNodes: s.zoneNodes, Node: s.own,
		Evaluated: s.eff, EvaluatedNodes: s.effNodes, FailingNodes: s.effFailing,
		RetryBudget: budget, RetryShare: share,
	}, true
}

// SetDefaultPolicy replaces the fleet default (policies/_default) and
// re-merges every dependency's policy over it. p must be valid. A dependency
// whose merged policy would be invalid keeps its previous policy; the
// returned error names each such dependency, and the default is set anyway.
func (e *Engine) SetDefaultPolicy(p Policy) error {
	p.Dependency = DefaultPolicyName
	if err := p.Validate(); err != nil {
		return err
	}
	now := e.now()
	e.mu.Lock()
	e.def = p
	var errs []error
	var changed []string
	for _, d := range e.sortedDeps() {
		d.mu.Lock()
		eff := e.effective(d.name, d.patch)
		if err := eff.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("dependency %s keeps its previous policy: %w", d.name, err))
		} else {
			d.setPolicy(e, eff, e.rnd.Uint64())
			if d.refresh(e, now) {
				changed = append(changed, d.name)
			}
		}
		d.mu.Unlock()
	}
	e.mu.Unlock()
	for _, dep := range changed {
		e.notify(dep)
	}
	return errors.Join(errs...)
}

// SetPolicy sets dep's complete policy; the default no longer matters to it.
// p.Dependency is ignored. The policy must be valid.
func (e *Engine) SetPolicy(dep string, p Policy) error {
	p.Dependency = dep
	return e.SetPolicyPatch(dep, p.Patch())
}

// SetPolicyPatch sets dep's partial policy (policies/<dep>): the effective
// policy is the patch merged over the current default, and is re-merged when
// the default changes. The merged policy must be valid, else nothing changes
// and the *ValidationError is returned. A different window length starts the
// dependency's window afresh.
func (e *Engine) SetPolicyPatch(dep string, patch PolicyPatch) error {
	if patch.Dependency != "" && patch.Dependency != dep {
		return &ValidationError{Violations: []Violation{{Field: "dependency", Value: patch.Dependency,
			Message: "must match the dependency the policy is stored for (" + dep + ")"}}}
	}
	d, err := e.state(dep)
	if err != nil {
		return err
	}
	patch = patch.clone()
	now := e.now()
	e.mu.Lock()
	eff := e.effective(dep, &patch)
	if err := eff.Validate(); err != nil {
		e.mu.Unlock()
		return err
	}
	d.mu.Lock()
	d.patch = &patch
	d.setPolicy(e, eff, e.rnd.Uint64())
	changed := d.refresh(e, now)
	d.mu.Unlock()
	e.mu.Unlock()
	if changed {
		e.notify(dep)
	}
	return nil
}

// RemovePolicy drops dep's own policy: it follows the default again.
func (e *Engine) RemovePolicy(dep string) {
	d := e.lookup(dep)
	if d == nil {
		return
	}
	now := e.now()
	e.mu.Lock()
	d.mu.Lock()
	d.patch = nil
	d.setPolicy(e, e.effective(dep, nil), e.rnd.Uint64())
	changed := d.refresh(e, now)
	d.mu.Unlock()
	e.mu.Unlock()
	if changed {
		e.notify(dep)
	}
}

// SetOverride sets (or, with nil, clears) the operator override of dep. An
// override beats every computed state until it expires or is cleared.
func (e *Engine) SetOverride(dep string, o *Override) error {
	if o != nil {
		if err := o.Validate(); err != nil {
			return err
		}
		c := *o
		o = &c
	}
	var d *depState
	if o == nil {
		if d = e.lookup(dep); d == nil {
			return nil
		}
	} else {
		var err error
		if d, err = e.state(dep); err != nil {
			return err
		}
	}
	now := e.now()
	d.mu.Lock()
	d.override = o
	changed := d.refresh(e, now)
	d.mu.Unlock()
	if changed {
		e.notify(dep)
	}
	return nil
}

// SetMembers declares the complete list of live members: rows of every other
// node are dropped (as for MemberDead) and the listed nodes are alive.
func (e *Engine) SetMembers(members []Member) {
	alive := make(map[string]bool, len(members))
	for _, m := range members {
		alive[m.Node] = true
	}
	now := e.now()
	e.mu.Lock()
	dead := map[string]int64{}
	for n, at := range *e.dead.Load() {
		if !alive[n] {
			dead[n] = at
		}
	}
	for _, d := range e.sortedDeps() {
		d.mu.Lock()
		for _, r := range slices.Clone(d.rows) {
			if !alive[r.Node] {
				dead[r.Node] = now.UnixNano()
				d.removeRow(r.Node)
			}
		}
		d.mu.Unlock()
	}
	e.dead.Store(&dead)
	e.mu.Unlock()
}

// MemberDead drops every row of node and ignores its rows until MemberAlive
// (or for an hour).
func (e *Engine) MemberDead(node string) {
	if node == e.node {
		return
	}
	now := e.now()
	e.mu.Lock()
	dead := maps.Clone(*e.dead.Load())
	dead[node] = now.UnixNano()
	e.dead.Store(&dead)
	e.mu.Unlock()
	for _, d := range e.sortedDeps() {
		d.mu.Lock()
		d.removeRow(node)
		d.mu.Unlock()
	}
}

// MemberAlive accepts node's rows again.
func (e *Engine) MemberAlive(node, zone string) {
	_ = zone // rows carry their zone; kept for symmetry with Member
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := (*e.dead.Load())[node]; !ok {
		return
	}
	dead := maps.Clone(*e.dead.Load())
	delete(dead, node)
	e.dead.Store(&dead)
}

func (e *Engine) pruneDead(now time.Time) {
	cur := *e.dead.Load()
	old := false
	for _, at := range cur {
		if now.UnixNano()-at >= int64(deadMemberRetention) {
			old = true
			break
		}
	}
	if !old {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	dead := map[string]int64{}
	for n, at := range *e.dead.Load() {
		if now.UnixNano()-at < int64(deadMemberRetention) {
			dead[n] = at
		}
	}
	e.dead.Store(&dead)
}

// Stats returns the engine's counters.
func (e *Engine) Stats() EngineStats {
	e.mu.Lock()
	n := e.ndeps
	e.mu.Unlock()
	return EngineStats{Dependencies: n, RefusedDependencies: e.refused.Load(),
		InvalidRows: e.invalidRows.Load(), InvalidRecords: e.invalidRecords.Load(), Evicted: e.evicted.Load()}
}

func (p PolicyPatch) clone() PolicyPatch {
	c := p
	c.Schema = cp(p.Schema)
	if b := p.Breaker; b != nil {
		c.Breaker = &BreakerPatch{cp(b.FailureRateThreshold), cp(b.SlowCallRateThreshold), cp(b.SlowCallDuration),
			cp(b.MinimumRequests), cp(b.MinFailingNodes), cp(b.Window), cp(b.OpenDuration), cp(b.MaxOpenDuration),
			cp(b.HalfOpenProbes), cp(b.ProbeSuccessThreshold), cp(b.ProbeTimeout), cp(b.Scope), cp(b.Mode)}
	}
	if r := p.Retry; r != nil {
		c.Retry = &RetryPatch{MaxAttempts: cp(r.MaxAttempts), PerAttemptTimeout: cp(r.PerAttemptTimeout)}
		if bo := r.Backoff; bo != nil {
			c.Retry.Backoff = &BackoffPatch{cp(bo.Base), cp(bo.Max), cp(bo.Jitter)}
		}
		if bu := r.Budget; bu != nil {
			c.Retry.Budget = &BudgetPatch{cp(bu.Ratio), cp(bu.MinRetriesPerSecond)}
		}
	}
	return c
}

func cp[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
