package history

import (
	"time"
	"unsafe"
)

// chunk is chunkSlots consecutive slots; idx is its absolute index
// (slot index / chunkSlots).
type chunk struct {
	idx   int64
	slots [chunkSlots]Slot
}

// tier is a ring of chunks covering a horizon; chunks are allocated as
// counts arrive and freed once out of the horizon. Guarded by the History's
// lock.
type tier struct {
	step   int64 // ns per slot
	chunks []*chunk
	newest int64 // highest chunk index written, -1: none
}

func newTier(step time.Duration, horizon time.Duration) tier {
	slots := (int64(horizon) + int64(step) - 1) / int64(step)
	n := (slots+chunkSlots-1)/chunkSlots + 1 // one more: the newest chunk is partly future
	return tier{step: int64(step), chunks: make([]*chunk, n), newest: -1}
}

// slot returns the slot holding time at (Unix ns), allocating its chunk;
// nil when at is older than what the ring holds.
func (t *tier) slot(at int64) *Slot {
	abs := floorDiv(at, t.step)
	ci := floorDiv(abs, chunkSlots)
	if t.newest >= 0 && ci <= t.newest-int64(len(t.chunks)) {
		return nil
	}
	pos := floorMod(ci, int64(len(t.chunks)))
	c := t.chunks[pos]
	switch {
	case c == nil:
		c = &chunk{idx: ci}
		t.chunks[pos] = c
	case c.idx < ci:
		*c = chunk{idx: ci}
	case c.idx > ci:
		return nil
	}
	if ci > t.newest {
		t.newest = ci
	}
	return &c.slots[floorMod(abs, chunkSlots)]
}

// read returns the slot at absolute index abs (zero when not held).
func (t *tier) read(abs int64) Slot {
	ci := floorDiv(abs, chunkSlots)
	c := t.chunks[floorMod(ci, int64(len(t.chunks)))]
	if c == nil || c.idx != ci {
		return Slot{}
	}
	return c.slots[floorMod(abs, chunkSlots)]
}

// oldest is the start of the oldest slot the ring covers at now (its
// horizon, whether or not counts arrived then).
func (t *tier) oldest(now time.Time) time.Time {
	abs := floorDiv(now.UnixNano(), t.step)
	first := (floorDiv(abs, chunkSlots) - int64(len(t.chunks)) + 1) * chunkSlots
	return time.Unix(0, first*t.step)
}

// segment copies the slots over [from, to), clipped to what the ring covers,
// aligned to the step.
func (t *tier) segment(from, to time.Time) Segment {
	if o := t.oldest(to); from.Before(o) {
		from = o
	}
	a := floorDiv(from.UnixNano(), t.step)
	b := ceilDiv(to.UnixNano(), t.step)
	seg := Segment{From: time.Unix(0, a*t.step), Step: time.Duration(t.step)}
	if b <= a {
		return seg
	}
	seg.Slots = make([]Slot, b-a)
	for i := range seg.Slots {
		seg.Slots[i] = t.read(a + int64(i))
	}
	return seg
}

// trim frees the chunks that left the horizon at now.
func (t *tier) trim(now time.Time) {
	limit := floorDiv(floorDiv(now.UnixNano(), t.step), chunkSlots) - int64(len(t.chunks)) + 1
	for i, c := range t.chunks {
		if c != nil && c.idx < limit {
			t.chunks[i] = nil
		}
	}
}

func (t *tier) empty() bool {
	for _, c := range t.chunks {
		if c != nil {
			return false
		}
	}
	return true
}

func (t *tier) bytes() int64 {
	n := int64(unsafe.Sizeof(*t)) + int64(len(t.chunks))*int64(unsafe.Sizeof((*chunk)(nil)))
	for _, c := range t.chunks {
		if c != nil {
			n += int64(unsafe.Sizeof(*c))
		}
	}
	return n
}

func (d *depHistory) bytes() int64 {
	n := int64(unsafe.Sizeof(*d)) + d.fine.bytes() + d.coarse.bytes()
	n += int64(len(d.records)) * int64(unsafe.Sizeof(Record{}))
	for name := range d.nodes {
		n += int64(unsafe.Sizeof(tracker{})) + int64(len(name)) + 48 // the map entry
	}
	return n
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }
