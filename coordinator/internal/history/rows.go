package history

import (
	"math"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Settle is how long before its receipt a row's counts may be dated: the
// node's reading, up to Settle old. So the history before now − Settle no
// longer changes (what a replay reads), and a node's clock ahead of the
// observer's, or one more than Settle behind, moves its counts by no more
// than the difference.
const Settle = 2 * time.Second

// tracker is what the history remembers of one node's rows for one
// dependency: its last cumulative counts, to credit what the next row adds.
type tracker struct {
	seq     uint64
	last    sharedstate.Cumulative
	dated   int64     // Unix ns the last counts were dated at: a node's dates never go back
	seen    time.Time // receipt of its last row
	bit     uint8
	zoneBit uint8
	ownsBit bool
	hasBit  bool
}

// credit adds to the history what c, the node's cumulative counts in a row
// received at now, grew by since its previous row (see
// sharedstate.Increase), in the slot of the node's reading. It reports
// whether it credited anything.
func (tr *tracker) credit(h *History, d *depHistory, c sharedstate.Cumulative, now time.Time) bool {
	inc := sharedstate.Increase(tr.last, tr.last.Known(), c, d.watched)
	tr.last = c
	read := min(c.At, now.UnixMilli()) * int64(time.Millisecond) // no overflow: a reading after now is dated now
	at := min(max(read, tr.dated, now.Add(-Settle).UnixNano()), now.UnixNano())
	tr.dated = at
	if inc.IsZero() {
		return false
	}
	s := Slot{FirstAttempts: sat32(inc.FirstAttempts), Retries: sat32(inc.Retries), Successes: sat32(inc.Successes),
		Failures: sat32(inc.Failures), SlowCalls: sat32(inc.SlowCalls), Rejected: sat32(inc.Rejected), ActiveNodes: 1 << tr.bit}
	if s.Failures > 0 || s.SlowCalls > 0 {
		s.FailingNodes = 1 << tr.bit
		s.FailingZones = 1 << tr.zoneBit
	}
	for _, t := range []*tier{&d.fine, &d.coarse} {
		if slot := t.slot(at); slot != nil {
			slot.Add(s)
		}
	}
	d.use.add(now, h.cfg.FineHorizon, traffic(inc))
	return true
}

func sat32(v uint64) uint32 { return uint32(min(v, math.MaxUint32)) }
