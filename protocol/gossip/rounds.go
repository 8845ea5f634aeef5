package gossip

import (
	"math/rand/v2"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// DefaultRowFanout is how many random members each broadcast round sends
// a packet of records and rows to, memberlist's own GossipNodes for its
// gossip (3): the same packet budget as when rows rode memberlist's gossip
// packets, but a budget of their own. In memberlist's packets a row gets
// only what memberlist's own messages leave, and after a partition heals
// those are the alive messages of every revived member, each retransmitted
// RetransmitMult × log10(N+1) times by every member: at N = 200 (scale
// (e)) no packet carried a single row for 20 s after the heal, and rows
// reached every agent 27 s after it.
const DefaultRowFanout = 3

// roundPacketBytes bounds the frame of one broadcast-round packet:
// memberlist's 1400-byte packet budget (UDPBufferSize) less its user
// message byte, CRC (5), a label and the encryption overhead (45 at most).
const roundPacketBytes = 1400 - 64

// roundLoop sends a broadcast round every GossipInterval until stop is
// closed, starting at a random offset (as memberlist staggers its own
// timers) so that members do not send in step.
func (g *Gossip) roundLoop(stop <-chan struct{}) {
	iv := g.cfg.GossipInterval
	t := time.NewTimer(time.Duration(rand.Int64N(int64(iv))))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case m := <-g.greet:
			g.greetAll(m)
			continue
		case h := <-g.held:
			g.applyHeld(h)
			continue
		case <-t.C:
		}
		g.round()
		t.Reset(iv)
	}
}

// greetQueue bounds the members waiting for this node's rows after they
// came back (see greetLater); beyond it they learn them from the rounds.
const greetQueue = 1024

// greetDelay is how long after a member came back this node sends it its
// rows. After a heal the member may hold this node alive only up to a
// second or so later (the refutations spread by the rejoins' push-pulls
// and gossip); it holds the rows until then (holdBack). A restarted member
// knows this node from its join's push-pull at once; the delay leaves that
// push-pull time to finish.
const greetDelay = 500 * time.Millisecond

// greetLater queues m, a member that came back after it was declared dead
// or left (a partition healed, an agent restarted), for a packet of this
// node's rows straight away. A dead member's rows are dropped and its
// rows refused until it is alive again, so after a heal the rows of the
// other half spread only from that moment, from relay to relay, the last
// agents a second or more after the membership; sent to each member as it
// comes back, they arrive with it. Caller holds membersMu.
func (g *Gossip) greetLater(m Member) {
	if g.cfg.RowFanout == 0 {
		return
	}
	time.AfterFunc(greetDelay, func() {
		select {
		case g.greet <- m:
		default: // the rounds bring them
		}
	})
}

// greetAll sends m, and every other member whose greeting is due, one
// packet of this node's current rows: those of its push-pull state
// (currentRows), not only those still queued, since a row that
// has not changed for a while has gone out as often as it does and left
// the queue (a sick half's rows, after a heal: the last agents had them
// seconds after the rest). The rounds' share of the queued rows is
// unchanged.
func (g *Gossip) greetAll(m Member) {
	to := []Member{m}
	for more := true; more; {
		select {
		case m := <-g.greet:
			to = append(to, m)
		default:
			more = false
		}
	}
	v := g.SendVersion()
	frame := g.ownRowsFrame(v, g.currentRows(roundPacketBytes, v))
	if frame == nil {
		return
	}
	for _, m := range to {
		g.sendPacket(m, frame, "rows to a member back")
	}
}

// currentRows returns this node's rows of its push-pull state (see
// RowSource) that fit in a frame of at most limit bytes at version v.
func (g *Gossip) currentRows(limit int, v byte) []*fuseboxv1.NodeWindow {
	var rows []*fuseboxv1.NodeWindow
	if src, ok := g.cfg.Handler.(RowSource); ok {
		rows = src.OwnRows()
	} else {
		rows = g.cfg.Handler.LocalState(false).GetRows()
	}
	var out []*fuseboxv1.NodeWindow
	body := 0
	for _, r := range rows {
		if r.GetNode() != g.cfg.Name {
			continue
		}
		size := batchRowSize(r)
		if rowFrameSize(v, body+size) > limit {
			break
		}
		body += size
		out = append(out, r)
	}
	return out
}

// sendPacket sends frame to member to outside memberlist's gossip (what
// names the packet in the log when the send fails) and counts it.
func (g *Gossip) sendPacket(to Member, frame []byte, what string) bool {
	if err := g.ml.SendToAddress(memberlist.Address{Addr: to.Addr, Name: to.Name}, frame); err != nil {
		g.lg.Debug("gossip "+what+": send failed", "to", to.Name, "err", err)
		return false
	}
	g.stats.bytesOut[0].Add(uint64(len(frame)))
	g.stats.msgsOut[0].Add(1)
	return true
}

// round sends one packet to each of RowFanout random other members:
// queued records first, then this node's rows and the rows it relays, as
// many as fit in one frame (the queues count each packet as one transmit
// of what it carries, as memberlist's gossip does). A round with nothing
// queued sends nothing.
func (g *Gossip) round() {
	if g.recQueue.NumQueued()+g.queue.NumQueued()+g.rows.len() == 0 {
		return
	}
	for _, to := range g.randomPeers(g.cfg.RowFanout) {
		frame := g.roundFrame()
		if frame == nil {
			return
		}
		if g.sendPacket(to, frame, "broadcast round") {
			g.stats.roundsOut.Add(1)
		}
	}
}

// roundFrame returns one frame of what a packet of a round carries (nil:
// nothing queued). The queued frames (fill) are merged into one: the
// signed items travel in their envelopes, unchanged, so the origins'
// signatures hold, and one frame header costs less than one a frame, so
// the merged frame fits where they did. It is encoded at the version this
// node sends now: a frame queued at another version goes out at this one,
// each item in it as it was queued (plain, signed, or both).
func (g *Gossip) roundFrame() []byte {
	frames := g.fill(0, roundPacketBytes)
	if len(frames) == 0 {
		return nil
	}
	b := &fuseboxv1.GossipBatch{}
	for _, fr := range frames {
		f, err := g.cfg.Codec.Decode(fr)
		if err != nil || f.Batch == nil {
			continue // our own encoding: cannot happen
		}
		b.Rows = append(b.Rows, f.Batch.GetRows()...)
		b.SignedRows = append(b.SignedRows, f.Batch.GetSignedRows()...)
		b.Records = append(b.Records, f.Batch.GetRecords()...)
		b.SignedRecords = append(b.SignedRecords, f.Batch.GetSignedRecords()...)
	}
	frame, err := g.cfg.Codec.EncodeBatchAt(g.SendVersion(), b)
	if err != nil {
		g.lg.Warn("gossip broadcast round: encode", "err", err)
		return nil
	}
	return frame
}

// randomPeers returns up to k distinct alive members other than this
// node, at random.
func (g *Gossip) randomPeers(k int) []Member {
	g.membersMu.Lock()
	defer g.membersMu.Unlock()
	n := len(g.peers)
	if k >= n {
		out := make([]Member, 0, n)
		for _, name := range g.peers {
			out = append(out, g.members[name])
		}
		rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}
	out := make([]Member, 0, k)
	seen := make(map[int]bool, k)
	for len(out) < k {
		i := rand.IntN(n)
		if !seen[i] {
			seen[i] = true
			out = append(out, g.members[g.peers[i]])
		}
	}
	return out
}

// addPeer and removePeer keep peers (the names of the other alive
// members, for randomPeers) in step with members. Callers hold membersMu.
func (g *Gossip) addPeer(name string) {
	if name == g.cfg.Name {
		return
	}
	if _, ok := g.peerIdx[name]; ok {
		return
	}
	g.peerIdx[name] = len(g.peers)
	g.peers = append(g.peers, name)
}

func (g *Gossip) removePeer(name string) {
	i, ok := g.peerIdx[name]
	if !ok {
		return
	}
	last := len(g.peers) - 1
	g.peers[i] = g.peers[last]
	g.peerIdx[g.peers[i]] = i
	g.peers = g.peers[:last]
	delete(g.peerIdx, name)
}
