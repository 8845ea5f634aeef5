package gossip

import (
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
		g.stats.drop(protocol.Reason(err))
		return
	}
	if f.Type != protocol.FrameBatch {
		g.stats.drop("unexpected_type")
		return
	}
	fresh, refused := g.cfg.Handler.ApplyBatch(f.Batch)
	g.afterApply(fresh, refused)
}

func (g *Gossip) afterApply(fresh *fuseboxv1.GossipBatch, refused int) {
	for range refused {
		g.stats.drop("invalid_item")
	}
	if g.cfg.Relay && fresh != nil {
		g.Broadcast(fresh)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	g := (*Gossip)(d)
	out := g.queue.GetBroadcasts(overhead, limit)
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
		g.stats.drop(protocol.Reason(err))
		return
	}
	if f.Type != protocol.FramePushPull {
		g.stats.drop("unexpected_type")
		return
	}
	fresh, refused := g.cfg.Handler.ApplyState(f.PushPull, join)
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
	delete(e.members, m.Name)
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
	e.members[m.Name] = m
	e.membersMu.Unlock()
}
