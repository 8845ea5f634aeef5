package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Member is the JSON value of a members/<node> key: what a node tells the
// fleet about itself (agents use it to find gossip peers to join).
type Member struct {
	Node       string `json:"node"`       // (required) the memberlist node name
	Role       string `json:"role"`       // "agent", "observer", …
	Zone       string `json:"zone"`       // for scope "zone"
	Version    string `json:"version"`    // the binary's version
	GossipAddr string `json:"gossipAddr"` // host:port of memberlist
	APIAddr    string `json:"apiAddr"`    // host:port of the node's API, if any

	// Etcd is how the node follows the policies and overrides in etcd
	// (optional; agents publish it, without Revision): synced or not, and
	// the rewinds its watcher saw.
	Etcd *SyncStatus `json:"etcd,omitempty"`
	// PublicKey is the base64 Ed25519 key the node signs its gossip rows
	// and records with; receivers trust this entry, not the gossip, for it.
	// Empty: the node signs nothing (0.1.x, an observer).
	PublicKey string `json:"publicKey,omitempty"`
	// Wire is the highest gossip frame version the node speaks (0: one
	// that does not say, 1).
	Wire int `json:"wire,omitempty"`
}

func validateNodeName(node string) error {
	if node == "" {
		return errors.New("node name is empty")
	}
	if len(node) > sharedstate.MaxNodeNameLen {
		return fmt.Errorf("node name is %d bytes, longer than %d", len(node), sharedstate.MaxNodeNameLen)
	}
	for _, r := range node {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("node name %q contains a space or control character", node)
		}
	}
	return nil
}

// MemberEntry is a registration as stored.
type MemberEntry struct {
	Member
	ModRevision int64
	Lease       clientv3.LeaseID
}

// DefaultMemberTTL is the lease TTL of a registration when none is given.
const DefaultMemberTTL = 10 * time.Second

// RegisterOption configures Register.
type RegisterOption func(*registerOptions)

type registerOptions struct{ ttl time.Duration }

// WithMemberTTL sets the registration's lease TTL (default 10s, rounded up
// to whole seconds): how long the key outlives a node that died without
// closing its registration.
func WithMemberTTL(ttl time.Duration) RegisterOption {
	return func(o *registerOptions) { o.ttl = ttl }
}

// Registration keeps a members/<node> key alive through a
// concurrency.Session (lease plus keep-alive). It is safe for concurrent use.
type Registration struct {
	s       *Store
	session *concurrency.Session
	key     string
	once    sync.Once
	err     error
}

// Register writes m under members/<m.Node> on a new lease kept alive by a
// concurrency.Session, replacing any previous registration of the node. ctx
// bounds the registration itself, not its lifetime: the keep-alive runs
// until Close, or until the lease is lost (Done), or the client is closed.
func (s *Store) Register(ctx context.Context, m Member, opts ...RegisterOption) (*Registration, error) {
	o := registerOptions{ttl: DefaultMemberTTL}
	for _, opt := range opts {
		opt(&o)
	}
	if err := validateNodeName(m.Node); err != nil {
		return nil, fmt.Errorf("store: register: %w", err)
	}
	if o.ttl <= 0 {
		return nil, fmt.Errorf("store: register %q: TTL %v must be positive", m.Node, o.ttl)
	}
	value, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("store: register %q: %w", m.Node, err)
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()

	// Grant under ctx (NewSession would grant under the client's lifetime
	// context, unbounded when etcd is down), then hand the lease over.
	secs := int64((o.ttl + time.Second - 1) / time.Second)
	g, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("store: register %q: grant lease: %w", m.Node, err)
	}
	session, err := concurrency.NewSession(s.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(int(g.TTL)))
	if err != nil {
		s.revokeQuietly(ctx, g.ID)
		return nil, fmt.Errorf("store: register %q: session: %w", m.Node, err)
	}
	r := &Registration{s: s, session: session, key: s.MemberKey(m.Node)}
	if _, err := s.cli.Put(ctx, r.key, string(value), clientv3.WithLease(g.ID)); err != nil {
		session.Orphan()
		s.revokeQuietly(ctx, g.ID)
		return nil, fmt.Errorf("store: register %q: %w", m.Node, err)
	}
	return r, nil
}

// Key returns the registration's etcd key.
func (r *Registration) Key() string { return r.key }

// Lease returns the registration's lease.
func (r *Registration) Lease() clientv3.LeaseID { return r.session.Lease() }

// Done is closed when the keep-alive stops: after Close, or when the lease
// was lost (it expired while etcd was unreachable). A node whose
// registration is done and not closed should Register again.
func (r *Registration) Done() <-chan struct{} { return r.session.Done() }

// Update replaces the registered metadata (same node, same lease).
func (r *Registration) Update(ctx context.Context, m Member) error {
	if r.key != r.s.MemberKey(m.Node) {
		return fmt.Errorf("store: update registration %s: node %q differs", r.key, m.Node)
	}
	value, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("store: update registration %s: %w", r.key, err)
	}
	ctx, cancel := r.s.ctx(ctx)
	defer cancel()
	if _, err := r.s.cli.Put(ctx, r.key, string(value), clientv3.WithLease(r.session.Lease())); err != nil {
		return fmt.Errorf("store: update registration %s: %w", r.key, err)
	}
	return nil
}

// Close stops the keep-alive and revokes the lease, which deletes the key.
// It is idempotent and waits for the keep-alive goroutine. The revoke is
// bounded by the lease TTL: if etcd is unreachable the key disappears when
// the lease expires.
func (r *Registration) Close() error {
	r.once.Do(func() {
		if err := r.session.Close(); err != nil {
			r.err = fmt.Errorf("store: close registration %s: %w", r.key, err)
		}
	})
	return r.err
}

// GetMember returns the registration of node; found is false when there is
// none.
func (s *Store) GetMember(ctx context.Context, node string) (m MemberEntry, found bool, err error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.MemberKey(node))
	if err != nil {
		return MemberEntry{}, false, fmt.Errorf("store: get member %q: %w", node, err)
	}
	if len(resp.Kvs) == 0 {
		return MemberEntry{}, false, nil
	}
	m, err = s.decodeMember(resp.Kvs[0])
	return m, err == nil, err
}

// ListMembers returns the registered members sorted by node name, and the
// revision they were read at. Invalid values are skipped and reported in the
// error (as *InvalidValueError, joined) alongside the valid entries.
func (s *Store) ListMembers(ctx context.Context) ([]MemberEntry, int64, error) {
	kvs, rev, err := s.list(ctx, membersDir)
	if err != nil {
		return nil, 0, err
	}
	out, err := decodeAll(kvs, s.decodeMember)
	return out, rev, err
}

// decodeMember parses a members/ key-value, whose node must be the key's.
func (s *Store) decodeMember(kv *mvccpb.KeyValue) (MemberEntry, error) {
	var m Member
	err := json.Unmarshal(kv.Value, &m)
	if err == nil && s.MemberKey(m.Node) != string(kv.Key) {
		err = fmt.Errorf("node %q does not match the key", m.Node)
	}
	if err != nil {
		return MemberEntry{}, invalidValue(kv, err)
	}
	return MemberEntry{Member: m, ModRevision: kv.ModRevision, Lease: clientv3.LeaseID(kv.Lease)}, nil
}
