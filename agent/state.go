package agent

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// gossipHandler feeds decoded gossip into the engine (gossip.Handler).
type gossipHandler Agent

func (h *gossipHandler) ApplyBatch(b *fuseboxv1.GossipBatch) (*fuseboxv1.GossipBatch, int) {
	return h.apply(b.GetRows(), b.GetRecords(), true)
}

// KnownRow and KnownRecord make the handler a gossip.Screener: the copies
// of what the engine holds cost no signature check.
func (h *gossipHandler) KnownRow(node, dependency string, seq uint64) bool {
	return (*Agent)(h).eng.RowKnown(node, dependency, seq)
}

func (h *gossipHandler) KnownRecord(m *fuseboxv1.BreakerRecord) bool {
	r, ok := convert.RecordFromProto(m)
	return ok && (*Agent)(h).eng.RecordKnown(r)
}

func (h *gossipHandler) ApplyState(s *fuseboxv1.PushPullState, join bool) (*fuseboxv1.GossipBatch, int) {
	// Rows from push-pull are not relayed: their writer heartbeats them.
	return h.apply(s.GetRows(), s.GetRecords(), false)
}

func (h *gossipHandler) apply(rows []*fuseboxv1.NodeWindow, recs []*fuseboxv1.BreakerRecord, relayRows bool) (*fuseboxv1.GossipBatch, int) {
	a := (*Agent)(h)
	var fresh fuseboxv1.GossipBatch
	refused := 0
	// The engine validates what it merges, rows and records alike
	// (MergeRow, MergeRecord): the handler only converts, and counts a
	// malformed item with the refused ones, any other refusal under its
	// reason.
	for _, m := range rows {
		r := convert.RowFromProto(m) // a malformed row converts to one MergeRow refuses
		ok, err := a.eng.MergeRow(r)
		if err != nil {
			if invalidItem(err) {
				refused++
			} else {
				a.dropped(err, "node", r.Node, "dependency", r.Dependency)
			}
			continue
		}
		if ok && relayRows {
			fresh.Rows = append(fresh.Rows, m)
		}
	}
	for _, m := range recs {
		r, _ := convert.RecordFromProto(m) // an unknown state converts to one MergeRecord refuses
		changed, err := a.eng.MergeRecord(r)
		if err != nil {
			if invalidItem(err) {
				refused++
			} else {
				a.dropped(err, "origin", r.Origin, "dependency", r.Dependency, "generation", r.Generation)
			}
			continue
		}
		if changed {
			fresh.Records = append(fresh.Records, m)
			a.m.transition(r, "peer")
		}
	}
	if len(fresh.Rows) == 0 && len(fresh.Records) == 0 {
		return nil, refused
	}
	return &fresh, refused
}

// invalidItem reports whether the engine refused an item as malformed.
func invalidItem(err error) bool {
	return errors.Is(err, sharedstate.ErrInvalidRow) || errors.Is(err, sharedstate.ErrInvalidRecord) ||
		errors.Is(err, sharedstate.ErrInvalidDependencyName)
}

// dropped counts an item the engine refused under its reason
// (sharedstate.RefusalReason) in the gossip layer's dropped counter.
func (a *Agent) dropped(err error, detail ...any) {
	if g := a.gsp.Load(); g != nil {
		g.Drop(sharedstate.RefusalReason(err), 1, append(detail, "err", err)...)
	}
}

// LocalState is this node's push-pull state: every record, then its own
// rows, as many as fit in one frame (the codec's MaxFrameSize less a
// margin). Records go first because they are the decisions; rows are
// re-sent by heartbeat anyway. What does not fit is counted
// (fusebox_agent_gossip_state_omitted_total), never the whole state lost.
func (h *gossipHandler) LocalState(join bool) *fuseboxv1.PushPullState {
	a := (*Agent)(h)
	s := &fuseboxv1.PushPullState{Node: a.cfg.Name}
	_, _, s.OverridesRevision, _ = a.policies.counts()
	budget := a.stateBudget()
	size := proto.Size(s)
	g := a.gsp.Load()
	fits := func(m proto.Message) bool {
		// A repeated field costs the message, its length and a tag byte;
		// signed, its envelope (and at frame version 1 both).
		n := proto.Size(m)
		n += protowire.SizeVarint(uint64(n)) + 1
		if g != nil {
			n = g.StateItemSize(m)
		}
		if size+n > budget {
			return false
		}
		size += n
		return true
	}
	var omittedRecs, omittedRows int
	for _, m := range a.stateRecords() { // unconfirmed dependencies' withheld (confirm.go)
		if fits(m) {
			s.Records = append(s.Records, m)
		} else {
			omittedRecs++
		}
	}
	for _, m := range a.stateRows() {
		if fits(m) {
			s.Rows = append(s.Rows, m)
		} else {
			omittedRows++
		}
	}
	if omittedRecs+omittedRows > 0 {
		a.m.stateOmitted.WithLabelValues("record").Add(float64(omittedRecs))
		a.m.stateOmitted.WithLabelValues("row").Add(float64(omittedRows))
		a.lg.Warn("push-pull state larger than a frame: items left out", "records", omittedRecs, "rows", omittedRows, "budget_bytes", budget)
	}
	return s
}

// OwnRows makes the handler a gossip.RowSource: the rows of LocalState,
// for a member that comes back.
func (h *gossipHandler) OwnRows() []*fuseboxv1.NodeWindow { return (*Agent)(h).stateRows() }

var _ gossip.RowSource = (*gossipHandler)(nil)

// stateBudget is the payload size a push-pull state may take: the frame
// limit less the frame header and a margin.
func (a *Agent) stateBudget() int {
	if a.cfg.maxStateBytes > 0 {
		return a.cfg.maxStateBytes
	}
	return protocol.DefaultMaxFrameSize - 1024
}

// memberEvents keeps the engine's member list in step with memberlist:
// rows of dead or departed agents stop counting at once. Observers and
// members without a role never count.
type memberEvents Agent

func (e *memberEvents) MemberJoined(m gossip.Member) {
	a := (*Agent)(e)
	if m.Name == a.cfg.Name {
		return
	}
	if m.Meta.IsAgent() {
		a.eng.MemberAlive(m.Name, m.Meta.Zone)
		if a.missingPeers.Load() {
			// Some registered agents were missing and one is back: a
			// partition may have healed, rejoin now (joinLoop).
			a.kickJoin()
		}
	}
	if a.keys != nil {
		a.keys.Prefetch(m.Name)
	}
	a.lg.Info("gossip member joined", "member", m.Name, "addr", m.Addr, "role", m.Meta.Role, "zone", m.Meta.Zone)
	if m.MetaErr != nil {
		a.lg.Warn("gossip member has unreadable metadata, ignored", "member", m.Name, "err", m.MetaErr)
	}
}

func (e *memberEvents) MemberLeft(m gossip.Member) {
	a := (*Agent)(e)
	if m.Name == a.cfg.Name {
		return
	}
	a.eng.MemberDead(m.Name)
	// memberlist does not tell a leave from a death here (Node.State is stale).
	a.lg.Info("gossip member left or failed", "member", m.Name, "addr", m.Addr)
}

func (e *memberEvents) MemberUpdated(m gossip.Member) {
	a := (*Agent)(e)
	if m.Name != a.cfg.Name && m.Meta.IsAgent() {
		a.eng.MemberAlive(m.Name, m.Meta.Zone)
	}
}

// tickLoop ticks the engine every TickInterval and gossips what changed.
func (a *Agent) tickLoop() { ctxtime.Every(a.ctx, a.cfg.TickInterval, a.tick) }

// tick runs one engine tick: proposals go out as broadcasts and straight to
// every member; changed and heartbeat rows go out as broadcasts, urgent rows
// (a failure burst starting at this node) also straight to every member.
func (a *Agent) tick() {
	recs := a.eng.Tick()
	rows := a.gossipedRows(a.eng.RowsToSend()) // unconfirmed dependencies' withheld (confirm.go)
	if urgent := a.gossipedRows(a.eng.UrgentRows()); len(urgent) > 0 {
		// A failure burst starting here: the fast path of the trip rule
		// pools it fleet-wide within a round trip instead of gossip rounds.
		u := &fuseboxv1.GossipBatch{}
		for _, r := range urgent {
			u.Rows = append(u.Rows, convert.RowToProto(r))
		}
		a.gossip.SendDirectBatch(u)
	}
	if len(recs) == 0 && len(rows) == 0 {
		return
	}
	// Rows are queued in a random order each tick. memberlist sends the
	// newest of equally fresh broadcasts first; queued in name order, the
	// same dependencies' rows lost every round whenever the rows outgrew
	// the gossip rounds (100 busy dependencies on 5 agents: some agents
	// lacked a third of the fleet's rows for 30 s).
	rand.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	b := &fuseboxv1.GossipBatch{}
	for _, r := range rows {
		b.Rows = append(b.Rows, convert.RowToProto(r))
	}
	for _, r := range recs {
		a.m.transition(r, "self")
		a.lg.Info("breaker transition proposed", "dependency", r.Dependency, "zone", r.Zone,
			"state", r.State.String(), "generation", r.Generation, "reason", r.Reason)
		if a.gossipedRecord(r) {
			b.Records = append(b.Records, convert.RecordToProto(r))
		}
	}
	if len(b.Rows) == 0 && len(b.Records) == 0 {
		return
	}
	a.gossip.Broadcast(b)
	if len(b.Records) > 0 {
		a.gossip.SendDirect(b.Records)
	}
}

// proposeNow sends a record this node just proposed (a probe result)
// without waiting for the tick, which broadcasts it again.
func (a *Agent) proposeNow(r sharedstate.BreakerRecord) {
	a.lg.Info("breaker transition proposed", "dependency", r.Dependency, "state", r.State.String(),
		"generation", r.Generation, "reason", r.Reason)
	if !a.gossipedRecord(r) {
		return
	}
	a.gossip.SendDirect([]*fuseboxv1.BreakerRecord{convert.RecordToProto(r)})
}

// onChange is the engine's OnChange hook: push the dependency's snapshot to
// the sessions that follow it; once untracked, drop its metric series and
// withdraw its queued record broadcast.
func (a *Agent) onChange(dep string) {
	if a.hub != nil {
		a.hub.changed(dep)
	}
	if a.eng != nil && a.eng.Snapshot(dep) == nil {
		if a.confirmed != nil {
			a.confirmed.forget(dep)
		}
		if a.m != nil {
			a.m.forget(dep)
		}
		if a.gossip != nil {
			// Evicted: a record of it still queued for broadcast would
			// bring it back once the peers' tombstones expire.
			a.gossip.Forget(dep)
		}
	}
}

// hub fans snapshot changes out to sessions, and to the egress proxy's
// client (its hook, called after mu is released: it calls back into the
// engine and the hub).
type hub struct {
	mu       sync.RWMutex
	sessions map[*session]struct{}
	shape    shapeHub
	joinKick chan struct{}
	egress   atomic.Pointer[func(string)]
}

// watchEgress makes f the egress proxy's hook (nil: none).
func (h *hub) watchEgress(f func(dep string)) {
	if f == nil {
		h.egress.Store(nil)
		return
	}
	h.egress.Store(&f)
}

// tellEgress calls the egress proxy's hook, if any.
func (h *hub) tellEgress(dep string) {
	if f := h.egress.Load(); f != nil {
		(*f)(dep)
	}
}

func newHub() *hub {
	return &hub{sessions: map[*session]struct{}{}, joinKick: make(chan struct{}, 1)}
}

// add adds s unless max sessions are open already (then it returns false).
func (h *hub) add(s *session, max int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.sessions) >= max {
		return false
	}
	h.sessions[s] = struct{}{}
	return true
}

func (h *hub) remove(s *session) {
	h.mu.Lock()
	delete(h.sessions, s)
	h.mu.Unlock()
}

func (h *hub) count() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.sessions)
}

func (h *hub) changed(dep string) {
	h.mu.RLock()
	for s := range h.sessions {
		s.changed(dep)
	}
	h.mu.RUnlock()
	h.tellEgress(dep)
}
