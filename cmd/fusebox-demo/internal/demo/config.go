package demo

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Names of the demo's parts. They are fixed so that logs, the dashboard and
// the tests can refer to them.
const (
	// ShippingAPI is the demo dependency whose health cycles through the
	// phases.
	ShippingAPI = "shipping-api"
	// CatalogAPI is the second dependency: steady and healthy, the one to
	// force open from the dashboard or fuseboxctl.
	CatalogAPI = "catalog-api"
)

// Defaults of Config.
const (
	DefaultHTTPAddr      = "127.0.0.1:7070" // the coordinator's default HTTP port
	DefaultGRPCAddr      = "127.0.0.1:7960" // fuseboxctl's default --coordinator
	DefaultPhaseDuration = 15 * time.Second // a whole cycle in one minute
	DefaultRate          = 40               // shipping-api first attempts per second per service
	DefaultCallTimeout   = 3 * time.Second
	DefaultAgentWait     = 250 * time.Millisecond

	// MinPhaseDuration keeps a phase longer than the shortest policy window
	// (1s) so each phase can move a breaker.
	MinPhaseDuration = time.Second
)

// catalogRate is each service's rate of catalog-api calls per second.
const catalogRate = 10

// pollInterval is how often the transition watcher reads the agents'
// snapshots.
const pollInterval = 10 * time.Millisecond

// Config configures a demo. Start it with DefaultConfig, change what you
// need, and check it with Validate (Start does too).
type Config struct {
	// Agent, when set, is an external agent's address, in clientlib's
	// forms ("unix:///run/fusebox/agent.sock", an absolute socket path or
	// a loopback host:port): the demo then starts no etcd, coordinator or
	// agents, only its two dependencies and its three services, whose
	// clients talk to that agent (optional, default "": the whole fleet in
	// process). The agent's policies apply (those in its etcd, else its
	// defaults): Policy and AdminToken must be empty, and GRPCAddr is not
	// used. HTTPAddr then serves /healthz and /readyz (every service's
	// client connected and deciding with the agent's snapshots), and the
	// transitions are those the first service's client sees.
	Agent string
	// HTTPAddr is the coordinator's HTTP address: dashboard, /api/v1,
	// /metrics (optional, default 127.0.0.1:7070; port 0 picks a free port,
	// Demo.HTTPAddr reports it). With Agent, the demo's own /healthz and
	// /readyz.
	HTTPAddr string
	// GRPCAddr is the coordinator's Admin API address, the one fuseboxctl
	// talks to (optional, default 127.0.0.1:7960, fuseboxctl's default;
	// port 0 allowed).
	GRPCAddr string
	// PhaseDuration is the length of each of the four phases of
	// shipping-api's cycle: healthy, failing, slow, recovering (optional,
	// default 15s, at least 1s).
	PhaseDuration time.Duration
	// Duration stops the traffic after this long and closes Done (optional,
	// default 0: run until Close).
	Duration time.Duration
	// DataDir holds the embedded etcd's data, the agents' policy caches and
	// the coordinator's tokens file (optional, default: a temporary
	// directory that Close removes; a given directory is kept).
	DataDir string
	// AdminToken is the bearer token of the coordinator's one admin
	// identity, "demo-admin" (optional, default: a random token, which
	// the banner prints).
	AdminToken string
	// Policy is the fleet default policy written to etcd before the agents
	// start (optional, default DemoPolicy(PhaseDuration)).
	Policy *sharedstate.Policy
	// Rate is each service's rate of shipping-api calls per second
	// (optional, default 40; 3 services).
	Rate int
	// Headless replaces the banner Start prints (dashboard URL, token,
	// fuseboxctl commands, policy) with one line of addresses, for scripted
	// runs (optional, default false).
	Headless bool
	// Fuseboxctl is how the banner's command lines run fuseboxctl, a
	// path or a command name (optional, default "fuseboxctl", from PATH).
	Fuseboxctl string
	// Out receives the demo's own lines: banner, phases, transitions,
	// summary (optional, default io.Discard).
	Out io.Writer
	// Logger receives the logs of the coordinator and the agents (optional,
	// default: discarded). The embedded etcd logs only fatal errors.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	return Config{
		HTTPAddr:      DefaultHTTPAddr,
		GRPCAddr:      DefaultGRPCAddr,
		PhaseDuration: DefaultPhaseDuration,
		Rate:          DefaultRate,
	}
}

// withDefaults fills the zero-valued optional fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.HTTPAddr = cmp.Or(c.HTTPAddr, d.HTTPAddr)
	c.GRPCAddr = cmp.Or(c.GRPCAddr, d.GRPCAddr)
	c.PhaseDuration = cmp.Or(c.PhaseDuration, d.PhaseDuration)
	c.Rate = cmp.Or(c.Rate, d.Rate)
	c.Fuseboxctl = cmp.Or(c.Fuseboxctl, "fuseboxctl")
	c.Out = cmp.Or(c.Out, io.Discard)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

// Validate reports every problem of the configuration at once, each naming
// the flag. It has no side effects; zero-valued optional fields are valid.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("demo config: %s: "+format, append([]any{field}, args...)...))
	}
	for _, f := range [][2]string{{"http-addr", c.HTTPAddr}, {"grpc-addr", c.GRPCAddr}} {
		if _, _, err := net.SplitHostPort(f[1]); err != nil {
			bad(f[0], "must be host:port, got %q", f[1])
		}
	}
	if c.PhaseDuration < MinPhaseDuration {
		bad("phase-duration", "must be at least %v, got %v", MinPhaseDuration, c.PhaseDuration)
	}
	if c.Duration < 0 {
		bad("duration", "must not be negative, got %v", c.Duration)
	}
	if c.Rate < 1 || c.Rate > 1000 {
		bad("rate", "must be between 1 and 1000 calls per second, got %d", c.Rate)
	}
	if strings.ContainsAny(c.AdminToken, " \t\r\n") {
		bad("admin-token", "must not contain blanks")
	}
	if c.Policy != nil {
		if err := c.Policy.Validate(); err != nil {
			bad("policy", "%v", err)
		}
	}
	if c.Agent != "" {
		cc := clientlib.DefaultConfig()
		cc.AgentAddress, cc.Service = c.Agent, serviceNames[0]
		if err := cc.Validate(); err != nil {
			bad("agent", "%q: %v", c.Agent, err)
		}
		if c.Policy != nil {
			bad("policy", "must be empty with an external agent: its own policies apply")
		}
		if c.AdminToken != "" {
			bad("admin-token", "must be empty with an external agent: the demo runs no coordinator")
		}
	}
	return errors.Join(errs...)
}

// DemoPolicy is the fleet default the demo writes to etcd: thresholds that
// react within a phase of the given length. For the default 15s phases:
// a 5s window, 20 requests, 50% failures or 80% calls slower than 200ms
// from 2 nodes trip it; it stays open 2s, and 2s again after each failed
// (or slow) probe; 2 probes fleet-wide, 3 fast successes close it, and the
// traffic comes back over the default 500ms ramp; 3 attempts of 600ms,
// retries at most 10% of first attempts (plus 5 per second fleet-wide).
// Shorter phases scale the window and open durations down.
func DemoPolicy(phase time.Duration) sharedstate.Policy {
	clamp := func(d, lo, hi time.Duration) sharedstate.Duration {
		return sharedstate.Duration(min(max(d, lo), hi))
	}
	p := sharedstate.DefaultPolicy()
	b := &p.Breaker
	b.Window = clamp(phase/3, time.Second, 5*time.Second)
	b.MinimumRequests = 20
	b.FailureRateThreshold = 0.5
	b.SlowCallRateThreshold = 0.8
	b.SlowCallDuration = sharedstate.Duration(200 * time.Millisecond)
	b.MinFailingNodes = 2
	b.OpenDuration = clamp(phase*2/15, 500*time.Millisecond, 2*time.Second)
	b.MaxOpenDuration = clamp(phase/2, time.Second, 8*time.Second)
	b.FleetMaxOpenDuration = b.OpenDuration // probe at the same pace while it fails
	b.HalfOpenProbes = 2                    // fewer than the 3 agents, so the fleet-wide limit shows
	b.ProbeSuccessThreshold = 3
	b.ProbeTimeout = sharedstate.Duration(2 * time.Second)
	b.Scope = sharedstate.ScopeFleet
	b.Mode = sharedstate.ModeEnforce
	r := &p.Retry
	r.MaxAttempts = 3
	r.PerAttemptTimeout = sharedstate.Duration(600 * time.Millisecond)
	r.Backoff = sharedstate.BackoffPolicy{
		Base:   sharedstate.Duration(50 * time.Millisecond),
		Max:    sharedstate.Duration(400 * time.Millisecond),
		Jitter: sharedstate.JitterFull,
	}
	r.Budget = sharedstate.BudgetPolicy{Ratio: 0.1, MinRetriesPerSecond: 5}
	return p
}
