package proxy

import (
	"cmp"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Headers the proxy reads from requests.
const (
	// HeaderDependency names the request's dependency: its upstream's own
	// name, host[:port], or the Routes name of its upstream, any name only
	// when Config.AllowAnyDependency.
	HeaderDependency = "Fusebox-Dependency"
	// HeaderUpstream names the upstream of a reverse-form request (and
	// overrides the target of a forward-form one): scheme://host[:port],
	// scheme http, https (the proxy originates TLS) or h2c.
	HeaderUpstream = "Fusebox-Upstream"
	// HeaderService names the calling service: the retry owner the proxy
	// names upstream (default Config.Service).
	HeaderService = "Fusebox-Service"
	// HeaderRetryOwner: a request that carries it is part of a call whose
	// retries its caller owns, so the proxy makes one attempt and passes
	// it on; without it the proxy retries and names the owner.
	HeaderRetryOwner = "Fusebox-Retry-Owner"
	// HeaderTimeoutMs is the caller's remaining time in milliseconds: the
	// request's deadline, passed on with what remains of it per attempt.
	HeaderTimeoutMs = "Fusebox-Timeout-Ms"
	// HeaderIdempotencyKey makes a POST or PATCH retryable.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// Headers the proxy sets on its answers.
const (
	// HeaderAttempts is the number of attempts made upstream (0 when the
	// proxy refused the request before any).
	HeaderAttempts = "Fusebox-Attempts"
	// HeaderRejected names why Fusebox refused an attempt: open,
	// forced-open, half-open-no-permit, throttled, ramp, concurrency-limit,
	// budget-exhausted (a retry); and on a connection refused at once,
	// too-many-connections or too-many-client-connections (the listener's
	// caps).
	HeaderRejected = "Fusebox-Rejected"
	// HeaderNotRetried says why a request that may be retried was given a
	// single attempt: body-too-large, buffers-full (the buffered bodies
	// held the whole budget).
	HeaderNotRetried = "Fusebox-Not-Retried"
	// HeaderProbe is "1" on the attempt that is a half-open probe (sent
	// upstream) and on the answer to a request whose first attempt was one.
	HeaderProbe = "Fusebox-Probe"
	// HeaderError names what went wrong when the proxy answers itself:
	// timeout, upstream (no answer), or what was wrong with the request
	// (malformed-uri, bad-upstream, missing-upstream, invalid-dependency,
	// dependency-not-allowed, headers-too-large, bad-timeout, bad-body,
	// upgrade-unsupported), or why it is forbidden (own-listener,
	// not-allowed).
	HeaderError = "Fusebox-Error"
	// HeaderUntracked says that the proxy forwarded the request untracked
	// (one attempt, no breaker, nothing counted): too-many-dependencies.
	HeaderUntracked = "Fusebox-Untracked"
)

// maxOwnerLen bounds Fusebox-Service and Fusebox-Retry-Owner.
const maxOwnerLen = clientlib.MaxRetryOwnerLen

// form is how a request reached the proxy.
type form uint8

const (
	formForward form = iota // absolute-form: HTTP_PROXY
	formReverse             // origin-form with Fusebox-Upstream or Fusebox-Dependency
	formConnect             // CONNECT host:port
	numForms
)

var formNames = [numForms]string{"forward", "reverse", "connect"}

func (f form) String() string { return formNames[f] }

// target is where a request goes and what it counts under.
type target struct {
	form   form
	scheme string // how to speak to the upstream: http, https, h2c
	host   string // without brackets, as given (names compared lower-case)
	port   string // always set
	// authority is the Host header upstream: host[:port] as the request
	// named it.
	authority string
	dep       string
	route     string // the dependency a route named (the default retry owner)
}

// dialAddr is host:port.
func (t *target) dialAddr() string { return net.JoinHostPort(t.host, t.port) }

// requestError is a request the proxy answers itself without counting it.
type requestError struct {
	status int
	reason string // HeaderError and the metric's label (dashes become underscores)
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(reason, msg string) *requestError {
	return &requestError{status: http.StatusBadRequest, reason: reason, msg: msg}
}

func defaultPort(scheme string) string {
	if scheme == schemeHTTPS {
		return "443"
	}
	return "80"
}

// parseTarget works out a request's upstream and dependency, and checks
// it against the allow-list and the agent's own addresses (IP hosts; names
// are checked again when dialed). It never panics (FuzzParseTarget).
func (p *Proxy) parseTarget(r *http.Request) (target, *requestError) {
	var t target
	if size := headerSize(r); size > p.cfg.MaxHeaderBytes {
		return t, &requestError{status: http.StatusRequestHeaderFieldsTooLarge, reason: "headers-too-large",
			msg: "fusebox proxy: request line and headers are " + strconv.Itoa(size) + " bytes, more than the limit of " + strconv.Itoa(p.cfg.MaxHeaderBytes)}
	}
	var authority string
	switch {
	case r.Method == http.MethodConnect:
		t.form, t.scheme = formConnect, schemeHTTP
		authority = r.Host
		if authority == "" || r.URL == nil || r.URL.Path != "" || r.URL.RawQuery != "" {
			return t, badRequest("malformed-uri", "fusebox proxy: CONNECT wants host:port as its target, got "+quote(r.RequestURI))
		}
	case r.URL != nil && r.URL.IsAbs():
		t.form = formForward
		u := r.URL
		if u.Scheme != schemeHTTP && u.Scheme != schemeHTTPS {
			return t, badRequest("malformed-uri", "fusebox proxy: absolute URI "+quote(r.RequestURI)+": scheme "+quote(u.Scheme)+", want http or https")
		}
		if u.User != nil || u.Opaque != "" || u.Host == "" {
			return t, badRequest("malformed-uri", "fusebox proxy: absolute URI "+quote(r.RequestURI)+": want http://host[:port]/path, without user information")
		}
		t.scheme, authority = u.Scheme, u.Host
	default:
		t.form, t.scheme = formReverse, ""
	}
	if r.Header.Get("Upgrade") != "" && t.form != formConnect {
		return t, &requestError{status: http.StatusNotImplemented, reason: "upgrade-unsupported",
			msg: "fusebox proxy: protocol upgrades (" + quote(r.Header.Get("Upgrade")) + ") are not proxied: use CONNECT"}
	}
	if up := r.Header.Get(HeaderUpstream); up != "" && t.form != formConnect {
		scheme, a, err := parseUpstream(up)
		if err != nil {
			return t, err
		}
		t.scheme, authority = scheme, a
	}
	depHeader := r.Header.Get(HeaderDependency)
	if depHeader != "" {
		if err := sharedstate.ValidateDependencyName(depHeader); err != nil {
			return t, badRequest("invalid-dependency", "fusebox proxy: "+HeaderDependency+": "+err.Error())
		}
	}
	if authority == "" { // reverse form without Fusebox-Upstream: the dependency's route
		rt, ok := p.rt.byDep[depHeader]
		if depHeader == "" || !ok {
			msg := "fusebox proxy: a request in origin form needs " + HeaderUpstream + ": scheme://host[:port]"
			if depHeader != "" {
				msg += " (no single route names dependency " + quote(depHeader) + ")"
			} else {
				msg += " (or " + HeaderDependency + " naming a dependency with a route); or send the request in absolute form to use the proxy as HTTP_PROXY"
			}
			return t, badRequest("missing-upstream", msg)
		}
		t.scheme = cmp.Or(rt.Scheme, schemeHTTP)
		authority = rt.authority()
	}
	host, port, err := splitAuthority(authority, "")
	if err != nil {
		return t, badRequest("malformed-uri", "fusebox proxy: upstream "+quote(authority)+": "+err.Error())
	}
	if t.form == formConnect && port == "" {
		return t, badRequest("malformed-uri", "fusebox proxy: CONNECT "+quote(authority)+": the port is missing")
	}
	t.host, t.authority = host, authority
	lower := strings.ToLower(host)
	var routed string // the dependency of the route that matches the upstream
	if rt, ok := p.rt.lookup(lower, cmp.Or(port, defaultPort(t.scheme))); ok {
		routed = rt.Dependency
		if rt.Scheme != "" && t.form != formConnect {
			t.scheme = rt.Scheme
		}
	}
	t.port = cmp.Or(port, defaultPort(t.scheme))
	// Nobody named it: the upstream's host[:port] as written, clientlib's
	// name for it, so that proxy and clientlib callers of one upstream
	// share one breaker.
	own := sharedstate.HostDependencyName(authority)
	t.dep = cmp.Or(routed, own)
	if err := p.checkUpstream(lower, t.port); err != nil {
		return t, err
	}
	if depHeader != "" && depHeader != t.dep && depHeader != own && !p.cfg.AllowAnyDependency {
		return t, badRequest("dependency-not-allowed", "fusebox proxy: "+HeaderDependency+" "+quote(depHeader)+
			": a request counts under its upstream's name ("+quote(own)+") or the --proxy-routes name of its upstream"+
			routedName(routed)+"; the agent's --proxy-allow-any-dependency lets callers name any dependency")
	}
	if depHeader != "" {
		t.dep = depHeader
	}
	if routed != "" && t.dep == routed {
		t.route = routed // the default retry owner
	}
	return t, nil
}

// routedName is ", here "+quote(dep), or "" without a route.
func routedName(dep string) string {
	if dep == "" {
		return ""
	}
	return ", here " + quote(dep)
}

// parseUpstream reads Fusebox-Upstream: scheme://host[:port] and nothing else.
func parseUpstream(v string) (scheme, authority string, _ *requestError) {
	bad := func(why string) *requestError {
		return badRequest("bad-upstream", "fusebox proxy: "+HeaderUpstream+" "+quote(v)+": "+why)
	}
	u, err := url.Parse(v)
	if err != nil {
		return "", "", bad("not a URL")
	}
	switch u.Scheme {
	case schemeHTTP, schemeHTTPS, schemeH2C:
	default:
		return "", "", bad("scheme " + quote(u.Scheme) + ": want http, https or h2c")
	}
	if u.Host == "" || u.User != nil || u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", "", bad("want scheme://host[:port] only (the path is the request's)")
	}
	return u.Scheme, u.Host, nil
}

// checkUpstream refuses hosts outside the allow-list and the agent's own
// addresses (for IP hosts; a name is checked when it is dialed).
func (p *Proxy) checkUpstream(host, port string) *requestError {
	ip, ipErr := netip.ParseAddr(host)
	if ipErr == nil {
		ip = ip.Unmap()
	}
	if len(p.allow) > 0 && !allowed(p.allow, host, ip, ipErr == nil) {
		return &requestError{status: http.StatusForbidden, reason: "not-allowed",
			msg: "fusebox proxy: upstream host " + quote(host) + " is not in the proxy's allow-list"}
	}
	var ips []netip.Addr
	switch {
	case ipErr == nil:
		ips = []netip.Addr{ip}
	case host == "localhost" || host == "localhost.":
		ips = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil
	}
	for _, ip := range ips {
		if p.guard.forbidden(netip.AddrPortFrom(ip, uint16(n))) {
			return &requestError{status: http.StatusForbidden, reason: "own-listener",
				msg: "fusebox proxy: " + net.JoinHostPort(host, port) + " is one of the agent's own listeners"}
		}
	}
	return nil
}

func allowed(rules []allowRule, host string, ip netip.Addr, isIP bool) bool {
	for _, r := range rules {
		switch {
		case r.prefix.IsValid():
			if isIP && r.prefix.Contains(ip) {
				return true
			}
		case r.suffix != "":
			if !isIP && strings.HasSuffix(host, r.suffix) {
				return true
			}
		case r.name == host || r.name == strings.TrimSuffix(host, "."):
			return true
		}
	}
	return false
}

// headerSize is the size of the request line and headers as sent (give
// or take the line ends).
func headerSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + len(r.Host) + 16
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// quote is strconv.Quote, bounded: messages name what was wrong without
// echoing kilobytes.
func quote(s string) string {
	const maxQuoted = 200
	if len(s) > maxQuoted {
		s = s[:maxQuoted] + "…"
	}
	return strconv.Quote(s)
}
