package protocol

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// releaseMessage is a message of the last release's .proto, as a build of
// that release decodes it.
func releaseMessage(t *testing.T, name protoreflect.Name) protoreflect.MessageDescriptor {
	t.Helper()
	fd, err := protodesc.NewFile(loadRelease(t), protoregistry.GlobalFiles) // its imports: the well-known types
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().ByName(name)
	if md == nil {
		t.Fatalf("the last release has no message %s", name)
	}
	return md
}

// The trip evidence and the incident start are fields the last release
// does not know: a build of it decodes an open record that carries them
// into the same record it always read, and one it re-encodes (a relay of
// that release) reaches this build as a valid record without them, in a
// frame of the version both speak.
func TestBreakerRecordEvidenceAcrossVersions(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := sharedstate.BreakerRecord{Dependency: "inventory-api", Generation: 7, State: sharedstate.Open, Since: t0.Add(40 * time.Second),
		OpenCount: 3, Origin: "agent-3", Reason: "probe failed", IncidentStart: t0,
		Trip: &sharedstate.TripEvidence{Requests: 40, Failures: 32, Nodes: 3, FailureRateThreshold: 0.5, SlowCallRateThreshold: 1,
			MinimumRequests: 20, MinFailingNodes: 2, Confidence: 0.95, LowerBound: 0.61, Horizon: 10 * time.Second,
			FailingNodes: []string{"agent-1", "agent-2"}, FailingNodeCount: 2}}
	if err := rec.Validate(); err != nil {
		t.Fatal(err)
	}
	var codec Codec
	frame, err := codec.EncodeBatchAt(MinVersion, &fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{convert.RecordToProto(rec)}})
	if err != nil {
		t.Fatal(err)
	}

	// This build reads everything back.
	m, err := codec.Decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := convert.RecordFromProto(m.Batch.GetRecords()[0])
	if !ok || !reflect.DeepEqual(got, rec) {
		t.Fatalf("this build decodes\n%+v, want\n%+v", got, rec)
	}

	// The last release: the fields it knows are intact, the new ones unknown.
	body, err := proto.Marshal(convert.RecordToProto(rec))
	if err != nil {
		t.Fatal(err)
	}
	old := dynamicpb.NewMessage(releaseMessage(t, "BreakerRecord"))
	if err := proto.Unmarshal(body, old); err != nil {
		t.Fatalf("the last release cannot decode the record: %v", err)
	}
	fields := old.Descriptor().Fields()
	for name, want := range map[protoreflect.Name]any{"dependency": rec.Dependency, "generation": rec.Generation, "open_count": uint32(rec.OpenCount),
		"origin": rec.Origin, "reason": rec.Reason, "since_unix_nano": rec.Since.UnixNano()} {
		if got := old.Get(fields.ByName(name)).Interface(); got != want {
			t.Errorf("the last release reads %s = %v, want %v", name, got, want)
		}
	}
	if fields.ByName("trip") != nil || fields.ByName("incident_start_unix_nano") != nil || len(old.GetUnknown()) == 0 {
		t.Errorf("the evidence should be unknown fields to the last release (unknown bytes: %d)", len(old.GetUnknown()))
	}

	// What a relay of the last release sends on: the record without them.
	old.SetUnknown(nil)
	relayed, err := proto.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	var back fuseboxv1.BreakerRecord
	if err := proto.Unmarshal(relayed, &back); err != nil {
		t.Fatal(err)
	}
	plain, ok := convert.RecordFromProto(&back)
	want := rec
	want.IncidentStart, want.Trip = time.Time{}, nil
	if !ok || !reflect.DeepEqual(plain, want) || plain.Validate() != nil {
		t.Errorf("a record relayed by the last release reads as\n%+v (%v), want\n%+v", plain, plain.Validate(), want)
	}
}

// The cumulative counts are fields the last release does not know: a build
// of it decodes a row that carries them into the row it always read, and
// one it re-encodes (a relay of that release) reaches this build as a
// valid row without them, which adds nothing to a sum over nodes.
func TestRowCumulativeAcrossVersions(t *testing.T) {
	since := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	row := sharedstate.NodeWindow{Node: "agent-3", Zone: "eu-1", Dependency: "inventory-api", Seq: 41, Generation: 2,
		Counts: sharedstate.Counts{FirstAttempts: 120, Successes: 110, Failures: 10},
		Cumulative: sharedstate.Cumulative{Counts: sharedstate.Counts{FirstAttempts: 81234, Retries: 310, Successes: 80120, Failures: 1424, SlowCalls: 77, Rejected: 12},
			Since: since, At: since + 86_400_000}}
	if err := row.Validate(); err != nil {
		t.Fatal(err)
	}
	body, err := proto.Marshal(convert.RowToProto(row))
	if err != nil {
		t.Fatal(err)
	}
	var m fuseboxv1.NodeWindow
	if err := proto.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if got := convert.RowFromProto(&m); got != row {
		t.Fatalf("this build decodes\n%+v, want\n%+v", got, row)
	}

	old := dynamicpb.NewMessage(releaseMessage(t, "NodeWindow"))
	if err := proto.Unmarshal(body, old); err != nil {
		t.Fatalf("the last release cannot decode the row: %v", err)
	}
	fields := old.Descriptor().Fields()
	for name, want := range map[protoreflect.Name]any{"node": row.Node, "dependency": row.Dependency, "seq": row.Seq, "generation": row.Generation} {
		if got := old.Get(fields.ByName(name)).Interface(); got != want {
			t.Errorf("the last release reads %s = %v, want %v", name, got, want)
		}
	}
	if fields.ByName("cumulative") != nil || len(old.GetUnknown()) == 0 {
		t.Errorf("the cumulative counts should be unknown fields to the last release (unknown bytes: %d)", len(old.GetUnknown()))
	}
	old.SetUnknown(nil)
	relayed, err := proto.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	var back fuseboxv1.NodeWindow
	if err := proto.Unmarshal(relayed, &back); err != nil {
		t.Fatal(err)
	}
	plain := convert.RowFromProto(&back)
	want := row
	want.Cumulative = sharedstate.Cumulative{}
	if plain != want || plain.Validate() != nil || plain.Cumulative.Known() {
		t.Errorf("a row relayed by the last release reads as\n%+v (%v), want\n%+v", plain, plain.Validate(), want)
	}
}

// TestCumulativeBytesPerRow measures what the cumulative counts add to a
// row on the wire (protocol/README.md's figure): a busy dependency a day
// after the node began counting it, and a quiet one an hour after.
func TestCumulativeBytesPerRow(t *testing.T) {
	since := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for _, c := range []struct {
		name string
		cum  sharedstate.Cumulative
		max  int
	}{
		{"busy, a day in (8.6M calls, 1% failing, retries, some slow and rejected)", sharedstate.Cumulative{
			Counts: sharedstate.Counts{FirstAttempts: 8_640_000, Retries: 43_000, Successes: 8_596_000, Failures: 87_000, SlowCalls: 9_000, Rejected: 2_000},
			Since:  since, At: since + 86_400_000}, 40},
		{"quiet, an hour in (3,600 calls, a few failures)", sharedstate.Cumulative{
			Counts: sharedstate.Counts{FirstAttempts: 3600, Successes: 3590, Failures: 10},
			Since:  since, At: since + 3_600_000}, 25},
	} {
		base := sharedstate.NodeWindow{Node: "agent-0042", Zone: "eu-west-1a", Dependency: "inventory-api.internal", Seq: 1_234_567, Generation: 3,
			Counts: sharedstate.Counts{FirstAttempts: 1000, Successes: 990, Failures: 10},
			Recent: sharedstate.Recent{{Successes: 10}, {Successes: 20}, {Successes: 40}, {Successes: 80, Failures: 1}, {Successes: 160, Failures: 2},
				{Successes: 320, Failures: 5}, {Successes: 640, Failures: 9}}}
		with := base
		with.Cumulative = c.cum
		n0, n1 := proto.Size(convert.RowToProto(base)), proto.Size(convert.RowToProto(with))
		t.Logf("%s: row %d bytes without, %d with: +%d", c.name, n0, n1, n1-n0)
		if n1-n0 > c.max {
			t.Errorf("%s: the cumulative counts add %d bytes, want at most %d", c.name, n1-n0, c.max)
		}
	}
}
