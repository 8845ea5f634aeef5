package convert

import (
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
	}
}

// RowFromProto converts a received row; the engine validates it.
func RowFromProto(m *fuseboxv1.NodeWindow) sharedstate.NodeWindow {
	return sharedstate.NodeWindow{
		Node:       m.GetNode(),
		Zone:       m.GetZone(),
		Dependency: m.GetDependency(),
		Seq:        m.GetSeq(),
		Generation: m.GetGeneration(),
		LocalOpen:  m.GetNodeLocalOpen(),
		Counts:     CountsFromProto(m.GetCounts()),
	}
}
