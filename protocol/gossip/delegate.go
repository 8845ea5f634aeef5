package gossip

import (
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/memberlist"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// namedBroadcast is one queued frame; a newer one with the same name
// invalidates it.
type namedBroadcast struct {
	name string
	msg  []byte
}

func (b *namedBroadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*namedBroadcast)
	return ok && o.name == b.name
}
func (b *namedBroadcast) Name() string    { return b.name }
func (b *namedBroadcast) Message() []byte { return b.msg }
func (b *namedBroadcast) Finished()       {}

// delegate is the memberlist.Delegate of a Gossip.
type delegate Gossip

func (d *delegate) NodeMeta(limit int) []byte {
	d.metaMu.Lock()
	defer d.metaMu.Unlock()
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}

// NotifyMsg decodes a broadcast or direct message. memberlist reuses buf:
// Decode copies what it keeps.
func (d *delegate) NotifyMsg(buf []byte) {
	g := (*Gossip)(d)
	g.stats.bytesIn[0].Add(uint64(len(buf)))
	g.stats.msgsIn[0].Add(1)
	f, ok := g.decode(buf, protocol.FrameBatch)
	if !ok {
		return
	}
	b := f.Batch
	in := g.admitItems(b.GetRows(), b.GetRecords(), b.GetSignedRows(), b.GetSignedRecords(), nil)
	if in.empty() {
		return
	}
	fresh, refused := g.cfg.Handler.ApplyBatch(&fuseboxv1.GossipBatch{Rows: in.rows, Records: in.recs})
	g.afterApply(in, fresh, refused)
}

// decode decodes a frame of type want, counting what it refuses: a frame
// of a version this build does not speak is counted by that version too.
func (g *Gossip) decode(buf []byte, want protocol.FrameType) (protocol.Frame, bool) {
	f, err := g.cfg.Codec.Decode(buf)
	if err != nil {
		var fe *protocol.FrameError
		if errors.As(err, &fe) && errors.Is(err, protocol.ErrUnknownVersion) {
			g.stats.unknownVersion[fe.Version].Add(1)
			g.Drop("unknown_version", 1, "version", fe.Version,
				"speaks", fmt.Sprintf("%d-%d", protocol.MinVersion, protocol.MaxVersion))
			return f, false
		}
		g.Drop(protocol.Reason(err), 1)
		return f, false
	}
	if f.Type != want {
		g.Drop("unexpected_type", 1)
		return f, false
	}
	return f, true
}

// admitState checks a push-pull state: only from an alive agent member,
// and of its rows only the sender's own; its records are the sender's to
// vouch for (a record's proposer may have died since), but each is taken
// only as admitItems takes items.
func (g *Gossip) admitState(s *fuseboxv1.PushPullState) *inbound {
	sender := s.GetNode()
	if why := g.speaker(sender); why != "" {
		g.dropAbout(sender, why, len(s.GetRows())+len(s.GetRecords())+len(s.GetSignedRows())+len(s.GetSignedRecords()), "sender", clip(sender))
		return nil
	}
	own := func(r *fuseboxv1.NodeWindow) bool {
		if r.GetNode() == sender {
			return true
		}
		g.Drop("row_not_sender", 1, "sender", clip(sender), "node", clip(r.GetNode()))
		return false
	}
	return g.admitItems(s.GetRows(), s.GetRecords(), s.GetSignedRows(), s.GetSignedRecords(), own)
}

// clip bounds a name someone else chose before it goes into a log line.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// afterApply counts what the handler refused, keeps the envelopes of the
// records it took, and relays what was new, in the envelopes it came in.
func (g *Gossip) afterApply(in *inbound, fresh *fuseboxv1.GossipBatch, refused int) {
	if refused > 0 {
		g.Drop("invalid_item", refused)
	}
	if fresh == nil {
		return
	}
	for _, r := range fresh.GetRecords() {
		g.keepRecord(r, in.recEnv[r])
	}
	if g.cfg.Relay {
		g.relay(in, fresh)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	g := (*Gossip)(d)
	if g.cfg.RowFanout > 0 {
		return nil // records and rows go in broadcast rounds of their own (rounds.go)
	}
	out := g.fill(overhead, limit)
	for _, b := range out {
		g.stats.bytesOut[0].Add(uint64(len(b)))
	}
	g.stats.msgsOut[0].Add(uint64(len(out)))
	return out
}

// fill returns the queued frames of one packet of limit bytes, each
// costing overhead besides its length: records first, then this node's
// rows (in signed batches of at most MaxBroadcastFrame, so that relays can
// pass them on) and the frames it relays share what the records leave,
// taking turns at going first: this node's rows change every tick and
// would otherwise take every packet.
func (g *Gossip) fill(overhead, limit int) [][]byte {
	out := g.recQueue.GetBroadcasts(overhead, limit)
	out = slices.DeleteFunc(out, func(b []byte) bool { return len(b) == 0 }) // withdrawn (Forget)
	used := 0
	for _, b := range out {
		used += overhead + len(b)
	}
	packet := g.packets.Add(1)
	own := func() {
		if free := min(limit-used-overhead, MaxBroadcastFrame); free > 0 {
			if f := g.takeOwnRows(free, packet); f != nil {
				out = append(out, f)
				used += overhead + len(f)
			}
		}
	}
	relayed := func() {
		if limit-used > overhead {
			more := g.queue.GetBroadcasts(overhead, limit-used)
			for _, b := range more {
				used += overhead + len(b)
			}
			out = append(out, more...)
		}
	}
	if g.turn.Add(1)%2 == 0 {
		own()
		relayed()
	} else {
		relayed()
		own()
	}
	own() // what is left of the packet
	return out
}

func (d *delegate) LocalState(join bool) []byte {
	g := (*Gossip)(d)
	s := g.cfg.Handler.LocalState(join)
	if s == nil {
		return nil
	}
	v := g.SendVersion()
	if join {
		// The answer to a join goes to a node this one does not know yet
		// (memberlist asks before it merges the joiner's state): it may be
		// of the previous release.
		v = protocol.MinVersion
	}
	frame, err := g.cfg.Codec.EncodePushPullAt(v, g.signState(v, s))
	if err != nil {
		g.lg.Warn("gossip push-pull state not sent", "err", err)
		return nil
	}
	g.stats.bytesOut[1].Add(uint64(len(frame)))
	g.stats.msgsOut[1].Add(1)
	return frame
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	g := (*Gossip)(d)
	if len(buf) == 0 {
		return // a peer without state (an observer)
	}
	g.stats.bytesIn[1].Add(uint64(len(buf)))
	g.stats.msgsIn[1].Add(1)
	f, ok := g.decode(buf, protocol.FramePushPull)
	if !ok {
		return
	}
	in := g.admitState(f.PushPull)
	if in == nil {
		return
	}
	st := &fuseboxv1.PushPullState{Node: f.PushPull.GetNode(), Records: in.recs, Rows: in.rows,
		OverridesRevision: f.PushPull.GetOverridesRevision()}
	fresh, refused := g.cfg.Handler.ApplyState(st, join)
	g.afterApply(in, fresh, refused)
}

// events is the memberlist.EventDelegate of a Gossip.
type events Gossip

// memberlist calls these with its node lock held: n may be read here, and
// only here.

func (e *events) NotifyJoin(n *memberlist.Node) {
	m := memberOf(n)
	m.State = "alive"
	e.membersMu.Lock()
	settle(e.settling, m.Name)
	e.membersMu.Unlock()
	e.setMember(m)
	if e.cfg.Events != nil {
		e.cfg.Events.MemberJoined(m)
	}
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	m := memberOf(n)
	e.membersMu.Lock()
	if old, ok := e.members[m.Name]; ok {
		e.unindexAddr(old.Addr)
		(*Gossip)(e).retire(old)
		settle(e.settling, m.Name)
		settle(e.settlingAddrs, old.Addr)
		(*Gossip)(e).tally(old, -1)
	}
	delete(e.members, m.Name)
	(*Gossip)(e).removePeer(m.Name)
	(*Gossip)(e).recomputeVersion()
	e.membersMu.Unlock()
	if e.cfg.Events != nil {
		e.cfg.Events.MemberLeft(m)
	}
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	m := memberOf(n)
	m.State = "alive"
	e.setMember(m)
	if e.cfg.Events != nil {
		e.cfg.Events.MemberUpdated(m)
	}
}

func (e *events) setMember(m Member) {
	e.membersMu.Lock()
	if old, ok := e.members[m.Name]; ok {
		e.unindexAddr(old.Addr)
		(*Gossip)(e).tally(old, -1)
	}
	e.members[m.Name] = m
	(*Gossip)(e).tally(m, 1)
	e.memberAddrs[m.Addr]++
	(*Gossip)(e).addPeer(m.Name)
	g := (*Gossip)(e)
	if r, back := g.retired[m.Name]; back && m.Name != g.cfg.Name {
		g.greetLater(m)
		if r.held != nil {
			select {
			case g.held <- r.held:
			default: // the rounds bring its rows
			}
		}
	}
	delete(g.retired, m.Name)
	g.recomputeVersion()
	g.noteVersion(m)
	e.membersMu.Unlock()
}

// unindexAddr forgets one member's use of addr. Caller holds membersMu.
func (e *events) unindexAddr(addr string) {
	if e.memberAddrs[addr] <= 1 {
		delete(e.memberAddrs, addr)
	} else {
		e.memberAddrs[addr]--
	}
}
