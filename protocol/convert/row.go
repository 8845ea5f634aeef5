package convert

import (
	"math"
	"slices"

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
	m := &fuseboxv1.NodeWindow{
		Node:           r.Node,
		Zone:           r.Zone,
		Dependency:     r.Dependency,
		Seq:            r.Seq,
		Counts:         CountsToProto(r.Counts),
		NodeLocalOpen:  r.LocalOpen,
		Generation:     r.Generation,
		InFlight:       r.InFlight,
		ProbeSuccesses: r.ProbeSuccesses,
		ProbeFailures:  r.ProbeFailures,
	}
	m.RecentSuccesses, m.RecentFailures, m.RecentSlowCalls = RecentToProto(r.Recent)
	cumulativeToProto(r.Cumulative, m)
	return m
}

// RecentToProto encodes a row's suffix counts as the wire's three lists
// (successes, failures, slow calls): each suffix minus the one before it,
// trailing zeros left out (nil when all are zero).
func RecentToProto(r sharedstate.Recent) (successes, failures, slow []uint64) {
	var prev sharedstate.RecentCounts
	var s, f, sl [sharedstate.FastHorizons]uint64
	for k, c := range r {
		s[k] = uint64(c.Successes - min(prev.Successes, c.Successes))
		f[k] = uint64(c.Failures - min(prev.Failures, c.Failures))
		sl[k] = uint64(c.SlowCalls - min(prev.SlowCalls, c.SlowCalls))
		prev = c
	}
	return trimZeros(s[:]), trimZeros(f[:]), trimZeros(sl[:])
}

func trimZeros(v []uint64) []uint64 {
	n := len(v)
	for n > 0 && v[n-1] == 0 {
		n--
	}
	if n == 0 {
		return nil
	}
	return slices.Clone(v[:n])
}

// RecentFromProto decodes the wire's three lists (saturating at
// math.MaxUint32). A list longer than sharedstate.FastHorizons is
// malformed: it returns false.
func RecentFromProto(successes, failures, slow []uint64) (sharedstate.Recent, bool) {
	var r sharedstate.Recent
	if len(successes) > sharedstate.FastHorizons || len(failures) > sharedstate.FastHorizons || len(slow) > sharedstate.FastHorizons {
		return r, false
	}
	at := func(v []uint64, k int) uint32 {
		if k < len(v) {
			return sat32(v[k])
		}
		return 0
	}
	var acc sharedstate.RecentCounts
	for k := range sharedstate.FastHorizons {
		acc = acc.Plus(sharedstate.RecentCounts{Successes: at(successes, k), Failures: at(failures, k), SlowCalls: at(slow, k)})
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
	recent, ok := RecentFromProto(m.GetRecentSuccesses(), m.GetRecentFailures(), m.GetRecentSlowCalls())
	node := m.GetNode()
	if !ok {
		node = ""
	}
	return sharedstate.NodeWindow{
		Cumulative:     cumulativeFromProto(m),
		Node:           node,
		Zone:           m.GetZone(),
		Dependency:     m.GetDependency(),
		Seq:            m.GetSeq(),
		Generation:     m.GetGeneration(),
		LocalOpen:      m.GetNodeLocalOpen(),
		InFlight:       m.GetInFlight(),
		ProbeSuccesses: m.GetProbeSuccesses(),
		ProbeFailures:  m.GetProbeFailures(),
		Counts:         CountsFromProto(m.GetCounts()),
		Recent:         recent,
	}
}
