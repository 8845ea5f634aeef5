package history

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Defaults of Config.
const (
	DefaultFineHorizon     = 15 * time.Minute
	DefaultCoarseHorizon   = 3 * time.Hour
	DefaultMaxDependencies = 64
	DefaultMaxNodes        = 1000
	DefaultMaxRecords      = 1000

	// CoarseStep is the width of a coarse slot.
	CoarseStep = time.Second
	// MinFineStep is the narrowest fine slot: windows under 10 s are kept at
	// 100 ms, coarser than their sub-buckets.
	MinFineStep = 100 * time.Millisecond
	// MaxHorizon bounds both horizons (a week).
	MaxHorizon = 7 * 24 * time.Hour
	// NodeBits is how many nodes a Slot tells apart.
	NodeBits = 64

	// chunkSlots makes a chunk (slots and its index) 12,248 bytes, just
	// under an allocator size class (12,288).
	chunkSlots = 255
)

// Reasons passed to Config.OnDrop.
const (
	// DropTooManyDependencies: a row or record of a dependency that got no
	// history: MaxDependencies are kept, and none may give its place to it
	// (the room rule: coordinator/README.md, "The history").
	DropTooManyDependencies = "too_many_dependencies"
	// DropEvicted: a dependency's history gave its place to a busier or a
	// pinned one.
	DropEvicted = "evicted"
	// DropTooManyNodes: a row of a node past MaxNodes for its dependency.
	DropTooManyNodes = "too_many_nodes"
	// DropTooManyRecords: the oldest record of a dependency made room.
	DropTooManyRecords = "too_many_records"
	// DropNoTotals: a row without cumulative counts (a node of 0.1.x): the
	// history counts nothing of that node.
	DropNoTotals = "no_totals"
)

// DropReasons lists the reasons of Config.OnDrop.
var DropReasons = []string{DropTooManyDependencies, DropEvicted, DropTooManyNodes, DropTooManyRecords, DropNoTotals}

// ErrNoHistory is wrapped by Range for a dependency the history does not
// keep.
var ErrNoHistory = errors.New("history: no history")

// Config configures a History. The zero value works.
type Config struct {
	// FineHorizon is how long fine slots are kept (optional, default 15m).
	FineHorizon time.Duration
	// CoarseHorizon is how long 1 s slots are kept (optional, default 3h; at
	// least FineHorizon).
	CoarseHorizon time.Duration
	// MaxDependencies bounds the dependencies with a history (optional,
	// default 64); the room rule decides who keeps one.
	MaxDependencies int
	// MaxNodes bounds the nodes tracked per dependency (optional, default 1000).
	MaxNodes int
	// MaxRecords bounds the records kept per dependency (optional, default 1000).
	MaxRecords int
	// Start is when the history began watching (the coordinator's start): a
	// node's series first seen that began before is a baseline, one that
	// began after counts from zero, however late its first row arrives
	// (optional; zero: the first Observe or Tick).
	Start time.Time
	// Pinned reports whether a dependency keeps its history whatever its
	// traffic: the coordinator pins those with a stored policy or an
	// override in force (optional; the history pins those whose breaker is
	// open itself). Called under the History's lock: it must not call the
	// History, and must be cheap.
	Pinned func(dep string) bool
	// OnDrop is called, possibly under the History's lock, whenever data is
	// not kept, with one of the Drop* reasons (optional; keep it cheap: a
	// counter).
	OnDrop func(reason string)
}

// Validate reports every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.FineHorizon < 0 || c.FineHorizon > MaxHorizon {
		errs = append(errs, fmt.Errorf("history: fine horizon %v: must be between 0 (default) and %v", c.FineHorizon, MaxHorizon))
	}
	if c.CoarseHorizon < 0 || c.CoarseHorizon > MaxHorizon {
		errs = append(errs, fmt.Errorf("history: coarse horizon %v: must be between 0 (default) and %v", c.CoarseHorizon, MaxHorizon))
	}
	if c.FineHorizon > 0 && c.CoarseHorizon > 0 && c.CoarseHorizon < c.FineHorizon {
		errs = append(errs, fmt.Errorf("history: coarse horizon %v is shorter than the fine horizon %v", c.CoarseHorizon, c.FineHorizon))
	}
	if c.MaxDependencies < 0 || c.MaxNodes < 0 || c.MaxRecords < 0 {
		errs = append(errs, errors.New("history: limits must not be negative"))
	}
	return errors.Join(errs...)
}

// Slot is what the fleet counted for a dependency in one slice of time.
// Counts saturate at math.MaxUint32.
type Slot struct {
	FirstAttempts uint32
	Retries       uint32
	Successes     uint32
	Failures      uint32
	SlowCalls     uint32
	Rejected      uint32
	// FailingZones has a bit per zone (by hash, 32 bits) with failures or
	// slow calls in the slot.
	FailingZones uint32
	// ActiveNodes has a bit per node that counted anything in the slot,
	// FailingNodes one per node that counted failures or slow calls (see
	// coordinator/README.md, "The history", for how nodes get bits).
	ActiveNodes  uint64
	FailingNodes uint64
}

// Requests is successes + failures.
func (s Slot) Requests() uint64 { return uint64(s.Successes) + uint64(s.Failures) }

// IsZero reports whether the slot holds nothing.
func (s Slot) IsZero() bool { return s == Slot{} }

// Add adds o to s (saturating counts, or-ed bits).
func (s *Slot) Add(o Slot) {
	s.FirstAttempts = sat(s.FirstAttempts, o.FirstAttempts)
	s.Retries = sat(s.Retries, o.Retries)
	s.Successes = sat(s.Successes, o.Successes)
	s.Failures = sat(s.Failures, o.Failures)
	s.SlowCalls = sat(s.SlowCalls, o.SlowCalls)
	s.Rejected = sat(s.Rejected, o.Rejected)
	s.FailingZones |= o.FailingZones
	s.ActiveNodes |= o.ActiveNodes
	s.FailingNodes |= o.FailingNodes
}

// Nodes is the number of node bits active in the slot.
func (s Slot) Nodes() int { return bits.OnesCount64(s.ActiveNodes) }

func sat(a, b uint32) uint32 {
	if c := a + b; c >= a {
		return c
	}
	return math.MaxUint32
}

// Segment is a run of slots of one width, oldest first: slot i covers
// [From + i×Step, From + (i+1)×Step).
type Segment struct {
	From  time.Time
	Step  time.Duration
	Slots []Slot
}

// To is the end of the segment.
func (s Segment) To() time.Time { return s.From.Add(time.Duration(len(s.Slots)) * s.Step) }

// RecordKind says what a Record is about.
type RecordKind string

const (
	KindBreaker  RecordKind = "breaker"  // a breaker record the observer merged
	KindOverride RecordKind = "override" // an override set (State forced-open or forced-closed) or cleared ("none")
	KindPolicy   RecordKind = "policy"   // the dependency's policy (or the default) was written or deleted
)

// Record is something the observer saw happen to a dependency.
type Record struct {
	Kind RecordKind
	// At is when the observer saw it.
	At time.Time
	// Breaker records: the record itself (Since is the proposer's clock).
	Breaker sharedstate.BreakerRecord
	// Overrides: the state ("forced-open", "forced-closed", "none" when
	// cleared), the reason and the expiry (zero: none).
	Override sharedstate.OverrideState
	Reason   string
	Expires  time.Time
}

// Stats are the history's gauges.
type Stats struct {
	Dependencies int
	Nodes        int
	Bytes        int64
}

// History is the observer's history of every dependency it keeps one for.
type History struct {
	cfg Config

	mu      sync.Mutex
	deps    map[string]*depHistory
	started time.Time // Config.Start, else the first Observe or Tick
	// forgot is when the history last let a dependency's history go: a
	// series that began before is a baseline in a history made later.
	forgot time.Time
}

// New returns an empty History; cfg must pass Validate (New applies the
// defaults of zero fields and panics on an invalid cfg).
func New(cfg Config) *History {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	cfg.FineHorizon = cmp.Or(cfg.FineHorizon, DefaultFineHorizon)
	cfg.CoarseHorizon = cmp.Or(cfg.CoarseHorizon, max(DefaultCoarseHorizon, cfg.FineHorizon))
	cfg.MaxDependencies = cmp.Or(cfg.MaxDependencies, DefaultMaxDependencies)
	cfg.MaxNodes = cmp.Or(cfg.MaxNodes, DefaultMaxNodes)
	cfg.MaxRecords = cmp.Or(cfg.MaxRecords, DefaultMaxRecords)
	return &History{cfg: cfg, deps: map[string]*depHistory{}, started: cfg.Start}
}

// Config returns the configuration in force (defaults applied).
func (h *History) Config() Config { return h.cfg }

func (h *History) drop(reason string) {
	if h.cfg.OnDrop != nil {
		h.cfg.OnDrop(reason)
	}
}

type depHistory struct {
	fine, coarse tier
	nodes        map[string]*tracker
	usedBits     uint64 // node bits held by trackers
	records      []Record
	open         map[string]bool // zone ("" fleet-wide) -> the last record seen is open
	lastActivity time.Time
	// watched (Unix ms): a node's series first seen that began before is a
	// baseline (see sharedstate.Increase).
	watched       int64
	windowAtStart time.Duration
	use           use
}

func (h *History) touch(now time.Time) {
	if h.started.IsZero() {
		h.started = now
	}
}

// newDepLocked makes dep's history (the caller made room).
func (h *History) newDepLocked(dep string, now time.Time, window time.Duration) *depHistory {
	if window <= 0 {
		window = sharedstate.DefaultPolicy().Breaker.Window.Std()
	}
	step := max(window/sharedstate.FastSubBuckets, MinFineStep)
	d := &depHistory{
		fine:          newTier(step, h.cfg.FineHorizon),
		coarse:        newTier(CoarseStep, h.cfg.CoarseHorizon),
		nodes:         map[string]*tracker{},
		open:          map[string]bool{},
		lastActivity:  now,
		watched:       Later(h.started, h.forgot).UnixMilli(),
		windowAtStart: window,
	}
	h.deps[dep] = d
	return d
}

// ObserveRow takes a row the observer accepted, received at now, of a
// dependency whose policy has the given window: what the node's cumulative
// counts grew by since its previous row goes into the slot of the node's
// reading, kept between Settle before now and now, and never before the
// node's previous reading.
func (h *History) ObserveRow(now time.Time, r sharedstate.NodeWindow, window time.Duration) {
	if window <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.touch(now)
	d := h.roomLocked(r.Dependency, now, window, traffic(r.Counts), false)
	if d == nil {
		return
	}
	tr := d.nodes[r.Node]
	first := tr == nil
	if first {
		if tr = h.newTrackerLocked(d, r.Node, now, window); tr == nil {
			return
		}
	} else if r.Seq <= tr.seq {
		return
	}
	tr.seq, tr.seen = r.Seq, now
	if !tr.hasBit {
		tr.bit, tr.ownsBit = d.takeBit(r.Node)
		tr.hasBit = true
	}
	tr.zoneBit = zoneBit(r.Zone)
	if !r.Cumulative.Known() {
		h.drop(DropNoTotals)
		return
	}
	switch {
	case tr.credit(h, d, r.Cumulative, now):
		d.lastActivity = now
	case first:
		// A baseline: what its window holds ranks the dependency, uncredited.
		d.use.add(now, h.cfg.FineHorizon, traffic(r.Counts))
	}
}

// newTrackerLocked starts tracking a node of d; past MaxNodes it makes room
// by forgetting the node silent longest, if silent for two windows.
func (h *History) newTrackerLocked(d *depHistory, node string, now time.Time, window time.Duration) *tracker {
	if len(d.nodes) >= h.cfg.MaxNodes {
		var quiet string
		for n, tr := range d.nodes {
			if quiet == "" || tr.seen.Before(d.nodes[quiet].seen) {
				quiet = n
			}
		}
		if quiet == "" || now.Sub(d.nodes[quiet].seen) <= 2*window {
			h.drop(DropTooManyNodes)
			return nil
		}
		d.forget(quiet)
	}
	tr := &tracker{}
	d.nodes[node] = tr
	return tr
}

// forget stops tracking node: a series of it that began before its last
// reading is a baseline from then on.
func (d *depHistory) forget(node string) {
	tr := d.nodes[node]
	d.releaseBit(tr)
	d.watched = max(d.watched, tr.last.At)
	delete(d.nodes, node)
}

func (d *depHistory) releaseBit(tr *tracker) {
	if tr.hasBit && tr.ownsBit {
		d.usedBits &^= 1 << tr.bit
	}
	tr.hasBit = false
}

// takeBit gives a node the lowest free bit, or one by hash when all are
// held.
func (d *depHistory) takeBit(node string) (bit uint8, owned bool) {
	if free := ^d.usedBits; free != 0 {
		b := uint8(bits.TrailingZeros64(free))
		d.usedBits |= 1 << b
		return b, true
	}
	f := fnv.New32a()
	_, _ = f.Write([]byte(node))
	return uint8(f.Sum32() % NodeBits), false
}

func zoneBit(zone string) uint8 {
	f := fnv.New32a()
	_, _ = f.Write([]byte(zone))
	return uint8(f.Sum32() % 32)
}

// ObserveRecord takes a breaker record the observer merged (it changed the
// observer's state), at now. An open record pins its dependency's history
// until a closed one follows.
func (h *History) ObserveRecord(now time.Time, r sharedstate.BreakerRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.touch(now)
	d := h.roomLocked(r.Dependency, now, 0, 0, r.State == sharedstate.Open)
	if d == nil {
		return
	}
	d.open[r.Zone] = r.State == sharedstate.Open
	h.addRecordLocked(d, Record{Kind: KindBreaker, At: now, Breaker: r})
}

// ObserveOverride takes an override set (state forced-open or
// forced-closed) or cleared (OverrideNone) at now.
func (h *History) ObserveOverride(now time.Time, dep string, state sharedstate.OverrideState, reason string, expires time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.touch(now)
	d := h.roomLocked(dep, now, 0, 0, state != sharedstate.OverrideNone)
	if d == nil {
		return
	}
	h.addRecordLocked(d, Record{Kind: KindOverride, At: now, Override: state, Reason: reason, Expires: expires})
}

// ObservePolicy notes that the policy of dep changed at now. A change of
// the fleet default (dep "_default") is noted for every dependency kept.
func (h *History) ObservePolicy(now time.Time, dep string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.touch(now)
	if dep == sharedstate.DefaultPolicyName {
		for _, d := range h.deps {
			h.addRecordLocked(d, Record{Kind: KindPolicy, At: now, Reason: "default policy changed"})
		}
		return
	}
	if d := h.deps[dep]; d != nil {
		h.addRecordLocked(d, Record{Kind: KindPolicy, At: now, Reason: "policy changed"})
	}
}

func (h *History) addRecordLocked(d *depHistory, r Record) {
	if len(d.records) >= h.cfg.MaxRecords {
		d.records = slices.Delete(d.records, 0, 1)
		h.drop(DropTooManyRecords)
	}
	d.records = append(d.records, r)
	d.lastActivity = r.At
}

// Tick drops what left the horizons at now: slots, the node bits of nodes
// silent for two windows (window gives each dependency's), records older
// than the coarse horizon, and dependencies with nothing left for the
// coarse horizon.
func (h *History) Tick(now time.Time, window func(dep string) time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.touch(now)
	for name, d := range h.deps {
		w := window(name)
		if w <= 0 {
			w = d.windowAtStart
		}
		for _, tr := range d.nodes {
			if tr.hasBit && now.Sub(tr.seen) > 2*w {
				d.releaseBit(tr)
			}
		}
		d.fine.trim(now)
		d.coarse.trim(now)
		cut := now.Add(-h.cfg.CoarseHorizon)
		k := sort.Search(len(d.records), func(i int) bool { return !d.records[i].At.Before(cut) })
		if k > 0 && k < len(d.records) {
			k-- // keep the last record before the horizon: it says what was in force
		}
		if k > 0 {
			d.records = slices.Delete(d.records, 0, k)
		}
		if d.fine.empty() && d.coarse.empty() && now.Sub(d.lastActivity) > h.cfg.CoarseHorizon {
			delete(h.deps, name)
			h.forgot = now
		}
	}
}

// Range returns the slots of dep over [from, to): coarse slots up to where
// the fine ones begin, then fine slots, each segment aligned to its step.
// It fails with ErrNoHistory when the history keeps none for dep.
func (h *History) Range(dep string, from, to time.Time) ([]Segment, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.deps[dep]
	if !ok {
		return nil, fmt.Errorf("%w for %q: the coordinator saw no traffic or record of it in the last %v, or %d busier or pinned dependencies hold every history (--history-max-dependencies)",
			ErrNoHistory, dep, h.cfg.CoarseHorizon, h.cfg.MaxDependencies)
	}
	if !from.Before(to) {
		return nil, nil
	}
	fineStart := d.fine.oldest(to)
	var out []Segment
	if from.Before(fineStart) {
		if seg := d.coarse.segment(from, Earlier(fineStart, to)); len(seg.Slots) > 0 {
			out = append(out, seg)
			from = seg.To()
		}
	}
	if from.Before(to) {
		if seg := d.fine.segment(from, to); len(seg.Slots) > 0 {
			out = append(out, seg)
		}
	}
	return out, nil
}

// Records returns the records of dep seen in [from, to), and the last one
// of each kind before from (what was in force at from), oldest first.
func (h *History) Records(dep string, from, to time.Time) []Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.deps[dep]
	if !ok {
		return nil
	}
	var out []Record
	var lastBreaker, lastOverride *Record
	for i := range d.records {
		r := &d.records[i]
		switch {
		case r.At.Before(from):
			switch r.Kind {
			case KindBreaker:
				if r.Breaker.Zone == "" {
					lastBreaker = r
				}
			case KindOverride:
				lastOverride = r
			}
		case r.At.Before(to):
			out = append(out, *r)
		}
	}
	var before []Record
	for _, r := range []*Record{lastBreaker, lastOverride} {
		if r != nil {
			before = append(before, *r)
		}
	}
	slices.SortStableFunc(before, func(a, b Record) int { return a.At.Compare(b.At) })
	return append(before, out...)
}

// FineStep returns the width of dep's fine slots (0 when the history keeps
// none for it).
func (h *History) FineStep(dep string) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d, ok := h.deps[dep]; ok {
		return time.Duration(d.fine.step)
	}
	return 0
}

// Has reports whether the history keeps one for dep.
func (h *History) Has(dep string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.deps[dep]
	return ok
}

// Stats returns the history's sizes.
func (h *History) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	var s Stats
	s.Dependencies = len(h.deps)
	for _, d := range h.deps {
		s.Nodes += len(d.nodes)
		s.Bytes += d.bytes()
	}
	return s
}

// Bytes returns the memory dep's history holds (0 without one).
func (h *History) Bytes(dep string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d, ok := h.deps[dep]; ok {
		return d.bytes()
	}
	return 0
}
