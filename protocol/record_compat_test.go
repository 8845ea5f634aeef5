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
