package embedded

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config configures an embedded etcd server. Build one with DefaultConfig or
// TestConfig, change what you need, and pass it to Start.
type Config struct {
	// Dir is the data directory (required). It is created when missing; a
	// directory that already holds an etcd member is reopened with its data.
	Dir string

	// Name is the member name (optional, default "fusebox").
	Name string

	// ClientURL is where clients connect (optional, default
	// "http://127.0.0.1:0"). Port 0 makes the kernel pick a free port at the
	// first Start; Endpoints reports the real one and Restart reuses it.
	// "unix:///path/to/sock" listens on a unix socket.
	ClientURL string

	// PeerURL is the raft peer listener (optional, default
	// "http://127.0.0.1:0"). A single-member cluster never dials it, so port 0
	// is the right choice unless you grow the cluster by hand.
	PeerURL string

	// ClusterToken is etcd's initial cluster token (optional, default
	// DefaultClusterToken), read only when the data directory is created:
	// the member and cluster IDs derive from it and from PeerURL (not
	// from Name), so two embedded etcds with the same token and peer URL
	// have the same cluster ID.
	ClusterToken string

	// TickMs is the raft heartbeat interval in milliseconds (optional,
	// default 100; tests use 10).
	TickMs uint

	// ElectionMs is the election timeout in milliseconds (optional, default
	// 1000; tests use 100). Must be at least 5×TickMs.
	ElectionMs uint

	// LogLevel is the level of etcd's own log, written to stderr (optional,
	// default "error"). One of debug, info, warn, error, dpanic, panic,
	// fatal. "fatal" silences etcd, which logs stack traces at error level
	// on a normal Close. Ignored when Logger is set.
	LogLevel string

	// Logger receives etcd's log instead of stderr (optional, default: a
	// stderr logger at LogLevel). Server.ClientConfig hands it to clients too.
	Logger *zap.Logger

	// StartTimeout bounds how long Start and Restart wait for the server to
	// be ready (optional, default 30s). The context passed to Start bounds it
	// too; whichever ends first wins.
	StartTimeout time.Duration

	// UnsafeNoFsync skips fsync (optional, default false). Data survives a
	// Stop/Restart in the same process but not a machine crash: for tests
	// only.
	UnsafeNoFsync bool

	// TLS, when CertFile is set, serves clients over TLS and requires a
	// client certificate signed by ClientCAFile: ClientURL must then be
	// https. The key file is a secret file (mode 0600 or stricter). The
	// certificate must be valid for ClientURL's host and usable for client
	// authentication too: ClientConfig presents it, and trusts
	// ClientCAFile for the server's certificate (one CA signs both).
	TLS TLSFiles

	// AutoCompactionMode is "periodic" (keep AutoCompactionRetention of
	// history, a duration such as "1h") or "revision" (keep the last
	// AutoCompactionRetention revisions, a number) (optional, default
	// periodic, 1h).
	AutoCompactionMode      string
	AutoCompactionRetention string

	// QuotaBackendBytes is the size the backend database may reach before
	// etcd refuses writes with "mvcc: database space exceeded" (optional,
	// default DefaultQuotaBackendBytes).
	QuotaBackendBytes int64

	// MaxTxnOps is the most operations one transaction may hold (optional,
	// default etcd's 128). Tests that seed large data sets raise it.
	MaxTxnOps uint
}

// TLSFiles are the PEM files of the embedded etcd's client TLS.
type TLSFiles struct {
	CertFile, KeyFile, ClientCAFile string
}

// Enabled reports whether any file is set.
func (t TLSFiles) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.ClientCAFile != "" }

// Defaults for Config fields left at their zero value.
const (
	DefaultName         = "fusebox"
	DefaultClientURL    = "http://127.0.0.1:0"
	DefaultPeerURL      = "http://127.0.0.1:0"
	DefaultClusterToken = "etcd-cluster" // etcd's own default
	DefaultTickMs       = 100
	DefaultElectionMs   = 1000
	DefaultLogLevel     = "error"
	DefaultStartTimeout = 30 * time.Second
	// DefaultAutoCompactionMode and DefaultAutoCompactionRetention keep an
	// hour of history: watchers that fall further behind re-list.
	DefaultAutoCompactionMode      = "periodic"
	DefaultAutoCompactionRetention = "1h"
	// DefaultQuotaBackendBytes is 1 GiB: far above what policies, overrides,
	// members and a trimmed audit trail need.
	DefaultQuotaBackendBytes = 1 << 30
	// MaxQuotaBackendBytes is etcd's own recommended maximum, 8 GiB.
	MaxQuotaBackendBytes = 8 << 30
)

// DefaultConfig returns the production presets with Dir unset: fill in Dir
// (and usually ClientURL) before calling Start.
func DefaultConfig() Config {
	return Config{
		Name:         DefaultName,
		ClientURL:    DefaultClientURL,
		PeerURL:      DefaultPeerURL,
		ClusterToken: DefaultClusterToken,
		TickMs:       DefaultTickMs,
		ElectionMs:   DefaultElectionMs,
		LogLevel:     DefaultLogLevel,
		StartTimeout: DefaultStartTimeout,

		AutoCompactionMode:      DefaultAutoCompactionMode,
		AutoCompactionRetention: DefaultAutoCompactionRetention,
		QuotaBackendBytes:       DefaultQuotaBackendBytes,
	}
}

// TestConfig returns presets for tests in dir: fast elections (TickMs 10,
// ElectionMs 100), a silent log, no fsync, free ports.
func TestConfig(dir string) Config {
	cfg := DefaultConfig()
	cfg.Dir = dir
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	cfg.LogLevel = "fatal"
	cfg.StartTimeout = 20 * time.Second
	cfg.UnsafeNoFsync = true
	return cfg
}

// withDefaults fills the zero-valued optional fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Name = cmp.Or(c.Name, d.Name)
	c.ClientURL = cmp.Or(c.ClientURL, d.ClientURL)
	c.PeerURL = cmp.Or(c.PeerURL, d.PeerURL)
	c.ClusterToken = cmp.Or(c.ClusterToken, d.ClusterToken)
	c.TickMs = cmp.Or(c.TickMs, d.TickMs)
	c.ElectionMs = cmp.Or(c.ElectionMs, d.ElectionMs)
	c.LogLevel = cmp.Or(c.LogLevel, d.LogLevel)
	c.StartTimeout = cmp.Or(c.StartTimeout, d.StartTimeout)
	if c.AutoCompactionMode == "" {
		// The default retention goes with the default mode only.
		c.AutoCompactionMode = d.AutoCompactionMode
		c.AutoCompactionRetention = cmp.Or(c.AutoCompactionRetention, d.AutoCompactionRetention)
	}
	c.QuotaBackendBytes = cmp.Or(c.QuotaBackendBytes, d.QuotaBackendBytes)
	return c
}

// Validate reports every problem with c at once, without side effects.
// Zero-valued optional fields are valid (they take their defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if strings.TrimSpace(c.Dir) == "" {
		errs = append(errs, errors.New("required field Dir is empty"))
	}
	if err := checkURL("ClientURL", c.ClientURL, true, c.TLS.Enabled()); err != nil {
		errs = append(errs, err)
	}
	if c.TLS.Enabled() && (c.TLS.CertFile == "" || c.TLS.KeyFile == "" || c.TLS.ClientCAFile == "") {
		errs = append(errs, fmt.Errorf("TLS: CertFile, KeyFile and ClientCAFile go together, got cert %q key %q client CA %q",
			c.TLS.CertFile, c.TLS.KeyFile, c.TLS.ClientCAFile))
	}
	errs = append(errs, c.compactionErrors()...)
	if c.QuotaBackendBytes < 0 || c.QuotaBackendBytes > MaxQuotaBackendBytes {
		errs = append(errs, fmt.Errorf("QuotaBackendBytes (%d) must be between 1 and %d", c.QuotaBackendBytes, int64(MaxQuotaBackendBytes)))
	}
	if err := checkURL("PeerURL", c.PeerURL, false, false); err != nil {
		errs = append(errs, err)
	}
	if c.ElectionMs < 5*c.TickMs {
		errs = append(errs, fmt.Errorf("ElectionMs (%d) must be at least 5×TickMs (%d)", c.ElectionMs, c.TickMs))
	}
	if c.ElectionMs > 50000 {
		errs = append(errs, fmt.Errorf("ElectionMs (%d) must be at most 50000", c.ElectionMs))
	}
	if c.Logger == nil {
		if _, err := zapcore.ParseLevel(c.LogLevel); err != nil {
			errs = append(errs, fmt.Errorf("LogLevel %q: want debug, info, warn, error, dpanic, panic or fatal", c.LogLevel))
		}
	}
	if c.StartTimeout < 0 {
		errs = append(errs, fmt.Errorf("StartTimeout (%v) must not be negative", c.StartTimeout))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("embedded: invalid config: %w", errors.Join(errs...))
}

// checkURL checks a listen URL: http with an IP (or localhost) and a port, or
// (for clients) a unix socket path.
func checkURL(field, raw string, unixOK, tls bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s %q: %w", field, raw, err)
	}
	switch u.Scheme {
	case "http":
		if tls {
			return fmt.Errorf("%s %q: scheme must be https with TLS", field, raw)
		}
	case "https":
		if !tls {
			return fmt.Errorf("%s %q: https needs TLS files", field, raw)
		}
	case "unix":
		if !unixOK {
			return fmt.Errorf("%s %q: scheme must be http", field, raw)
		}
		if u.Host+u.Path == "" {
			return fmt.Errorf("%s %q: missing socket path", field, raw)
		}
		return nil
	default:
		return fmt.Errorf("%s %q: scheme must be http or unix", field, raw)
	}
	if u.Port() == "" {
		return fmt.Errorf("%s %q: missing port (use 0 for a free one)", field, raw)
	}
	if h := u.Hostname(); h != "localhost" && net.ParseIP(h) == nil {
		return fmt.Errorf("%s %q: host must be an IP address or localhost", field, raw)
	}
	if u.Path != "" && u.Path != "/" {
		return fmt.Errorf("%s %q: unexpected path", field, raw)
	}
	return nil
}

// compactionErrors checks AutoCompactionMode and AutoCompactionRetention
// (after withDefaults).
func (c Config) compactionErrors() []error {
	switch c.AutoCompactionMode {
	case "periodic":
		d, err := time.ParseDuration(c.AutoCompactionRetention)
		if err != nil || d <= 0 {
			return []error{fmt.Errorf("AutoCompactionRetention %q: periodic compaction wants a positive duration such as \"1h\"", c.AutoCompactionRetention)}
		}
	case "revision":
		n, err := strconv.ParseInt(c.AutoCompactionRetention, 10, 64)
		if err != nil || n <= 0 {
			return []error{fmt.Errorf("AutoCompactionRetention %q: revision compaction wants a positive number of revisions", c.AutoCompactionRetention)}
		}
	default:
		return []error{fmt.Errorf("AutoCompactionMode %q: want periodic or revision", c.AutoCompactionMode)}
	}
	return nil
}
