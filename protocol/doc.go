// Package protocol holds Fusebox's wire protocol: the protobuf sources
// (fusebox/v1/fusebox.proto), their generated Go code (package
// protocol/fuseboxv1: the Agent and Admin gRPC services and the gossip
// messages) and the gossip frame codec.
//
// A gossip frame is [version byte][type byte][protobuf payload], bounded by
// Codec.MaxFrameSize. A build decodes the frame versions MinVersion to
// MaxVersion (its own and the previous release's: Version1 is 0.1.x's,
// Version2 carries signed rows and records) and encodes at the version it
// is asked for. Decode never panics: empty, truncated, oversized,
// unknown-version, unknown-type and malformed input all come back as a
// *FrameError wrapping a sentinel (ErrTruncated, ErrTooLarge, …), so a
// receiver drops the frame and counts it by Reason(err).
//
// Usage:
//
//	var codec protocol.Codec // DefaultMaxFrameSize
//	frame, err := codec.EncodeBatch(&fuseboxv1.GossipBatch{Rows: rows})
//	…
//	f, err := codec.Decode(received)
//	if err != nil {
//		dropped.WithLabelValues(protocol.Reason(err)).Inc()
//		return
//	}
//	for _, r := range f.Batch.GetRows() { … }
//
// Regenerate the Go code with `make proto`; `make verify` fails when the
// committed code is stale.
package protocol
