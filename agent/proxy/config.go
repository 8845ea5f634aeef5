package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
)

// Defaults of Config.
const (
	DefaultService           = "fusebox-proxy"
	DefaultMaxConns          = 1024
	DefaultMaxConnsPerClient = 256
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxBodyBuffer     = 1 << 20
	DefaultBodyBufferBudget  = 16 << 20
	DefaultBodyTimeout       = 30 * time.Second
	DefaultMaxDependencies   = sharedstate.DefaultMaxDependencies
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultShutdownTimeout   = 5 * time.Second
	DefaultFlushInterval     = 50 * time.Millisecond
	DefaultIdleDependencyTTL = time.Minute
)

// Config configures a Proxy. Build it with DefaultConfig; Validate checks
// it without side effects.
type Config struct {
	// Addr is the listen address, host:port; port 0 picks a free port
	// (required unless Listener). It must be loopback unless
	// AllowNonLoopback.
	Addr string
	// Listener, when set, is served instead of a socket bound to Addr: a
	// listening socket the proxy was handed (systemd's socket activation,
	// a predecessor). Its address must be loopback unless
	// AllowNonLoopback. The proxy closes it on Close; a copy of the socket
	// held elsewhere keeps it listening (optional).
	Listener net.Listener
	// AllowNonLoopback lets Addr be any address (optional, default false:
	// the proxy has no authentication, so whoever reaches it makes this
	// host call the upstreams AllowHosts admits).
	AllowNonLoopback bool
	// Engine decides and counts every request (required).
	Engine Engine
	// Own lists the addresses of the agent's other listeners (gRPC, HTTP,
	// gossip, advertised), host:port: the proxy never connects to them,
	// whatever name resolves to them (optional). Its own address is added.
	// A host 0.0.0.0, :: or "" stands for every address of this host.
	Own []string
	// AllowHosts, when not empty, are the only upstream hosts: names
	// (case-insensitive), "*.example.com" (any name under example.com),
	// IPs and CIDR prefixes (which match IP hosts) (optional, default: any
	// host but the agent's own listeners).
	AllowHosts []string
	// AllowAnyDependency lets Fusebox-Dependency name any dependency
	// (optional, default false: a request counts under its upstream's
	// own name, host[:port], or the Routes name of its upstream, and a
	// Fusebox-Dependency naming anything else is answered 400
	// dependency-not-allowed; with it, any local caller can speak for any
	// dependency).
	AllowAnyDependency bool
	// Confirm is told a dependency's name each time the proxy holds a
	// connection to that request's upstream: a dial that succeeded, a kept-alive
	// connection taken for it (optional). The agent gossips only what real
	// traffic confirmed. It must be safe for concurrent use and must not
	// block.
	Confirm func(dep string)
	// Routes name dependencies and how to reach them, each
	// "[SCHEME://]HOST[:PORT]=DEPENDENCY" (optional): requests to HOST (on
	// PORT, when given) belong to DEPENDENCY instead of the one named after
	// their host; SCHEME https makes the proxy speak TLS to the upstream
	// (default port 443) although the request came as plain HTTP, h2c makes
	// it speak HTTP/2 without TLS. A dependency named by exactly one route
	// can be reached in the reverse form by its name alone.
	Routes []string
	// Service is the retry owner the proxy names upstream for requests
	// that name no service in Fusebox-Service and no dependency with a
	// route (optional, default "fusebox-proxy").
	Service string
	// MaxConns caps the client connections open at once; one more is
	// answered 503 too-many-connections and closed (optional, default
	// 1024).
	MaxConns int
	// MaxConnsPerClient caps the connections open at once from one client
	// address, so that one caller cannot take them all; one more is
	// answered 503 too-many-client-connections and closed (optional,
	// default 256).
	MaxConnsPerClient int
	// MaxHeaderBytes caps a request's line and headers; larger is answered
	// 431 (optional, default 64 KiB).
	MaxHeaderBytes int
	// MaxBodyBuffer is the largest request body kept for retries; a larger
	// one is streamed to a single attempt (optional, default 1 MiB; 0 never
	// buffers, so requests with a body are never retried). A body's buffer
	// grows as its bytes arrive, whatever its Content-Length announces.
	MaxBodyBuffer int64
	// BodyBufferBudget caps the bytes all buffered request bodies hold
	// together; a body that finds it spent is streamed to a single attempt
	// (Fusebox-Not-Retried: buffers-full), never refused (optional,
	// default 16 MiB).
	BodyBufferBudget int64
	// BodyTimeout bounds the arrival of a request's whole body, counted
	// from the end of its headers: a client that has not sent it by then
	// is cut off, its connection closed without an answer (optional,
	// default 30s).
	BodyTimeout time.Duration
	// MaxDependencies caps the dependencies the proxy tracks at once; a
	// request naming one more is forwarded untracked, said in
	// Fusebox-Untracked (optional, default 10000).
	MaxDependencies int
	// TLS configures the connections the proxy originates TLS on (optional,
	// default: the system's roots; CAFile replaces them).
	TLS *tls.Config
	// CAFile is a PEM bundle of the CAs that sign upstreams' certificates,
	// replacing the system's (optional).
	CAFile string
	// ReadHeaderTimeout, IdleTimeout bound a client connection's request
	// headers and its idle time between requests (optional, defaults 10s,
	// 2m).
	ReadHeaderTimeout, IdleTimeout time.Duration
	// ShutdownTimeout bounds Close's drain: half of it for callers to send
	// their next request on a kept-alive connection (answered, then the
	// connection closed), the rest for requests in flight (optional,
	// default 5s).
	ShutdownTimeout time.Duration
	// FlushInterval is how often the proxy's client hands its counts and
	// in-flight calls to the engine (at most 50ms, clientlib's bound) and
	// the table looks for idle dependencies (optional, default 50ms).
	FlushInterval time.Duration
	// IdleDependencyTTL is how long a dependency without requests stays in
	// the proxy's table (optional, default 1m).
	IdleDependencyTTL time.Duration
	// Registerer receives the proxy's metrics (optional).
	Registerer prometheus.Registerer
	// Logger (optional, default slog.Default()).
	Logger *slog.Logger
	// Random is the source of backoff jitter (optional, default
	// math/rand/v2); tests make it 0 for no wait.
	Random func() uint64
}

// DefaultConfig returns the defaults documented on each field; Addr and
// Engine are left for the caller.
func DefaultConfig() Config {
	return Config{
		Service: DefaultService, MaxConns: DefaultMaxConns, MaxConnsPerClient: DefaultMaxConnsPerClient,
		MaxHeaderBytes: DefaultMaxHeaderBytes, MaxBodyBuffer: DefaultMaxBodyBuffer, BodyBufferBudget: DefaultBodyBufferBudget,
		BodyTimeout: DefaultBodyTimeout, MaxDependencies: DefaultMaxDependencies,
		ReadHeaderTimeout: DefaultReadHeaderTimeout, IdleTimeout: DefaultIdleTimeout,
		ShutdownTimeout: DefaultShutdownTimeout, FlushInterval: DefaultFlushInterval,
		IdleDependencyTTL: DefaultIdleDependencyTTL,
	}
}

// Validate reports every problem of c at once, each naming its field. It
// changes nothing and reads no file.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("proxy config: %s: "+format, append([]any{field}, args...)...))
	}
	field, addr := "Addr", c.Addr
	if c.Listener != nil {
		field, addr = "Listener", c.Listener.Addr().String()
	}
	switch {
	case c.Listener == nil && !validHostPort(addr):
		bad(field, "must be host:port, got %q", addr)
	case !c.AllowNonLoopback && !cliflag.IsLoopback(addr):
		bad(field, "%s is not loopback: the proxy has no authentication; allow it explicitly (AllowNonLoopback)", addr)
	}
	if c.Engine == nil {
		bad("Engine", "must be set")
	}
	for _, o := range c.Own {
		if !validHostPort(o) {
			bad("Own", "must be host:port, got %q", o)
		}
	}
	for _, h := range c.AllowHosts {
		if _, err := ParseAllowHost(h); err != nil {
			bad("AllowHosts", "%v", err)
		}
	}
	if _, err := newRouter(c.Routes); err != nil {
		bad("Routes", "%v", err)
	}
	if !clientlib.ValidRetryOwner(c.Service) {
		bad("Service", "must be 1-%d printable ASCII characters, got %q", maxOwnerLen, c.Service)
	}
	positive := func(field string, v int64) {
		if v <= 0 {
			bad(field, "must be > 0, got %d", v)
		}
	}
	positive("MaxConns", int64(c.MaxConns))
	positive("MaxConnsPerClient", int64(c.MaxConnsPerClient))
	positive("MaxHeaderBytes", int64(c.MaxHeaderBytes))
	positive("MaxDependencies", int64(c.MaxDependencies))
	if c.MaxBodyBuffer < 0 {
		bad("MaxBodyBuffer", "must be >= 0, got %d", c.MaxBodyBuffer)
	}
	if c.BodyBufferBudget < 0 {
		bad("BodyBufferBudget", "must be >= 0, got %d", c.BodyBufferBudget)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"ReadHeaderTimeout", c.ReadHeaderTimeout}, {"BodyTimeout", c.BodyTimeout}, {"IdleTimeout", c.IdleTimeout}, {"ShutdownTimeout", c.ShutdownTimeout},
		{"FlushInterval", c.FlushInterval}, {"IdleDependencyTTL", c.IdleDependencyTTL}} {
		if d.v < time.Millisecond {
			bad(d.field, "must be at least 1ms, got %v", d.v)
		}
	}
	return errors.Join(errs...)
}

// Schemes a route or a Fusebox-Upstream may name.
const (
	schemeHTTP  = "http"
	schemeHTTPS = "https"
	schemeH2C   = "h2c"
)

// Route is one parsed entry of Config.Routes.
type Route struct {
	// Scheme is how the proxy speaks to the upstream: "" (as the request
	// says), "https" (TLS, default port 443) or "h2c".
	Scheme string
	// Host is lower-case; Port is "" for any port.
	Host, Port string
	// Dependency is the name requests to Host[:Port] count under.
	Dependency string
}

// ParseRoute parses "[SCHEME://]HOST[:PORT]=DEPENDENCY".
func ParseRoute(s string) (Route, error) {
	key, dep, ok := strings.Cut(s, "=")
	if !ok {
		return Route{}, fmt.Errorf("route %q: want [SCHEME://]HOST[:PORT]=DEPENDENCY", s)
	}
	var r Route
	if sch, rest, ok := strings.Cut(key, "://"); ok {
		switch sch = strings.ToLower(sch); sch {
		case schemeHTTP:
		case schemeHTTPS, schemeH2C:
			r.Scheme = sch
		default:
			return Route{}, fmt.Errorf("route %q: scheme %q: want http, https or h2c", s, sch)
		}
		key = rest
	}
	host, port, err := splitAuthority(key, "")
	if err != nil {
		return Route{}, fmt.Errorf("route %q: %v", s, err)
	}
	if err := sharedstate.ValidateDependencyName(dep); err != nil {
		return Route{}, fmt.Errorf("route %q: %w", s, err)
	}
	r.Host, r.Port, r.Dependency = strings.ToLower(host), port, dep
	return r, nil
}

// authority is Host[:Port], as a request names it.
func (r Route) authority() string {
	if r.Port == "" {
		return r.Host
	}
	return net.JoinHostPort(r.Host, r.Port)
}

// router looks routes up by host and port.
type router struct {
	byAuthority map[string]Route // "host:port" and "host"
	byDep       map[string]Route // dependencies named by exactly one route with a known port
}

func newRouter(entries []string) (*router, error) {
	rt := &router{byAuthority: map[string]Route{}, byDep: map[string]Route{}}
	count := map[string]int{}
	var errs []error
	for _, e := range entries {
		r, err := ParseRoute(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		key := r.authority()
		if old, dup := rt.byAuthority[key]; dup && old != r {
			errs = append(errs, fmt.Errorf("route %q: %s is routed twice", e, key))
			continue
		}
		rt.byAuthority[key] = r
		count[r.Dependency]++
		rt.byDep[r.Dependency] = r
	}
	for dep, n := range count {
		if n > 1 {
			delete(rt.byDep, dep)
		}
	}
	return rt, errors.Join(errs...)
}

// lookup finds the route of host[:port] (host lower-case).
func (rt *router) lookup(host, port string) (Route, bool) {
	if len(rt.byAuthority) == 0 {
		return Route{}, false
	}
	if r, ok := rt.byAuthority[net.JoinHostPort(host, port)]; ok {
		return r, true
	}
	r, ok := rt.byAuthority[host]
	return r, ok
}

// allowRule is one parsed entry of Config.AllowHosts.
type allowRule struct {
	name   string // exact name
	suffix string // ".example.com" for "*.example.com"
	prefix netip.Prefix
}

// ParseAllowHost checks one entry of Config.AllowHosts: a host name,
// "*.example.com", an IP or a CIDR prefix.
func ParseAllowHost(s string) (allowRule, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case strings.Contains(s, "/"):
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return allowRule{}, fmt.Errorf("allowed host %q: not a CIDR prefix: %v", s, err)
		}
		return allowRule{prefix: p.Masked()}, nil
	case strings.HasPrefix(s, "*."):
		if !validHostName(s[2:]) {
			return allowRule{}, fmt.Errorf("allowed host %q: %q is not a host name", s, s[2:])
		}
		return allowRule{suffix: s[1:]}, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return allowRule{prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())}, nil
	}
	if !validHostName(s) {
		return allowRule{}, fmt.Errorf("allowed host %q: not a host name, *.name, IP or CIDR prefix", s)
	}
	return allowRule{name: s}, nil
}

// splitAuthority splits host[:port] (IPv6 in brackets) and checks both:
// a host name or IP, a port 1-65535 (defPort when absent). The host comes
// back without brackets.
func splitAuthority(a, defPort string) (host, port string, err error) {
	if a == "" {
		return "", "", errors.New("empty host")
	}
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", "", fmt.Errorf("host %q: malformed IPv6 literal", a)
		}
		host = a[1:end]
		switch rest := a[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			if port = rest[1:]; port == "" {
				return "", "", fmt.Errorf("host %q: empty port", a)
			}
		default:
			return "", "", fmt.Errorf("host %q: malformed IPv6 literal", a)
		}
		if ip, err := netip.ParseAddr(host); err != nil || !ip.Is6() || ip.Zone() != "" {
			return "", "", fmt.Errorf("host %q: malformed IPv6 literal", a)
		}
	} else {
		if strings.Count(a, ":") > 1 {
			return "", "", fmt.Errorf("host %q: an IPv6 address goes in brackets", a)
		}
		var hasPort bool
		if host, port, hasPort = strings.Cut(a, ":"); hasPort && port == "" {
			return "", "", fmt.Errorf("host %q: empty port", a)
		}
		if _, err := netip.ParseAddr(host); err != nil && !validHostName(host) {
			return "", "", fmt.Errorf("host %q: not a host name or IP address", host)
		}
	}
	if port == "" {
		return host, defPort, nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] < '1' || port[0] > '9' {
		return "", "", fmt.Errorf("host %q: port %q: want 1-65535", a, port)
	}
	return host, port, nil
}

// validHostName: 1-253 bytes of letters, digits, '-', '_' and '.', in
// labels of at most 63 bytes.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	label := 0
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
			continue
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
		if label++; label > 63 {
			return false
		}
	}
	return label > 0 || len(h) > 1 // a trailing dot is fine, a lone "." is not
}

// validHostPort: host:port, as net.SplitHostPort reads it.
func validHostPort(s string) bool {
	_, _, err := net.SplitHostPort(s)
	return err == nil
}

// ValidateRoutes checks Config.Routes: every entry parses and no
// authority is routed twice.
func ValidateRoutes(entries []string) error {
	_, err := newRouter(entries)
	return err
}
