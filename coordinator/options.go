package coordinator

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// Option sets an optional knob of New. A coordinator needs none.
type Option func(*options)

type options struct {
	logger       *slog.Logger
	registry     *prometheus.Registry
	clock        sharedstate.Clock
	embedded     []func(*embedded.Config)
	gossip       []func(*gossip.Config)
	tickInterval time.Duration
	tokensPoll   time.Duration
	httpTimeouts *HTTPTimeouts
	auditTrim    time.Duration
}

// WithLogger sets the logger (default: a text or JSON logger on stderr as
// Config.LogFormat and LogLevel say).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegistry sets the registry the coordinator registers its metrics on
// and serves at /metrics (default: a new registry of its own, with the Go
// runtime's and the process's standard series, so that two coordinators in
// one process never share counters).
func WithRegistry(r *prometheus.Registry) Option { return func(o *options) { o.registry = r } }

// WithClock sets the clock of the fleet view and the etcd store (default
// the system clock).
func WithClock(c sharedstate.Clock) Option { return func(o *options) { o.clock = c } }

// WithEmbeddedEtcd adjusts the embedded etcd's configuration before it
// starts (tests use embedded.TestConfig's fast elections and silent log).
// It has no effect with Config.Etcd set.
func WithEmbeddedEtcd(f func(*embedded.Config)) Option {
	return func(o *options) { o.embedded = append(o.embedded, f) }
}

// WithGossip adjusts the fleet observer's gossip configuration before it
// starts (tests shorten the intervals). Name, Meta, Handler and Events are
// the coordinator's and are restored after f runs.
func WithGossip(f func(*gossip.Config)) Option {
	return func(o *options) { o.gossip = append(o.gossip, f) }
}

// WithTickInterval sets how often the fleet view expires rows and derives
// half-open states, and the history drops what left its horizons (default
// 1s).
func WithTickInterval(tick time.Duration) Option {
	return func(o *options) { o.tickInterval = tick }
}

// WithTokensPoll sets how often the tokens file is checked for a change
// (default 2s).
func WithTokensPoll(d time.Duration) Option { return func(o *options) { o.tokensPoll = d } }

// WithAuditTrimInterval sets how often the elected coordinator trims the
// audit trail (default 10m).
func WithAuditTrimInterval(d time.Duration) Option { return func(o *options) { o.auditTrim = d } }
