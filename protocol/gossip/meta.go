package gossip

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Role is what a gossip member is.
type Role string

const (
	// RoleAgent is a fusebox-agent: its rows count in fleet totals and it
	// may be chosen as a half-open prober.
	RoleAgent Role = "agent"
	// RoleObserver is a read-only member (the coordinator's fleet observer):
	// it receives gossip but is never counted, never a prober, and sends no
	// rows or records.
	RoleObserver Role = "observer"
)

// MetaVersion is the version of the NodeMeta encoding this build writes.
const MetaVersion = 1

// MaxMetaSize is memberlist's bound on node metadata (memberlist.MetaMaxSize).
const MaxMetaSize = 512

// NodeMeta is the metadata every gossip member publishes through
// memberlist's Delegate.NodeMeta.
//
// Encoding (version 1): a JSON object of at most 512 bytes,
//
//	{"v":1,"role":"agent","zone":"eu-1a","version":"0.2.0-dev","grpc":"127.0.0.1:7950","http":"127.0.0.1:7951","wire":2,"key":"<base64>"}
//
// "v" is the encoding version, "role" is "agent" or "observer", "zone" the
// failure zone, "version" the software version, "grpc" the member's local
// API TCP address and "http" its metrics/health address (both empty when
// off), "wire" the highest gossip frame version the member speaks (it
// speaks the one before too; absent: 1, a 0.1.x build) and "key" the
// base64 Ed25519 public key it signs with (absent: it signs nothing). A
// Gossip fills "wire" and "key" itself. Decoders ignore unknown keys, so
// later versions may add fields; a member with an unknown or missing role
// is neither an agent nor an observer and is ignored by fleet accounting.
type NodeMeta struct {
	Version  int    `json:"v"`
	Role     Role   `json:"role"`
	Zone     string `json:"zone,omitempty"`
	Software string `json:"version,omitempty"`
	GRPCAddr string `json:"grpc,omitempty"`
	HTTPAddr string `json:"http,omitempty"`
	Wire     int    `json:"wire,omitempty"`
	Key      string `json:"key,omitempty"`
}

// WireVersion is the highest frame version the member speaks: Wire, or 1
// when the member does not say (0.1.x).
func (m NodeMeta) WireVersion() int { return max(m.Wire, 1) }

// ErrMetaTooLarge is returned by NodeMeta.Encode past MaxMetaSize.
var ErrMetaTooLarge = errors.New("gossip: node metadata too large")

// Encode returns the version-1 encoding of m (Version is set to MetaVersion).
func (m NodeMeta) Encode() ([]byte, error) {
	m.Version = MetaVersion
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("gossip: encode node metadata: %w", err)
	}
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrMetaTooLarge, len(b), MaxMetaSize)
	}
	return b, nil
}

// DecodeNodeMeta parses metadata written by NodeMeta.Encode (any version:
// unknown fields are ignored). Empty metadata decodes to a zero NodeMeta with
// no role.
func DecodeNodeMeta(b []byte) (NodeMeta, error) {
	var m NodeMeta
	if len(b) == 0 {
		return m, nil
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return NodeMeta{}, fmt.Errorf("gossip: decode node metadata: %w", err)
	}
	if m.Version < 1 {
		return NodeMeta{}, fmt.Errorf("gossip: decode node metadata: version %d", m.Version)
	}
	return m, nil
}

// IsAgent reports whether the member counts in fleet totals.
func (m NodeMeta) IsAgent() bool { return m.Role == RoleAgent }
