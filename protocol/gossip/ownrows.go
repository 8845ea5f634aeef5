package gossip

import (
	"cmp"
	"math"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// rowQueue holds this node's own rows until each has gone out often
// enough: the newest row of each dependency (a newer one replaces it and
// starts afresh). Each packet memberlist sends takes as many as fit, the
// least sent first and, among those, the newest, and they travel as one
// RowBatch with one signature: a row costs a few bytes of signature, not
// 64, and a receiver checks one signature a packet.
type rowQueue struct {
	mu      sync.Mutex
	pending []*queuedRow
	byDep   map[string]*queuedRow
	next    uint64
}

type queuedRow struct {
	m         *fuseboxv1.NodeWindow
	size      int // what the row takes in a RowBatch (or a GossipBatch's rows)
	transmits int
	order     uint64
	packet    uint64 // the last packet that took it
	gone      bool
}

func (q *rowQueue) add(rows []*fuseboxv1.NodeWindow) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.byDep == nil {
		q.byDep = map[string]*queuedRow{}
	}
	for _, r := range rows {
		q.next++
		e := &queuedRow{m: r, size: batchRowSize(r), order: q.next}
		if old, ok := q.byDep[r.GetDependency()]; ok {
			old.gone = true
		}
		q.byDep[r.GetDependency()] = e
		q.pending = append(q.pending, e)
	}
}

func (q *rowQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.byDep)
}

// take returns the rows of one frame of at most limit bytes at version v
// (nil when none fit), counts them sent once more and forgets those sent
// maxTransmits times. A row packet took already is left out: a packet
// holds several frames, and a row twice in one is sent once.
func (q *rowQueue) take(limit int, v byte, maxTransmits int, packet uint64) []*fuseboxv1.NodeWindow {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = slices.DeleteFunc(q.pending, func(e *queuedRow) bool { return e.gone })
	if len(q.pending) == 0 {
		return nil
	}
	slices.SortFunc(q.pending, func(a, b *queuedRow) int {
		return cmp.Or(cmp.Compare(a.transmits, b.transmits), cmp.Compare(b.order, a.order))
	})
	var out []*fuseboxv1.NodeWindow
	body := 0
	for _, e := range q.pending {
		if e.packet == packet {
			continue
		}
		if rowFrameSize(v, body+e.size) > limit {
			break
		}
		body += e.size
		out = append(out, e.m)
		e.packet = packet
		e.transmits++
		if e.transmits >= maxTransmits {
			e.gone = true
			delete(q.byDep, e.m.GetDependency())
		}
	}
	return out
}

// batchRowSize is what row r takes in a RowBatch.
func batchRowSize(r *fuseboxv1.NodeWindow) int {
	n := proto.Size(r)
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

// rowFrameSize is the size of a frame at version v holding one signed
// RowBatch whose rows take body bytes (and, at version 1, the same rows
// plain beside it).
func rowFrameSize(v byte, body int) int {
	env := 1 + protowire.SizeVarint(uint64(body)) + body + 1 + 1 + SignatureSize
	size := protocol.HeaderSize + 1 + protowire.SizeVarint(uint64(env)) + env
	if v < protocol.Version2 {
		size += body
	}
	return size
}

// retransmitLimit is memberlist's: how often a broadcast goes out in a
// cluster of n members.
func retransmitLimit(mult, n int) int {
	return mult * int(math.Ceil(math.Log10(float64(n+1))))
}

// takeOwnRows returns one frame of this node's queued rows, signed
// together, of at most limit bytes (nil: none queued, or none fit), for
// packet (a number from g.packets) and none packet has.
func (g *Gossip) takeOwnRows(limit int, packet uint64) []byte {
	v := g.SendVersion()
	return g.ownRowsFrame(v, g.rows.take(limit, v, retransmitLimit(g.cfg.RetransmitMult, g.numNodes()), packet))
}

// ownRowsFrame encodes rows, this node's, signed together in one frame at
// version v (at version 1 also plain beside them); nil when there are
// none or they could not be encoded.
func (g *Gossip) ownRowsFrame(v byte, rows []*fuseboxv1.NodeWindow) []byte {
	if len(rows) == 0 {
		return nil
	}
	var plain []*fuseboxv1.NodeWindow
	if v < protocol.Version2 {
		plain = rows
	}
	frame, err := g.cfg.Codec.EncodeBatchAt(v, compose(v, plain, []*fuseboxv1.SignedItem{g.signRows(rows)}, nil))
	if err != nil {
		g.lg.Warn("gossip rows not encoded", "rows", len(rows), "err", err)
		return nil
	}
	return frame
}
