package convert

import (
	"math"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// CountsToProto converts window counts.
func CountsToProto(c sharedstate.Counts) *fuseboxv1.Counts {
	return &fuseboxv1.Counts{
		FirstAttempts: c.FirstAttempts,
		Retries:       c.Retries,
		Successes:     c.Successes,
		Failures:      c.Failures,
		SlowCalls:     c.SlowCalls,
		Rejected:      c.Rejected,
	}
}

// CountsFromProto converts counts (nil is zero).
func CountsFromProto(m *fuseboxv1.Counts) sharedstate.Counts {
	return sharedstate.Counts{
		FirstAttempts: m.GetFirstAttempts(),
		Retries:       m.GetRetries(),
		Successes:     m.GetSuccesses(),
		Failures:      m.GetFailures(),
		SlowCalls:     m.GetSlowCalls(),
		Rejected:      m.GetRejected(),
	}
}

// RowToProto converts a NodeWindow row for the wire.
func RowToProto(r sharedstate.NodeWindow) *fuseboxv1.NodeWindow {
	return &fuseboxv1.NodeWindow{
		Node:          r.Node,
		Zone:          r.Zone,
		Dependency:    r.Dependency,
		Seq:           r.Seq,
		Counts:        CountsToProto(r.Counts),
		NodeLocalOpen: r.LocalOpen,
		Generation:    r.Generation,
		Recent:        RecentToProto(r.Recent),
	}
}

// RecentToProto encodes a row's suffix counts as the wire's triples: each
// suffix minus the one before it, trailing empty triples left out (nil when
// all are empty).
func RecentToProto(r sharedstate.Recent) []uint64 {
	var out []uint64
	var prev sharedstate.RecentCounts
	n := 0
	for k, c := range r {
		out = append(out, uint64(c.Successes-min(prev.Successes, c.Successes)),
			uint64(c.Failures-min(prev.Failures, c.Failures)), uint64(c.SlowCalls-min(prev.SlowCalls, c.SlowCalls)))
		if c != prev {
			n = k + 1
		}
		prev = c
	}
	if n == 0 {
		return nil
	}
	return out[:3*n]
}

// RecentFromProto decodes the wire's triples (saturating at
// math.MaxUint32). A length that is not a multiple of 3, or more than
// sharedstate.FastHorizons triples, is malformed: it returns false.
func RecentFromProto(v []uint64) (sharedstate.Recent, bool) {
	var r sharedstate.Recent
	if len(v)%3 != 0 || len(v) > 3*sharedstate.FastHorizons {
		return r, false
	}
	var acc sharedstate.RecentCounts
	for k := range sharedstate.FastHorizons {
		if 3*k < len(v) {
			acc = acc.Plus(sharedstate.RecentCounts{Successes: sat32(v[3*k]), Failures: sat32(v[3*k+1]), SlowCalls: sat32(v[3*k+2])})
		}
		r[k] = acc
	}
	return r, true
}

func sat32(v uint64) uint32 {
	if v > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}

// RowFromProto converts a received row; the engine validates it. A
// malformed recent list yields a row the engine refuses as invalid (and
// counts): its node name is cleared.
func RowFromProto(m *fuseboxv1.NodeWindow) sharedstate.NodeWindow {
	recent, ok := RecentFromProto(m.GetRecent())
	node := m.GetNode()
	if !ok {
		node = ""
	}
	return sharedstate.NodeWindow{
		Node:       node,
		Zone:       m.GetZone(),
		Dependency: m.GetDependency(),
		Seq:        m.GetSeq(),
		Generation: m.GetGeneration(),
		LocalOpen:  m.GetNodeLocalOpen(),
		Counts:     CountsFromProto(m.GetCounts()),
		Recent:     recent,
	}
}
