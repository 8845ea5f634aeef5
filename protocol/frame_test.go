package protocol

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

func sampleBatch() *fuseboxv1.GossipBatch {
	return &fuseboxv1.GossipBatch{
		Rows: []*fuseboxv1.NodeWindow{{
			Node: "agent-1", Zone: "z1", Dependency: "shipping-api", Seq: 42,
			Counts: &fuseboxv1.Counts{FirstAttempts: 20, Retries: 2, Successes: 5, Failures: 15, SlowCalls: 1},
		}},
		Records: []*fuseboxv1.BreakerRecord{{
			Dependency: "shipping-api", Generation: 7, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN,
			SinceUnixNano: 1_700_000_000_000_000_000, OpenCount: 2, Origin: "agent-1", Reason: "failure rate 0.75 >= 0.5",
		}},
	}
}

func samplePushPull() *fuseboxv1.PushPullState {
	b := sampleBatch()
	return &fuseboxv1.PushPullState{Node: "agent-1", Records: b.Records, Rows: b.Rows, OverridesRevision: 99}
}

func TestRoundTrip(t *testing.T) {
	var c Codec
	t.Run("batch", func(t *testing.T) {
		in := sampleBatch()
		data, err := c.EncodeBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		if data[0] != MaxVersion || FrameType(data[1]) != FrameBatch {
			t.Fatalf("header = %v, want [%d %d]", data[:2], MaxVersion, FrameBatch)
		}
		f, err := c.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if f.Version != MaxVersion || f.Type != FrameBatch || f.PushPull != nil || !proto.Equal(f.Batch, in) {
			t.Fatalf("decoded %+v, want %v", f, in)
		}
	})
	t.Run("every version this build speaks", func(t *testing.T) {
		for v := MinVersion; v <= MaxVersion; v++ {
			data, err := c.EncodeBatchAt(v, sampleBatch())
			if err != nil {
				t.Fatal(err)
			}
			f, err := c.Decode(data)
			if err != nil || f.Version != v || !proto.Equal(f.Batch, sampleBatch()) {
				t.Fatalf("version %d: decoded %+v, %v", v, f, err)
			}
		}
		if _, err := c.EncodePushPullAt(MaxVersion+1, samplePushPull()); !errors.Is(err, ErrUnknownVersion) {
			t.Fatalf("encode at version %d: %v, want ErrUnknownVersion", MaxVersion+1, err)
		}
	})
	t.Run("push-pull", func(t *testing.T) {
		in := samplePushPull()
		data, err := c.EncodePushPull(in)
		if err != nil {
			t.Fatal(err)
		}
		f, err := c.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if f.Type != FramePushPull || f.Batch != nil || !proto.Equal(f.PushPull, in) {
			t.Fatalf("decoded %+v, want %v", f, in)
		}
	})
	t.Run("decode does not alias the input buffer", func(t *testing.T) {
		data, _ := c.EncodeBatch(sampleBatch())
		f, err := c.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		for i := range data {
			data[i] = 0xff
		}
		if got := f.Batch.Rows[0].Dependency; got != "shipping-api" {
			t.Fatalf("dependency changed with the buffer: %q", got)
		}
	})
}

func TestDecodeErrors(t *testing.T) {
	valid, err := Codec{}.EncodeBatch(sampleBatch())
	if err != nil {
		t.Fatal(err)
	}
	small := Codec{MaxFrameSize: 16}
	tests := []struct {
		name   string
		codec  Codec
		data   []byte
		want   error
		reason string
	}{
		{"nil", Codec{}, nil, ErrEmpty, "empty"},
		{"empty", Codec{}, []byte{}, ErrEmpty, "empty"},
		{"version only", Codec{}, []byte{Version1}, ErrTruncated, "truncated"},
		{"unknown version", Codec{}, append([]byte{MaxVersion + 1}, valid[1:]...), ErrUnknownVersion, "unknown_version"},
		{"version zero", Codec{}, []byte{0, 1}, ErrUnknownVersion, "unknown_version"},
		{"unknown type", Codec{}, []byte{Version1, 9, 0x0a, 0x00}, ErrUnknownType, "unknown_type"},
		{"truncated payload", Codec{}, valid[:len(valid)-3], ErrMalformed, "malformed"},
		{"garbage payload", Codec{}, []byte{Version1, byte(FrameBatch), 0xff, 0xff, 0xff}, ErrMalformed, "malformed"},
		{"oversized", small, valid, ErrTooLarge, "too_large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := tc.codec.Decode(tc.data)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode error = %v, want %v", err, tc.want)
			}
			var fe *FrameError
			if !errors.As(err, &fe) || fe.Op != "decode" {
				t.Fatalf("error %T is not a decode *FrameError", err)
			}
			if f.Batch != nil || f.PushPull != nil {
				t.Fatalf("failed decode returned a message: %+v", f)
			}
			if got := Reason(err); got != tc.reason {
				t.Fatalf("Reason = %q, want %q", got, tc.reason)
			}
			if tc.want == ErrUnknownVersion && fe.Version != tc.data[0] {
				t.Fatalf("FrameError.Version = %d, want %d", fe.Version, tc.data[0])
			}
		})
	}
}

func TestEmptyPayloadIsAnEmptyMessage(t *testing.T) {
	f, err := Codec{}.Decode([]byte{Version1, byte(FrameBatch)})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Batch.GetRows())+len(f.Batch.GetRecords()) != 0 {
		t.Fatalf("want an empty batch, got %v", f.Batch)
	}
}

func TestEncodeTooLarge(t *testing.T) {
	b := &fuseboxv1.GossipBatch{}
	for i := 0; i < 100; i++ {
		b.Rows = append(b.Rows, &fuseboxv1.NodeWindow{Node: strings.Repeat("n", 100), Dependency: "d"})
	}
	_, err := Codec{MaxFrameSize: 1024}.EncodeBatch(b)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("EncodeBatch error = %v, want ErrTooLarge", err)
	}
	if !strings.Contains(err.Error(), "exceeds the maximum of 1024") {
		t.Fatalf("error does not say the limit: %v", err)
	}
}

// FuzzDecode feeds arbitrary bytes to Decode. Its seeds run in every plain
// `go test`; `go test -fuzz FuzzDecode ./protocol` explores further. Decode
// must never panic, and whatever it accepts must survive a round trip.
func FuzzDecode(f *testing.F) {
	var c Codec
	batch, _ := c.EncodeBatch(sampleBatch())
	pp, _ := c.EncodePushPull(samplePushPull())
	for _, seed := range [][]byte{
		nil, {}, {Version1}, {Version1, byte(FrameBatch)}, {Version1, byte(FramePushPull)},
		{MaxVersion + 1, 1}, {Version2, 1}, {Version1, 0}, {Version1, 255, 1, 2, 3}, batch, pp,
		batch[:len(batch)/2], pp[:len(pp)-1], append(bytes.Clone(batch), 0x00),
		{Version1, byte(FrameBatch), 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		small := Codec{MaxFrameSize: 256}
		for _, codec := range []Codec{c, small} {
			fr, err := codec.Decode(data)
			if err != nil {
				var fe *FrameError
				if !errors.As(err, &fe) {
					t.Fatalf("error %T is not a *FrameError: %v", err, err)
				}
				continue
			}
			var again []byte
			switch fr.Type {
			case FrameBatch:
				again, err = codec.EncodeBatchAt(fr.Version, fr.Batch)
			case FramePushPull:
				again, err = codec.EncodePushPullAt(fr.Version, fr.PushPull)
			default:
				t.Fatalf("accepted unknown type %d", fr.Type)
			}
			if err != nil {
				// Unknown fields are dropped on re-encode, so the frame can only shrink.
				t.Fatalf("re-encode of an accepted frame failed: %v", err)
			}
			fr2, err := codec.Decode(again)
			if err != nil {
				t.Fatalf("decode of re-encoded frame failed: %v", err)
			}
			if !proto.Equal(fr.Batch, fr2.Batch) || !proto.Equal(fr.PushPull, fr2.PushPull) {
				t.Fatalf("round trip changed the frame")
			}
		}
	})
}
