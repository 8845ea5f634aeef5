package convert

import (
	"math"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// cumulativeToProto sets a row's cumulative counts on m: nothing for a row
// without them, else the counts, the series start in Unix ms and the age of
// the reading in ms after it (a small varint).
func cumulativeToProto(c sharedstate.Cumulative, m *fuseboxv1.NodeWindow) {
	if !c.Known() {
		return
	}
	m.Cumulative = CountsToProto(c.Counts)
	m.CumulativeSinceUnixMs = c.Since
	m.CumulativeAgeMs = uint64(max(c.At-c.Since, 0))
}

// cumulativeFromProto reads a row's cumulative counts (none for a row of
// 0.1.x). An age that would overflow the reading's time is malformed: it
// yields a reading before the series start, which the engine refuses.
func cumulativeFromProto(m *fuseboxv1.NodeWindow) sharedstate.Cumulative {
	c := sharedstate.Cumulative{Counts: CountsFromProto(m.GetCumulative()), Since: m.GetCumulativeSinceUnixMs()}
	age := m.GetCumulativeAgeMs()
	if age > uint64(math.MaxInt64-max(c.Since, 0)) {
		c.At = c.Since - 1
		return c
	}
	c.At = c.Since + int64(age)
	return c
}
