package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "/fusebox/"

// DefaultRequestTimeout bounds every call when Config.RequestTimeout is zero.
const DefaultRequestTimeout = 10 * time.Second

// Sub-prefixes of the key layout (sharedstate/DESIGN.md, "etcd key layout").
const (
	policiesDir  = "policies/"
	overridesDir = "overrides/"
	auditDir     = "audit/"
	// auditIndexDir holds a copy of each audit entry under its dependency:
	// audit-index/<path-escaped dependency>/<seq>, written in the same
	// transaction, so that a dependency's entries are read without scanning
	// the whole trail.
	auditIndexDir = "audit-index/"
	electionsDir  = "elections/"
	membersDir    = "members/"
)

// Config configures a Store.
type Config struct {
	// Client is the etcd client (required). The Store does not own it:
	// close it after the Store's watchers and registrations.
	Client *clientv3.Client

	// Prefix is prepended to every key (optional, default "/fusebox/"). It
	// must end with "/".
	Prefix string

	// RequestTimeout bounds each call in addition to the caller's context
	// (optional, default 10s), so that no call hangs when etcd is down even
	// if the caller passed a context without a deadline.
	RequestTimeout time.Duration

	// Clock stamps audit entries and overrides (optional, default
	// sharedstate.SystemClock).
	Clock sharedstate.Clock
}

// DefaultConfig returns a Config with every optional field at its default
// and Client unset.
func DefaultConfig() Config {
	return Config{Prefix: DefaultPrefix, RequestTimeout: DefaultRequestTimeout, Clock: sharedstate.SystemClock{}}
}

// Validate reports every problem with c at once. Zero-valued optional fields
// are valid.
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("required field Client is nil"))
	}
	if c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/") {
		errs = append(errs, fmt.Errorf("Prefix %q must end with \"/\"", c.Prefix))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("RequestTimeout %v must not be negative", c.RequestTimeout))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("store: invalid config: %w", errors.Join(errs...))
}

// Store reads and writes Fusebox's state in etcd under one key prefix:
// policies, overrides, the audit log and member registrations.
//
// A Store is safe for concurrent use. It starts no goroutines of its own;
// watchers (Watch) and registrations (Register) do, and have their own Close.
type Store struct {
	cli     *clientv3.Client
	prefix  string
	timeout time.Duration
	clock   sharedstate.Clock
}

// New returns a Store for cfg.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := DefaultConfig()
	return &Store{
		cli:     cfg.Client,
		prefix:  cmp.Or(cfg.Prefix, d.Prefix),
		timeout: cmp.Or(cfg.RequestTimeout, d.RequestTimeout),
		clock:   cmp.Or(cfg.Clock, d.Clock),
	}, nil
}

// Prefix returns the key prefix, ending with "/".
func (s *Store) Prefix() string { return s.prefix }

// Client returns the etcd client the Store uses.
func (s *Store) Client() *clientv3.Client { return s.cli }

// PolicyKey returns the etcd key of a policy (DefaultPolicyName for the
// fleet default).
func (s *Store) PolicyKey(name string) string { return s.prefix + policiesDir + name }

// OverrideKey returns the etcd key of a dependency's override.
func (s *Store) OverrideKey(dependency string) string { return s.prefix + overridesDir + dependency }

// MemberKey returns the etcd key of a member registration.
func (s *Store) MemberKey(node string) string { return s.prefix + membersDir + node }

// AuditKey returns the etcd key of the audit entry with sequence number seq.
func (s *Store) AuditKey(seq int64) string { return s.prefix + auditDir + fmt.Sprintf("%020d", seq) }

// ctx bounds a call by s.timeout on top of the caller's context.
func (s *Store) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, s.timeout)
}

func (s *Store) now() time.Time { return s.clock.Now().UTC() }

// prefixEnd returns the range end covering every key that starts with p.
func prefixEnd(p string) string { return clientv3.GetPrefixRangeEnd(p) }
