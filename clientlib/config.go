package clientlib

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

const (
	// EnvAgent names the environment variable that overrides the agent
	// address when Config.AgentAddress is empty.
	EnvAgent = "FUSEBOX_AGENT"
	// EnvService names the environment variable read when Config.Service is empty.
	EnvService = "FUSEBOX_SERVICE"
	// DefaultAgentAddress is the agent's default unix socket.
	DefaultAgentAddress = "unix:///run/fusebox/agent.sock"

	// DefaultFlushInterval is how often count deltas go to the agent.
	DefaultFlushInterval = 50 * time.Millisecond
	// DefaultAgentWait bounds every synchronous question to the agent.
	DefaultAgentWait = 50 * time.Millisecond
	// DefaultReconnectMin and DefaultReconnectMax bound the reconnect backoff.
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 5 * time.Second
	// DefaultMaxDependencies caps the dependency names one Client tracks.
	DefaultMaxDependencies = 1000

	// maxFlushInterval is the protocol's promise: deltas at least every 50 ms.
	maxFlushInterval = 50 * time.Millisecond
)

// Config configures a Client. The zero value works: every empty field takes
// the default written on it (New applies them; DefaultConfig shows them).
type Config struct {
	// AgentAddress is where the local agent listens: "unix:///path/to.sock",
	// a bare absolute socket path, or a loopback "host:port" (127.0.0.1,
	// ::1 or localhost) (optional, default $FUSEBOX_AGENT, else
	// unix:///run/fusebox/agent.sock).
	AgentAddress string
	// NoAgent runs on the local breaker and budget alone, never dialling an
	// agent (optional, default false). Meant for development and tests.
	NoAgent bool
	// Service names this service: it is sent to the agent and carried by
	// outgoing calls as Fusebox-Retry-Owner (optional, default
	// $FUSEBOX_SERVICE, else the executable's base name).
	Service string
	// Instance names this process to the agent (optional, default
	// "<hostname>-<pid>").
	Instance string
	// Dependencies lists names this service will call, announced to the agent
	// at connection so their snapshots arrive before the first call
	// (optional; any name used later is subscribed on first use).
	Dependencies []string
	// Registerer receives the client's metrics (optional, default none: no
	// metrics are registered). clientlib/README.md lists them.
	Registerer prometheus.Registerer
	// OnStateChange is called when a dependency's breaker changes as this
	// client sees it (optional). Calls come from one goroutine of the client,
	// never concurrently, in order; a slow callback delays later events only
	// (events beyond 1024 queued are dropped and counted).
	OnStateChange func(StateChange)
	// OnAgentChange is called when the connection to the agent is
	// established or lost (optional). Same calling rules as OnStateChange.
	OnAgentChange func(AgentEvent)
	// Logger receives one line per change of mode, never one per call: a
	// warning when the client falls back to local decisions (the agent is
	// unreachable, or refused a dependency name), an info line when the
	// agent is reachable again (optional, default slog.Default() as it is
	// when the line is written).
	Logger *slog.Logger
	// Random returns 64 uniformly random bits for backoff jitter; it must
	// be safe for concurrent use (optional, default math/rand/v2.Uint64).
	Random func() uint64
	// FlushInterval is how often aggregated count deltas are sent to the
	// agent and fed to the local breaker (optional, default 50ms; at most
	// 50ms, as the protocol promises the agent).
	FlushInterval time.Duration
	// AgentWait bounds how long a retry (AcquireRetry), a half-open probe
	// (AcquireProbe) or a StrictConsult call (Check) waits for the agent
	// before deciding locally (optional, default 50ms).
	AgentWait time.Duration
	// ReconnectMin and ReconnectMax bound the jittered exponential backoff
	// between attempts to reach the agent (optional, default 100ms and 5s).
	ReconnectMin, ReconnectMax time.Duration
	// MaxDependencies caps how many dependency names this client tracks
	// (optional, default 1000). Past it, calls to a new name go through
	// untracked (Dependency.Untracked): memory stays bounded, no call is
	// refused.
	MaxDependencies int
	// DialOptions are added to the agent connection's options (optional).
	// The connection is insecure by default (a local socket).
	DialOptions []grpc.DialOption
}

// DefaultConfig returns a Config with every default filled in, reading
// FUSEBOX_AGENT and FUSEBOX_SERVICE from the environment.
func DefaultConfig() Config {
	var c Config
	c.fillDefaults()
	return c
}

func (c *Config) fillDefaults() {
	c.AgentAddress = cmp.Or(c.AgentAddress, os.Getenv(EnvAgent), DefaultAgentAddress)
	c.Service = cmp.Or(c.Service, os.Getenv(EnvService))
	if c.Service == "" {
		if exe, err := os.Executable(); err == nil {
			c.Service = filepath.Base(exe)
		}
	}
	c.Service = cmp.Or(c.Service, "unknown")
	if c.Instance == "" {
		host, _ := os.Hostname()
		c.Instance = cmp.Or(host, "localhost") + "-" + strconv.Itoa(os.Getpid())
	}
	if c.Random == nil {
		c.Random = rand.Uint64
	}
	c.FlushInterval = cmp.Or(c.FlushInterval, DefaultFlushInterval)
	c.AgentWait = cmp.Or(c.AgentWait, DefaultAgentWait)
	c.ReconnectMin = cmp.Or(c.ReconnectMin, DefaultReconnectMin)
	c.ReconnectMax = cmp.Or(c.ReconnectMax, DefaultReconnectMax)
	c.MaxDependencies = cmp.Or(c.MaxDependencies, DefaultMaxDependencies)
}

// Validate reports every problem of a Config whose defaults are filled in
// (as DefaultConfig returns it), each naming the field. It changes nothing.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("clientlib config: %s: "+format, append([]any{field}, args...)...))
	}
	if _, err := agentTarget(c.AgentAddress); err != nil && !c.NoAgent {
		bad("AgentAddress", "%v", err)
	}
	if strings.TrimSpace(c.Service) == "" {
		bad("Service", "must not be empty")
	} else if !headerSafe(c.Service) {
		bad("Service", "%q must be printable ASCII without spaces (it travels in a header)", c.Service)
	}
	if strings.TrimSpace(c.Instance) == "" {
		bad("Instance", "must not be empty")
	}
	for _, d := range c.Dependencies {
		if err := sharedstate.ValidateDependencyName(d); err != nil {
			bad("Dependencies", "%v", err)
		}
	}
	if c.Random == nil {
		bad("Random", "must not be nil")
	}
	if c.FlushInterval <= 0 || c.FlushInterval > maxFlushInterval {
		bad("FlushInterval", "must be in (0, %v], got %v", maxFlushInterval, c.FlushInterval)
	}
	if c.AgentWait <= 0 {
		bad("AgentWait", "must be positive, got %v", c.AgentWait)
	}
	if c.ReconnectMin <= 0 {
		bad("ReconnectMin", "must be positive, got %v", c.ReconnectMin)
	}
	if c.ReconnectMax < c.ReconnectMin {
		bad("ReconnectMax", "must be at least ReconnectMin (%v), got %v", c.ReconnectMin, c.ReconnectMax)
	}
	if c.MaxDependencies <= 0 {
		bad("MaxDependencies", "must be positive, got %d", c.MaxDependencies)
	}
	return errors.Join(errs...)
}

// agentTarget turns an agent address into a gRPC target.
func agentTarget(addr string) (string, error) {
	switch {
	case addr == "":
		return "", errors.New("must not be empty")
	case strings.HasPrefix(addr, "unix://"):
		if !strings.HasPrefix(addr, "unix:///") {
			return "", fmt.Errorf("%q: want unix:///absolute/path", addr)
		}
		return addr, nil
	case strings.HasPrefix(addr, "/"):
		return "unix://" + addr, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q: want unix:///path, /path or a loopback host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("%q: invalid port", addr)
	}
	if host != "localhost" {
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return "", fmt.Errorf("%q: the agent must be on loopback (127.0.0.1, ::1 or localhost)", addr)
		}
	}
	return "passthrough:///" + addr, nil
}

// headerSafe reports whether s is printable ASCII without spaces: a
// header value that is one token.
func headerSafe(s string) bool { return headerValue(s) && !strings.Contains(s, " ") }

// headerValue reports whether s is printable ASCII (spaces allowed): a
// valid HTTP header and gRPC metadata value.
func headerValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
