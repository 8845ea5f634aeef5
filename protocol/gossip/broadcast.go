package gossip

import (
	"strconv"

	"github.com/hashicorp/memberlist"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// Broadcast queues rows and records for epidemic broadcast. This node's
// own rows (with a Signer) wait in a queue of their own, the newest per
// dependency, and go out signed in batches as packets have room; other
// items go one frame each, named (kind, dependency, node), so that a
// queued older update of the same item is superseded. Items whose frame
// exceeds MaxBroadcastFrame are left to push-pull.
func (g *Gossip) Broadcast(b *fuseboxv1.GossipBatch) {
	if b == nil || g.closed.Load() {
		return
	}
	own, other := g.ownRows(b.GetRows())
	g.rows.add(own)
	for _, r := range other {
		g.queueItem(g.queue, rowName(r), compose(g.SendVersion(), []*fuseboxv1.NodeWindow{r}, nil, nil))
	}
	for _, r := range b.GetRecords() {
		g.queueRecord(recOut{m: r, env: g.recordEnv(r)})
	}
}

func rowName(r *fuseboxv1.NodeWindow) string {
	return "w\x00" + r.GetDependency() + "\x00" + r.GetNode()
}

// relaySlots is how many signed row batches of one origin a relay queues
// at once (a newer batch takes the slot of an older one).
const relaySlots = 4

// relay queues what the handler found new in the envelopes it came in:
// a relay needs no key of its own, and the origin's signature travels on.
// A signed batch goes on whole (with every row it holds, at version 1 also
// plain) if any of its rows was new.
func (g *Gossip) relay(in *inbound, fresh *fuseboxv1.GossipBatch) {
	if g.closed.Load() {
		return
	}
	v := g.SendVersion()
	var batches []*fuseboxv1.SignedItem
	maxSeq := map[*fuseboxv1.SignedItem]uint64{}
	for _, r := range fresh.GetRows() {
		env := in.rowEnv[r]
		if env == nil {
			g.queueItem(g.queue, rowName(r), compose(v, []*fuseboxv1.NodeWindow{r}, nil, nil))
			continue
		}
		if _, ok := maxSeq[env]; !ok {
			batches = append(batches, env)
		}
		maxSeq[env] = max(maxSeq[env], r.GetSeq())
	}
	for _, env := range batches {
		var rows []*fuseboxv1.NodeWindow
		for _, r := range in.rows {
			if in.rowEnv[r] == env {
				rows = append(rows, r)
			}
		}
		var plain []*fuseboxv1.NodeWindow
		if v < protocol.Version2 {
			plain = rows
		}
		name := "wb\x00" + rows[0].GetNode() + "\x00" + strconv.FormatUint(maxSeq[env]%relaySlots, 10)
		g.queueItem(g.queue, name, compose(v, plain, []*fuseboxv1.SignedItem{env}, nil))
	}
	for _, r := range fresh.GetRecords() {
		g.queueRecord(recOut{m: r, env: in.recEnv[r]})
	}
}

func (g *Gossip) queueRecord(r recOut) {
	g.queueItem(g.recQueue, "b\x00"+r.m.GetDependency(), compose(g.SendVersion(), nil, nil, []recOut{r}))
}

// Forget withdraws the record broadcast queued for dependency, if any: the
// engine forgot the dependency (idle eviction), and a record still queued
// would otherwise reach peers after their tombstones for it expired and
// bring it back. Push-pull carries any record queued for it later again.
func (g *Gossip) Forget(dependency string) {
	// A queued broadcast can only be replaced by one of the same name; an
	// empty one is never sent (GetBroadcasts leaves it out).
	g.recQueue.QueueBroadcast(&namedBroadcast{name: "b\x00" + dependency})
}

func (g *Gossip) queueItem(q *memberlist.TransmitLimitedQueue, name string, b *fuseboxv1.GossipBatch) {
	frame, err := g.cfg.Codec.EncodeBatchAt(g.SendVersion(), b)
	if err != nil || len(frame) > MaxBroadcastFrame {
		g.lg.Debug("gossip item too large to broadcast, left to push-pull", "item", name, "err", err)
		return
	}
	q.QueueBroadcast(&namedBroadcast{name: name, msg: frame})
}

// SendDirect sends records straight to every other alive member (UDP,
// best effort): a breaker transition reaches the fleet in one round trip,
// and gossip and push-pull repair what it loses.
func (g *Gossip) SendDirect(records []*fuseboxv1.BreakerRecord) {
	if len(records) == 0 {
		return
	}
	g.SendDirectBatch(&fuseboxv1.GossipBatch{Records: records})
}

// SendDirectBatch sends a batch (records, urgent rows) straight to every
// other alive member, as SendDirect does, each in the newest frame version
// the member speaks; this node's rows in it are signed together.
func (g *Gossip) SendDirectBatch(b *fuseboxv1.GossipBatch) {
	if len(b.GetRows())+len(b.GetRecords()) == 0 || g.closed.Load() {
		return
	}
	own, other := g.ownRows(b.GetRows())
	var batches []*fuseboxv1.SignedItem
	if env := g.signRows(own); env != nil {
		batches = append(batches, env)
	}
	recs := make([]recOut, 0, len(b.GetRecords()))
	for _, r := range b.GetRecords() {
		recs = append(recs, recOut{m: r, env: g.recordEnv(r)})
	}
	var frames [protocol.MaxVersion + 1][]byte
	for _, n := range g.Members() {
		if n.Name == g.cfg.Name {
			continue
		}
		v := byte(min(n.Meta.WireVersion(), int(protocol.MaxVersion)))
		if !protocol.Speaks(v) {
			continue
		}
		if frames[v] == nil {
			plain := other
			if v < protocol.Version2 {
				plain = b.GetRows()
			}
			frame, err := g.cfg.Codec.EncodeBatchAt(v, compose(v, plain, batches, recs))
			if err != nil {
				g.lg.Warn("gossip direct send: encode", "err", err)
				return
			}
			frames[v] = frame
		}
		frame := frames[v]
		// SendToAddress is SendBestEffort by address: a UDP user message.
		if err := g.ml.SendToAddress(memberlist.Address{Addr: n.Addr, Name: n.Name}, frame); err != nil {
			g.lg.Debug("gossip direct send failed", "to", n.Name, "err", err)
			continue
		}
		g.stats.bytesOut[0].Add(uint64(len(frame)))
		g.stats.msgsOut[0].Add(1)
		g.stats.directOut.Add(1)
		if len(b.GetRecords()) > 0 {
			g.stats.directRecordsOut.Add(1)
		}
	}
}

// QueuedBroadcasts returns how many broadcasts wait in the queues (this
// node's own rows counted one each).
func (g *Gossip) QueuedBroadcasts() int {
	return g.queue.NumQueued() + g.recQueue.NumQueued() + g.rows.len()
}
