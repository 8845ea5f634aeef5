package gossip

import (
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
	f, err := g.cfg.Codec.Decode(buf)
	if err != nil {
		g.Drop(protocol.Reason(err), 1)
		return
	}
	if f.Type != protocol.FrameBatch {
		g.Drop("unexpected_type", 1)
		return
	}
	b := g.admitBatch(f.Batch)
	if len(b.GetRows()) == 0 && len(b.GetRecords()) == 0 {
		return
	}
	fresh, refused := g.cfg.Handler.ApplyBatch(b)
	g.afterApply(fresh, refused)
}

// admitBatch keeps the rows and records of a broadcast or direct message
// that speak for an alive agent member (a row's node, a record's origin)
// and counts the rest: only members speak. memberlist does not say who sent
// a UDP message (and relayed broadcasts come from anyone who heard them), so
// what is checked is whom the item speaks for.
func (g *Gossip) admitBatch(b *fuseboxv1.GossipBatch) *fuseboxv1.GossipBatch {
	rows, rowsCut := admit(g, b.GetRows(), (*fuseboxv1.NodeWindow).GetNode, "node")
	recs, recsCut := admit(g, b.GetRecords(), (*fuseboxv1.BreakerRecord).GetOrigin, "origin")
	if !rowsCut && !recsCut {
		return b
	}
	return &fuseboxv1.GossipBatch{Rows: rows, Records: recs}
}

// admit returns the items whose speaker (who) is an alive agent member and
// whether any was refused; it allocates only when one is.
func admit[T interface{ GetDependency() string }](g *Gossip, items []T, who func(T) string, role string) ([]T, bool) {
	var kept []T
	cut := false
	for i, it := range items {
		if why := g.speaker(who(it)); why != "" {
			g.Drop(why, 1, role, clip(who(it)), "dependency", clip(it.GetDependency()))
			if !cut {
				kept, cut = slices.Clone(items[:i]), true
			}
			continue
		}
		if cut {
			kept = append(kept, it)
		}
	}
	if !cut {
		return items, false
	}
	return kept, true
}

// admitState keeps a push-pull state only from an alive agent member, and
// of its rows only the sender's own; its records are the sender's to vouch
// for (a record's proposer may have died since).
func (g *Gossip) admitState(s *fuseboxv1.PushPullState) *fuseboxv1.PushPullState {
	sender := s.GetNode()
	if why := g.speaker(sender); why != "" {
		g.Drop(why, len(s.GetRows())+len(s.GetRecords()), "sender", clip(sender))
		return nil
	}
	rows := s.GetRows()
	for i, r := range rows {
		if r.GetNode() == sender {
			continue
		}
		kept := slices.Clone(rows[:i])
		for _, r := range rows[i:] {
			if r.GetNode() == sender {
				kept = append(kept, r)
			} else {
				g.Drop("row_not_sender", 1, "sender", clip(sender), "node", clip(r.GetNode()))
			}
		}
		return &fuseboxv1.PushPullState{Node: sender, Records: s.GetRecords(), Rows: kept, OverridesRevision: s.GetOverridesRevision()}
	}
	return s
}

// clip bounds a name someone else chose before it goes into a log line.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func (g *Gossip) afterApply(fresh *fuseboxv1.GossipBatch, refused int) {
	if refused > 0 {
		g.Drop("invalid_item", refused)
	}
	if g.cfg.Relay && fresh != nil {
		g.Broadcast(fresh)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	g := (*Gossip)(d)
	if g.cfg.RowFanout > 0 {
		return nil // records and rows go in broadcast rounds of their own (rounds.go)
	}
	out := g.recQueue.GetBroadcasts(overhead, limit)
	used := 0
	for _, b := range out {
		used += overhead + len(b)
	}
	if limit-used > overhead {
		out = append(out, g.queue.GetBroadcasts(overhead, limit-used)...)
	}
	for _, b := range out {
		g.stats.bytesOut[0].Add(uint64(len(b)))
	}
	g.stats.msgsOut[0].Add(uint64(len(out)))
	return out
}

func (d *delegate) LocalState(join bool) []byte {
	g := (*Gossip)(d)
	s := g.cfg.Handler.LocalState(join)
	if s == nil {
		return nil
	}
	frame, err := g.cfg.Codec.EncodePushPull(s)
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
	f, err := g.cfg.Codec.Decode(buf)
	if err != nil {
		g.Drop(protocol.Reason(err), 1)
		return
	}
	if f.Type != protocol.FramePushPull {
		g.Drop("unexpected_type", 1)
		return
	}
	st := g.admitState(f.PushPull)
	if st == nil {
		return
	}
	fresh, refused := g.cfg.Handler.ApplyState(st, join)
	g.afterApply(fresh, refused)
}

// events is the memberlist.EventDelegate of a Gossip.
type events Gossip

// memberlist calls these with its node lock held: n may be read here, and
// only here.

func (e *events) NotifyJoin(n *memberlist.Node) {
	m := memberOf(n)
	m.State = "alive"
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
	}
	delete(e.members, m.Name)
	(*Gossip)(e).removePeer(m.Name)
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
	}
	e.members[m.Name] = m
	e.memberAddrs[m.Addr]++
	(*Gossip)(e).addPeer(m.Name)
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
