package protocol

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// Gossip frame versions. A build speaks its own version (MaxVersion) and
// the one before (MinVersion); a frame of any other version is refused with
// ErrUnknownVersion, never guessed at. A version changes whenever what a
// gossip message means changes (protocol/README.md has the rule).
const (
	// Version1 is the frame of 0.1.x: every row and record in the plain
	// fields of GossipBatch and PushPullState, nothing signed.
	Version1 byte = 1
	// Version2 is this release's frame: a row or record whose origin has a
	// public key travels only signed (GossipBatch.signed_rows,
	// signed_records), the plain fields carry the items of origins without
	// one. A 0.1.x build must not read it: it would take a push-pull state
	// without its signed records for the whole state.
	Version2 byte = 2
	// MinVersion and MaxVersion are the versions this build decodes; it
	// sends MaxVersion, or MinVersion while a live member speaks nothing
	// newer.
	MinVersion = Version1
	MaxVersion = Version2
)

// HeaderSize is the size of a frame header: [version byte][type byte].
const HeaderSize = 2

// DefaultMaxFrameSize bounds a decoded frame, header included. Broadcasts are
// far smaller (memberlist packets are ~1.4 KB); push-pull states of a node
// with thousands of dependencies are the large case.
const DefaultMaxFrameSize = 4 << 20

// FrameType says which message a frame carries.
type FrameType byte

const (
	// FrameBatch carries a fuseboxv1.GossipBatch (broadcasts and direct sends).
	FrameBatch FrameType = 1
	// FramePushPull carries a fuseboxv1.PushPullState (memberlist push-pull).
	FramePushPull FrameType = 2
)

func (t FrameType) String() string {
	switch t {
	case FrameBatch:
		return "batch"
	case FramePushPull:
		return "push-pull"
	default:
		return fmt.Sprintf("unknown(%d)", byte(t))
	}
}

// Sentinel errors of the codec; a *FrameError wraps one of them, so callers
// (and the agent's dropped-frame metric, labelled by reason) use errors.Is.
var (
	ErrEmpty          = errors.New("protocol: empty frame")
	ErrTruncated      = errors.New("protocol: truncated frame")
	ErrTooLarge       = errors.New("protocol: frame too large")
	ErrUnknownVersion = errors.New("protocol: unknown frame version")
	ErrUnknownType    = errors.New("protocol: unknown frame type")
	ErrMalformed      = errors.New("protocol: malformed payload")
)

// FrameError is the error of a failed Encode or Decode: Op is "encode" or
// "decode", Err one of the sentinels above, Detail says what was wrong.
type FrameError struct {
	Op     string
	Err    error
	Detail string
	// Version is the refused version of an ErrUnknownVersion (else 0).
	Version byte
}

func (e *FrameError) Error() string {
	if e.Detail == "" {
		return e.Err.Error() + " (" + e.Op + ")"
	}
	return e.Err.Error() + " (" + e.Op + "): " + e.Detail
}

func (e *FrameError) Unwrap() error { return e.Err }

// Reason returns a short, bounded label for metrics ("empty", "truncated",
// "too_large", "unknown_version", "unknown_type", "malformed").
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrEmpty):
		return "empty"
	case errors.Is(err, ErrTruncated):
		return "truncated"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrUnknownVersion):
		return "unknown_version"
	case errors.Is(err, ErrUnknownType):
		return "unknown_type"
	default:
		return "malformed"
	}
}

// Frame is a decoded frame: exactly one of Batch and PushPull is set,
// according to Type.
type Frame struct {
	// Version is the frame's version, MinVersion to MaxVersion.
	Version  byte
	Type     FrameType
	Batch    *fuseboxv1.GossipBatch
	PushPull *fuseboxv1.PushPullState
}

// Codec encodes and decodes gossip frames. The zero value uses
// DefaultMaxFrameSize. A Codec is safe for concurrent use.
type Codec struct {
	// MaxFrameSize bounds frames in both directions, header included
	// (optional, default DefaultMaxFrameSize).
	MaxFrameSize int
}

func (c Codec) max() int {
	if c.MaxFrameSize <= 0 {
		return DefaultMaxFrameSize
	}
	return c.MaxFrameSize
}

// EncodeBatch frames a GossipBatch at MaxVersion.
func (c Codec) EncodeBatch(b *fuseboxv1.GossipBatch) ([]byte, error) {
	return c.encode(MaxVersion, FrameBatch, b)
}

// EncodePushPull frames a PushPullState at MaxVersion.
func (c Codec) EncodePushPull(s *fuseboxv1.PushPullState) ([]byte, error) {
	return c.encode(MaxVersion, FramePushPull, s)
}

// EncodeBatchAt frames a GossipBatch at version v (MinVersion to
// MaxVersion).
func (c Codec) EncodeBatchAt(v byte, b *fuseboxv1.GossipBatch) ([]byte, error) {
	return c.encode(v, FrameBatch, b)
}

// EncodePushPullAt frames a PushPullState at version v.
func (c Codec) EncodePushPullAt(v byte, s *fuseboxv1.PushPullState) ([]byte, error) {
	return c.encode(v, FramePushPull, s)
}

// Speaks reports whether this build encodes and decodes frames of version v.
func Speaks(v byte) bool { return v >= MinVersion && v <= MaxVersion }

func (c Codec) encode(v byte, t FrameType, m proto.Message) ([]byte, error) {
	if !Speaks(v) {
		return nil, &FrameError{Op: "encode", Err: ErrUnknownVersion,
			Detail: fmt.Sprintf("version %d, this build speaks %d to %d", v, MinVersion, MaxVersion)}
	}
	size := proto.Size(m)
	if HeaderSize+size > c.max() {
		return nil, &FrameError{Op: "encode", Err: ErrTooLarge,
			Detail: fmt.Sprintf("%s frame of %d bytes exceeds the maximum of %d", t, HeaderSize+size, c.max())}
	}
	buf := make([]byte, HeaderSize, HeaderSize+size)
	buf[0], buf[1] = v, byte(t)
	out, err := proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return nil, &FrameError{Op: "encode", Err: ErrMalformed, Detail: err.Error()}
	}
	return out, nil
}

// Decode parses one frame. It never panics and never keeps a reference to
// data (memberlist reuses its buffers): every error is a *FrameError.
func (c Codec) Decode(data []byte) (Frame, error) {
	switch {
	case len(data) == 0:
		return Frame{}, &FrameError{Op: "decode", Err: ErrEmpty}
	case len(data) > c.max():
		return Frame{}, &FrameError{Op: "decode", Err: ErrTooLarge,
			Detail: fmt.Sprintf("%d bytes exceeds the maximum of %d", len(data), c.max())}
	case !Speaks(data[0]):
		return Frame{}, &FrameError{Op: "decode", Err: ErrUnknownVersion, Version: data[0],
			Detail: fmt.Sprintf("version %d, this build speaks %d to %d", data[0], MinVersion, MaxVersion)}
	case len(data) < HeaderSize:
		return Frame{}, &FrameError{Op: "decode", Err: ErrTruncated, Detail: "header needs 2 bytes, got 1"}
	}
	f := Frame{Version: data[0], Type: FrameType(data[1])}
	var m proto.Message
	switch f.Type {
	case FrameBatch:
		f.Batch = &fuseboxv1.GossipBatch{}
		m = f.Batch
	case FramePushPull:
		f.PushPull = &fuseboxv1.PushPullState{}
		m = f.PushPull
	default:
		return Frame{}, &FrameError{Op: "decode", Err: ErrUnknownType, Detail: fmt.Sprintf("type %d", data[1])}
	}
	// proto.Unmarshal copies strings and bytes out of data.
	if err := proto.Unmarshal(data[HeaderSize:], m); err != nil {
		return Frame{}, &FrameError{Op: "decode", Err: ErrMalformed, Detail: f.Type.String() + ": " + err.Error()}
	}
	return f, nil
}
