package protocol

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// Version1 is the only gossip frame version this build speaks. A frame of any
// other version is refused with ErrUnknownVersion (a newer peer during a
// rolling upgrade), never guessed at.
const Version1 byte = 1

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

// EncodeBatch frames a GossipBatch.
func (c Codec) EncodeBatch(b *fuseboxv1.GossipBatch) ([]byte, error) {
	return c.encode(FrameBatch, b)
}

// EncodePushPull frames a PushPullState.
func (c Codec) EncodePushPull(s *fuseboxv1.PushPullState) ([]byte, error) {
	return c.encode(FramePushPull, s)
}

func (c Codec) encode(t FrameType, m proto.Message) ([]byte, error) {
	size := proto.Size(m)
	if HeaderSize+size > c.max() {
		return nil, &FrameError{Op: "encode", Err: ErrTooLarge,
			Detail: fmt.Sprintf("%s frame of %d bytes exceeds the maximum of %d", t, HeaderSize+size, c.max())}
	}
	buf := make([]byte, HeaderSize, HeaderSize+size)
	buf[0], buf[1] = Version1, byte(t)
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
	case data[0] != Version1:
		return Frame{}, &FrameError{Op: "decode", Err: ErrUnknownVersion,
			Detail: fmt.Sprintf("version %d, this build speaks %d", data[0], Version1)}
	case len(data) < HeaderSize:
		return Frame{}, &FrameError{Op: "decode", Err: ErrTruncated, Detail: "header needs 2 bytes, got 1"}
	}
	f := Frame{Type: FrameType(data[1])}
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
