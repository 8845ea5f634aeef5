package fleet

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Defaults of Config.
const (
	DefaultMaxDependencies = sharedstate.DefaultMaxDependencies
	DefaultMaxRows         = 500_000
	DefaultMaxDeparted     = 1000
	// DepartedRetention is how long a dead or departed member stays listed.
	DepartedRetention = 5 * time.Minute
	// MaxZonesPerDependency bounds the per-zone breaker records (scope
	// "zone") of one dependency.
	MaxZonesPerDependency = 64
)

// Refusal reasons passed to Config.OnRefused.
const (
	RefusedInvalid     = "invalid"        // a row or record that does not validate
	RefusedTooManyDeps = "too_many_deps"  // past MaxDependencies
	RefusedTooManyRows = "too_many_rows"  // past MaxRows
	RefusedNotAnAgent  = "not_an_agent"   // a row from a member whose role is not agent
	RefusedTooManyZone = "too_many_zones" // a record for a zone past MaxZonesPerDependency
)

// Transition is a change of a dependency's breaker state as the observer
// derives it (half-open included).
type Transition struct {
	Dependency string
	Zone       string // the zone of a scope "zone" record; "" for the fleet-wide one
	Previous   sharedstate.BreakerState
	State      sharedstate.BreakerState
	Generation uint64
	Origin     string
	Reason     string
	At         time.Time
}

// Config configures a View. The zero value works (every field optional).
type Config struct {
	// MaxDependencies bounds the dependencies tracked (optional, default 10000).
	MaxDependencies int
	// MaxRows bounds the rows kept over all dependencies (optional, default 500000).
	MaxRows int
	// MaxDeparted bounds the dead/left members kept for display (optional, default 1000).
	MaxDeparted int
	// Clock stamps receipts (optional, default sharedstate.SystemClock).
	Clock sharedstate.Clock
	// OnTransition is called for every derived state change, outside the
	// View's lock, from the goroutine that caused it (a memberlist goroutine
	// or the caller of Tick). Optional; must not block.
	OnTransition func(Transition)
	// OnRefused is called for every refused row or record, with one of the
	// Refused* reasons, possibly under the View's lock: keep it cheap
	// (a counter). Optional.
	OnRefused func(reason string)
	// OnRow is called with every row the view took (newer than the one it
	// held), received at at; OnRecord with every record that changed the
	// merged record it holds, merged. Both outside the View's lock, from
	// the goroutine that delivered them (a memberlist goroutine), possibly
	// concurrently. Optional; must not block.
	OnRow    func(r sharedstate.NodeWindow, at time.Time)
	OnRecord func(r sharedstate.BreakerRecord, at time.Time)
}

// Source supplies what etcd holds. Implementations must be safe for
// concurrent use and cheap: Snapshot calls them per dependency.
type Source interface {
	// Policy returns the effective policy of a dependency (its patch over
	// the fleet default).
	Policy(dependency string) sharedstate.Policy
	// Override returns the override of a dependency in force at now.
	Override(dependency string, now time.Time) (Override, bool)
	// Dependencies returns the names that have a policy or an override, so
	// that they are listed even without traffic.
	Dependencies() []string
}

// Override is an operator override as the view shows it.
type Override struct {
	State   sharedstate.OverrideState
	Reason  string
	Actor   string
	Created time.Time
	Expires time.Time // zero: no expiry
}

type row struct {
	zone     string
	seq      uint64
	counts   sharedstate.Counts
	local    bool
	inFlight uint64
	received time.Time
}

type recKey struct{ dep, zone string }

type derivedState struct {
	state      sharedstate.BreakerState
	generation uint64
}

type memberInfo struct {
	gossip.Member
	changed time.Time
}

// View is the observer's fleet view. Its methods are safe for concurrent use.
type View struct {
	cfg Config

	mu      sync.Mutex
	rows    map[string]map[string]*row // dependency → node → row
	nrows   int
	records map[string]map[string]sharedstate.BreakerRecord // dependency → zone ("" fleet-wide) → merged record
	derived map[recKey]derivedState                         // last derived state, for transitions
	members map[string]*memberInfo                          // alive, suspect, dead, left
}

// New returns an empty View.
func New(cfg Config) *View {
	if cfg.MaxDependencies <= 0 {
		cfg.MaxDependencies = DefaultMaxDependencies
	}
	if cfg.MaxRows <= 0 {
		cfg.MaxRows = DefaultMaxRows
	}
	if cfg.MaxDeparted <= 0 {
		cfg.MaxDeparted = DefaultMaxDeparted
	}
	if cfg.Clock == nil {
		cfg.Clock = sharedstate.SystemClock{}
	}
	return &View{
		cfg:     cfg,
		rows:    map[string]map[string]*row{},
		records: map[string]map[string]sharedstate.BreakerRecord{},
		derived: map[recKey]derivedState{},
		members: map[string]*memberInfo{},
	}
}

func (v *View) refuse(reason string) {
	if v.cfg.OnRefused != nil {
		v.cfg.OnRefused(reason)
	}
}

// ---- gossip.Handler ----

// ApplyBatch records a broadcast or direct message. It relays nothing.
func (v *View) ApplyBatch(b *fuseboxv1.GossipBatch) (*fuseboxv1.GossipBatch, int) {
	return nil, v.apply(b.GetRows(), b.GetRecords())
}

// ApplyState records a peer's push-pull state.
func (v *View) ApplyState(s *fuseboxv1.PushPullState, _ bool) (*fuseboxv1.GossipBatch, int) {
	return nil, v.apply(s.GetRows(), s.GetRecords())
}

// LocalState returns nil: an observer has no state to share.
func (v *View) LocalState(bool) *fuseboxv1.PushPullState { return nil }

func (v *View) apply(rows []*fuseboxv1.NodeWindow, records []*fuseboxv1.BreakerRecord) int {
	now := v.cfg.Clock.Now()
	refused := 0
	var (
		transitions []Transition
		took        []*fuseboxv1.NodeWindow
		merged      []sharedstate.BreakerRecord
	)
	v.mu.Lock()
	for _, r := range rows {
		reason, ok := v.applyRowLocked(r, now)
		if reason != "" {
			refused++
			v.refuse(reason)
		}
		if ok && v.cfg.OnRow != nil {
			took = append(took, r)
		}
	}
	for _, pr := range records {
		rec, ok := convert.RecordFromProto(pr)
		var err error
		if !ok {
			err = fmt.Errorf("fleet: record of %q: state %v does not travel", pr.GetDependency(), pr.GetState())
		} else {
			err = rec.Validate()
		}
		if err != nil {
			refused++
			v.refuse(RefusedInvalid)
			continue
		}
		byZone, known := v.records[rec.Dependency]
		if !known {
			if !v.knownLocked(rec.Dependency) && v.depsLocked() >= v.cfg.MaxDependencies {
				refused++
				v.refuse(RefusedTooManyDeps)
				continue
			}
			byZone = map[string]sharedstate.BreakerRecord{}
			v.records[rec.Dependency] = byZone
		}
		old, ok := byZone[rec.Zone]
		if !ok && len(byZone) >= MaxZonesPerDependency {
			refused++
			v.refuse(RefusedTooManyZone)
			continue
		}
		m := rec
		if ok {
			m = sharedstate.Merge(old, rec)
		}
		byZone[rec.Zone] = m
		if !ok || !sharedstate.SameRecord(old, m) {
			merged = append(merged, m)
			key := recKey{rec.Dependency, rec.Zone}
			if t, passed := v.passedHalfOpenLocked(key, old, m, now); passed {
				transitions = append(transitions, t)
			}
			// The policy is not at hand here: Tick derives half-open.
			if t, changed := v.deriveLocked(key, m, m.State, now); changed {
				transitions = append(transitions, t)
			}
		}
	}
	v.mu.Unlock()
	for _, r := range took {
		v.cfg.OnRow(convert.RowFromProto(r), now)
	}
	if v.cfg.OnRecord != nil {
		for _, r := range merged {
			v.cfg.OnRecord(r, now)
		}
	}
	v.emit(transitions)
	return refused
}

func (v *View) emit(ts []Transition) {
	if v.cfg.OnTransition == nil {
		return
	}
	for _, t := range ts {
		v.cfg.OnTransition(t)
	}
}

// deriveLocked records (state, generation) as the derived state of a
// record and reports a transition when it differs from the last one. A
// closed breaker heard of for the first time is no news.
func (v *View) deriveLocked(key recKey, rec sharedstate.BreakerRecord, state sharedstate.BreakerState, now time.Time) (Transition, bool) {
	prev, seen := v.derived[key]
	cur := derivedState{state: state, generation: rec.Generation}
	v.derived[key] = cur
	if (seen && prev == cur) || (!seen && state == sharedstate.Closed) {
		return Transition{}, false
	}
	return Transition{Dependency: key.dep, Zone: key.zone, Previous: prev.state, State: state, Generation: rec.Generation,
		Origin: rec.Origin, Reason: rec.Reason, At: now}, true
}

// passedHalfOpenLocked reports the half-open state the agents went
// through between the open record old and its successor m, when the view
// has not derived it yet. Only a half-open breaker proposes the next
// generation of an open one (a failed probe reopens it, enough successful
// ones close it), but half-open travels in no record: Tick derives it once
// the open duration has passed, and a probe that fails within a tick (the
// usual case: it is the first call allowed) leaves it underived. Without
// this the view would report "open -> open" where every agent logged
// "half-open -> open".
func (v *View) passedHalfOpenLocked(key recKey, old, m sharedstate.BreakerRecord, now time.Time) (Transition, bool) {
	prev, seen := v.derived[key]
	if !seen || prev.state != sharedstate.Open || old.State != sharedstate.Open || m.Generation <= prev.generation {
		return Transition{}, false
	}
	v.derived[key] = derivedState{state: sharedstate.HalfOpen, generation: prev.generation}
	return Transition{Dependency: key.dep, Zone: key.zone, Previous: sharedstate.Open, State: sharedstate.HalfOpen,
		Generation: prev.generation, Origin: old.Origin, Reason: old.Reason, At: now}, true
}

// applyRowLocked takes one row: it returns the reason of a refusal, or
// whether the row was new (older or the same ones are neither).
func (v *View) applyRowLocked(r *fuseboxv1.NodeWindow, now time.Time) (string, bool) {
	dep, node := r.GetDependency(), r.GetNode()
	if sharedstate.ValidateDependencyName(dep) != nil || node == "" ||
		len(node) > sharedstate.MaxNodeNameLen || len(r.GetZone()) > sharedstate.MaxNodeNameLen {
		return RefusedInvalid, false
	}
	if m, ok := v.members[node]; ok && m.MetaErr == nil && m.Meta.Role != "" && !m.Meta.IsAgent() {
		return RefusedNotAnAgent, false
	}
	byNode, ok := v.rows[dep]
	if !ok {
		if !v.knownLocked(dep) && v.depsLocked() >= v.cfg.MaxDependencies {
			return RefusedTooManyDeps, false
		}
		byNode = map[string]*row{}
		v.rows[dep] = byNode
	}
	cur, ok := byNode[node]
	if ok && cur.seq >= r.GetSeq() {
		return "", false // older or the same: not new, not an error
	}
	if !ok {
		if v.nrows >= v.cfg.MaxRows {
			if len(byNode) == 0 {
				delete(v.rows, dep)
			}
			return RefusedTooManyRows, false
		}
		cur = &row{}
		byNode[node] = cur
		v.nrows++
	}
	*cur = row{zone: r.GetZone(), seq: r.GetSeq(), counts: convert.CountsFromProto(r.GetCounts()),
		local: r.GetNodeLocalOpen(), inFlight: r.GetInFlight(), received: now}
	return "", true
}

// knownLocked reports whether dep already takes a slot.
func (v *View) knownLocked(dep string) bool {
	if _, ok := v.rows[dep]; ok {
		return true
	}
	_, ok := v.records[dep]
	return ok
}

// depsLocked counts the dependencies that take a slot.
func (v *View) depsLocked() int {
	n := len(v.rows)
	for dep := range v.records {
		if _, ok := v.rows[dep]; !ok {
			n++
		}
	}
	return n
}

// ---- gossip.MemberEvents ----

// MemberJoined records a member.
func (v *View) MemberJoined(m gossip.Member) { v.member(m) }

// MemberUpdated records a member's new metadata.
func (v *View) MemberUpdated(m gossip.Member) { v.member(m) }

// MemberLeft records a member's departure and drops its rows.
func (v *View) MemberLeft(m gossip.Member) {
	if m.State == "alive" || m.State == "suspect" {
		m.State = "dead"
	}
	v.member(m)
	v.mu.Lock()
	defer v.mu.Unlock()
	for dep, byNode := range v.rows {
		if _, ok := byNode[m.Name]; ok {
			delete(byNode, m.Name)
			v.nrows--
			if len(byNode) == 0 {
				delete(v.rows, dep)
			}
		}
	}
}

func (v *View) member(m gossip.Member) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.members[m.Name] = &memberInfo{Member: m, changed: v.cfg.Clock.Now()}
	v.trimDepartedLocked(v.cfg.Clock.Now())
}

func departed(state string) bool { return state == "dead" || state == "left" }

func (v *View) trimDepartedLocked(now time.Time) {
	var gone []*memberInfo
	for name, m := range v.members {
		if !departed(m.State) {
			continue
		}
		if now.Sub(m.changed) > DepartedRetention {
			delete(v.members, name)
			continue
		}
		gone = append(gone, m)
	}
	if len(gone) <= v.cfg.MaxDeparted {
		return
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].changed.Before(gone[j].changed) })
	for _, m := range gone[:len(gone)-v.cfg.MaxDeparted] {
		delete(v.members, m.Name)
	}
}

// Members returns the members as the observer sees them, sorted by name,
// including dead and departed ones for DepartedRetention.
func (v *View) Members() []*fuseboxv1.Member {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.membersLocked()
}

func (v *View) membersLocked() []*fuseboxv1.Member {
	out := make([]*fuseboxv1.Member, 0, len(v.members))
	for _, m := range v.members {
		role := string(m.Meta.Role)
		if m.MetaErr != nil || role == "" {
			role = "unknown"
		}
		out = append(out, &fuseboxv1.Member{
			Node: m.Name, Role: role, Zone: m.Meta.Zone, Version: m.Meta.Software,
			GossipAddr: m.Addr, ApiAddr: m.Meta.GRPCAddr, Status: m.State,
			WireVersion: uint32(m.Meta.WireVersion()), Signs: m.PublicKey != nil,
		})
	}
	SortMembers(out)
	return out
}

// SortMembers sorts members by node name.
func SortMembers(ms []*fuseboxv1.Member) {
	slices.SortFunc(ms, func(a, b *fuseboxv1.Member) int { return strings.Compare(a.Node, b.Node) })
}

// AliveAgents returns how many alive or suspect members have role agent.
func (v *View) AliveAgents() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, m := range v.members {
		if !departed(m.State) && m.Meta.IsAgent() {
			n++
		}
	}
	return n
}

// Stats are gauges of the view's size.
type Stats struct {
	Dependencies int
	Rows         int
	Members      map[string]int // by status
	States       map[string]int // breaker records by derived state (closed, open, half-open)
}

// Stats returns the view's current sizes.
func (v *View) Stats() Stats {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := Stats{Dependencies: v.depsLocked(), Rows: v.nrows,
		Members: map[string]int{"alive": 0, "suspect": 0, "dead": 0, "left": 0},
		States:  map[string]int{sharedstate.Closed.String(): 0, sharedstate.Open.String(): 0, sharedstate.HalfOpen.String(): 0}}
	for _, m := range v.members {
		s.Members[m.State]++
	}
	for _, d := range v.derived {
		s.States[d.state.String()]++
	}
	return s
}
