package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/coordinator/internal/auth"
	"github.com/fusebox-dev/fusebox/coordinator/internal/dashboard"
	"github.com/fusebox-dev/fusebox/coordinator/internal/events"
	"github.com/fusebox-dev/fusebox/coordinator/internal/fleet"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// sseKeepAlive is the interval of comment lines on an idle event stream,
// so proxies and clients see the connection alive.
const sseKeepAlive = 15 * time.Second

// route is one HTTP endpoint and who may call it.
type route struct {
	pattern string // http.ServeMux pattern, method first
	name    string // the handler label of the request metric
	// role is what the caller needs (see authorized); RoleNone only with
	// open set, for what holds no data: /metrics, /healthz, the page.
	role auth.Role
	open bool
	// readOnly marks a POST that writes nothing (its request is a
	// document too large for a URL): it may need role viewer.
	readOnly bool
	handler  http.Handler
}

// routes is every HTTP endpoint with its role: reads need viewer, writes
// admin. TestEveryRouteHasARole walks it: no /api/v1 route is open, every
// route that is not a GET needs admin, and a viewer is refused each write.
func (c *Coordinator) routes() []route {
	ui := dashboard.New()
	metrics := promhttp.HandlerFor(c.reg, promhttp.HandlerOpts{})
	return []route{
		{pattern: "GET /api/v1/fleet", name: "fleet", role: auth.RoleViewer, handler: http.HandlerFunc(c.handleFleet)},
		{pattern: "GET /api/v1/events", name: "events", role: auth.RoleViewer, handler: http.HandlerFunc(c.handleEvents)},
		{pattern: "GET /api/v1/audit", name: "audit", role: auth.RoleViewer, handler: jsonHandler(c.handleAudit)},
		{pattern: "GET /api/v1/overrides", name: "overrides", role: auth.RoleViewer, handler: jsonHandler(c.handleListOverrides)},
		{pattern: "GET /api/v1/policies", name: "policies", role: auth.RoleViewer, handler: jsonHandler(c.handlePolicies)},
		{pattern: "GET /api/v1/whoami", name: "whoami", role: auth.RoleViewer, handler: jsonHandler(c.handleWhoami)},
		{pattern: "GET /api/v1/policies/{dependency...}", name: "policy_get", role: auth.RoleViewer, handler: jsonHandler(c.handleGetPolicy)},
		{pattern: "GET /api/v1/series", name: "series", role: auth.RoleViewer, handler: jsonHandler(c.handleSeries)},
		{pattern: "POST /api/v1/simulate", name: "simulate", role: auth.RoleViewer, readOnly: true, handler: jsonHandler(c.handleSimulate)},
		{pattern: "PUT /api/v1/policies/{dependency...}", name: "policy_put", role: auth.RoleAdmin, handler: jsonHandler(c.handlePutPolicy)},
		{pattern: "POST /api/v1/overrides/{dependency...}", name: "override_set", role: auth.RoleAdmin, handler: jsonHandler(c.handleSetOverride)},
		{pattern: "DELETE /api/v1/overrides/{dependency...}", name: "override_clear", role: auth.RoleAdmin, handler: jsonHandler(c.handleClearOverride)},
		{pattern: "GET /metrics", name: "metrics", open: true, handler: metrics},
		{pattern: "GET /healthz", name: "healthz", open: true, handler: http.HandlerFunc(c.handleHealthz)},
		{pattern: "GET /{$}", name: "dashboard", open: true, handler: ui},
		{pattern: "GET " + dashboard.AssetPrefix, name: "dashboard", open: true, handler: ui},
	}
}

// newHTTPServer builds the HTTP side:
//
//	GET    /api/v1/fleet[?dependency=NAME][&compact=1]  the FleetSnapshot as JSON (protojson, camelCase)
//	GET    /api/v1/events                              server-sent events (transition, override, policy)
//	GET    /api/v1/audit[?dependency=NAME][&limit=N]   the audit log, newest first
//	GET    /api/v1/overrides                           the overrides in force
//	GET    /api/v1/policies                            the effective policies the fleet view uses
//	GET    /api/v1/whoami                              the caller's identity and role
//	GET    /api/v1/policies/{dependency}               the stored policy document and its mod revision
//	GET    /api/v1/series?dependency=NAME[&since=15m]  the history: counts in at most 600 points, the breaker's states
//	POST   /api/v1/simulate                            replay a proposed policy ({dependency, policy, since}; reads only)
//	PUT    /api/v1/policies/{dependency}               write a policy, with a compare-and-swap on its revision (admin)
//	POST   /api/v1/overrides/{dependency}              force-open / forced-closed, with a TTL and a reason (admin)
//	DELETE /api/v1/overrides/{dependency}              clear an override (admin)
//	GET    /metrics                                    Prometheus, the coordinator's own registry
//	GET    /healthz                                    "ok"
//	GET    /, /ui/…                                    the fleet dashboard (package internal/dashboard)
//
// /api/v1/* authenticate like the Admin API (see authorized): reads need
// a viewer token, writes an admin token, when there is a tokens file. The
// writes go through the Admin API's own handlers (adminServer), so the
// store, the validation and the audit are the same. /metrics, /healthz and
// the dashboard's static files are open: the page holds no data, it reads
// /api/v1/* with the token its user types. The mux is built from routes,
// the one table of each route's role.
func (c *Coordinator) newHTTPServer() *http.Server {
	mux := http.NewServeMux()
	for _, rt := range c.routes() {
		h := rt.handler
		switch {
		case rt.open && rt.role == auth.RoleNone:
		case !rt.open && rt.role > auth.RoleNone:
			h = c.authorized(rt.role, h)
		default:
			// A programming error TestEveryRouteHasARole catches.
			panic(fmt.Sprintf("coordinator: route %q needs either a role or open", rt.pattern))
		}
		mux.Handle(rt.pattern, c.instrument(rt.name, h))
	}
	return c.httpTimeouts().Server(mux) // /api/v1/events lifts the write timeout for its stream
}

// statusRecorder remembers the status code for the metrics.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush lets the SSE handler flush through the recorder.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (c *Coordinator) instrument(handler string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		c.metrics.httpRequests.WithLabelValues(handler, strconv.Itoa(rec.code)).Inc()
	})
}

// authorized authenticates a /api/v1 request like the Admin API's
// interceptor and lets it through when the caller's role is at least need;
// the handler finds the identity with identityFrom(r.Context()), which the
// writes put into the audit.
//
//   - The token comes from "Authorization: Bearer TOKEN", and only from
//     there. A request with ?access_token= in its URL is refused (400),
//     whatever it carries and wherever it goes: a URL is written to the
//     access logs of every proxy and server on the way, so a secret in one
//     is a secret leaked. The dashboard reads the event stream with fetch,
//     which sends the header.
//   - Writes (POST, DELETE) from a browser must be same-origin
//     (http.CrossOriginProtection: Sec-Fetch-Site, Origin), and a POST
//     must carry "Content-Type: application/json".
//   - Without a tokens file every loopback caller is an admin; the Host
//     header must then be a loopback name too, so that a web page a local
//     user visits cannot reach the API through DNS rebinding.
func (c *Coordinator) authorized(need auth.Role, h http.Handler) http.Handler {
	csrf := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(code int, reason, msg string) {
			c.metrics.authFailures.WithLabelValues("http", reason).Inc()
			httpError(w, code, msg)
		}
		if c.authn().LoopbackOnly() {
			if h := proxyHeader(slices.Collect(maps.Keys(r.Header))); h != "" {
				refuse(http.StatusForbidden, "permission_denied", fmt.Sprintf("%v: this coordinator has no tokens file and trusts loopback callers, so it refuses requests a proxy forwards (header %s): configure --tokens-file to serve through a proxy", auth.ErrPermissionDenied, h))
				return
			}
			if !isLoopbackHostHeader(r.Host) {
				refuse(http.StatusForbidden, "permission_denied", fmt.Sprintf("%v: this coordinator has no tokens file and answers loopback host names only, not %q", auth.ErrPermissionDenied, r.Host))
				return
			}
		}
		if need > auth.RoleViewer {
			if err := csrf.Check(r); err != nil {
				refuse(http.StatusForbidden, "permission_denied", fmt.Sprintf("%v: cross-origin write refused (%v)", auth.ErrPermissionDenied, err))
				return
			}
		}
		if r.URL.Query().Has(tokenQueryParam) {
			refuse(http.StatusBadRequest, "token_in_url", errTokenInURL.Error())
			return
		}
		var peer net.Addr
		if ap, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
			peer = ap
		}
		id, err := c.authn().Authenticate(r.Header.Get("Authorization"), peer)
		if err == nil {
			err = auth.Authorize(id, need)
		}
		if err != nil {
			if errors.Is(err, auth.ErrPermissionDenied) {
				refuse(http.StatusForbidden, "permission_denied", err.Error())
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="fusebox"`)
				refuse(http.StatusUnauthorized, "unauthenticated", err.Error())
			}
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

// tokenQueryParam is the query parameter (RFC 6750's) that once carried a
// token to the event stream; a request that has it is refused.
const tokenQueryParam = "access_token"

// errTokenInURL is the refusal of a request with a token in its URL.
var errTokenInURL = fmt.Errorf("%v: ?%s= is refused: a token in a URL ends up in the access logs of every proxy on the way; "+
	"send it as \"Authorization: Bearer TOKEN\" (the token may have leaked already: consider replacing it)", auth.ErrUnauthenticated, tokenQueryParam)

// isLoopbackHostHeader reports whether a request's Host ("127.0.0.1:7070",
// "[::1]:7070", "localhost:7070", with or without the port) names the
// loopback interface.
func isLoopbackHostHeader(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// errorBody is the JSON body of every /api/v1 error: {"error": "...",
// "code": "InvalidArgument"}, code being the gRPC code the Admin API
// would have returned (absent for errors of the HTTP layer itself). An
// invalid policy also lists its violations, each with its JSON path
// ("breaker.minimumRequests").
type errorBody struct {
	Error      string          `json:"error"`
	Code       string          `json:"code,omitempty"`
	Violations []violationJSON `json:"violations,omitempty"`
}

// violationJSON is one violation of a refused policy.
type violationJSON struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{Error: msg})
}

// writeError answers err the way the Admin API would: toStatus maps it to
// a gRPC status (the one place errors become codes), and httpCodes maps
// the code to an HTTP status.
func writeError(w http.ResponseWriter, err error) {
	st := status.Convert(toStatus(err))
	code, ok := httpCodes[st.Code()]
	if !ok {
		code = http.StatusInternalServerError
	}
	body := errorBody{Error: st.Message(), Code: st.Code().String()}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, fv := range br.GetFieldViolations() {
				body.Violations = append(body.Violations, violationJSON{Field: fv.GetField(), Message: fv.GetDescription()})
			}
		}
	}
	writeJSON(w, code, body)
}

// httpCodes maps the gRPC codes toStatus returns to HTTP statuses.
var httpCodes = map[codes.Code]int{
	codes.InvalidArgument:    http.StatusBadRequest,
	codes.NotFound:           http.StatusNotFound,
	codes.Unauthenticated:    http.StatusUnauthorized,
	codes.PermissionDenied:   http.StatusForbidden,
	codes.Aborted:            http.StatusConflict,
	codes.ResourceExhausted:  http.StatusTooManyRequests,     // simulations busy
	codes.FailedPrecondition: http.StatusInternalServerError, // bad data already in etcd
	codes.Unavailable:        http.StatusServiceUnavailable,
	codes.DeadlineExceeded:   http.StatusGatewayTimeout,
	codes.Canceled:           http.StatusServiceUnavailable,
	codes.Internal:           http.StatusInternalServerError,
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (c *Coordinator) handleFleet(w http.ResponseWriter, r *http.Request) {
	snap, err := c.fleetSnapshot(r.URL.Query().Get("dependency"))
	if err != nil {
		writeError(w, err)
		return
	}
	mo := protojson.MarshalOptions{EmitUnpopulated: true, Indent: "  "}
	if r.URL.Query().Has("compact") { // the dashboard polls it: 1,000 dependencies are megabytes indented
		mo.Indent = ""
	}
	writeProto(w, mo, snap)
}

// writeProto answers m as protojson.
func writeProto(w http.ResponseWriter, mo protojson.MarshalOptions, m proto.Message) {
	b, err := mo.Marshal(m)
	if err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// handleEvents streams events as server-sent events:
//
//	id: 42
//	event: transition
//	data: {"id":42,"type":"transition","dependency":"shipping-api","state":"open",…}
//
// A client reconnecting with Last-Event-ID gets the events it missed while
// the coordinator still keeps them (the last 512).
func (c *Coordinator) handleEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		httpError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	var after uint64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		after, _ = strconv.ParseUint(v, 10, 64)
	}
	sub, err := c.broker.Subscribe(identityFrom(r.Context()).Name, after)
	switch {
	case errors.Is(err, events.ErrTooManySubscribers):
		w.Header().Set("Retry-After", "30")
		httpError(w, streamRefusalCode(err), streamRefusal(err).Error())
		return
	case err != nil:
		httpError(w, http.StatusServiceUnavailable, "coordinator shutting down")
		return
	}
	defer sub.Close()
	h := w.Header()
	// The stream outlives the server's write timeout: lift it for this response.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": fusebox events\n\n")
	fl.Flush()
	keep := time.NewTicker(sseKeepAlive)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keep.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		case e, ok := <-sub.C:
			if !ok {
				return
			}
			b, err := json.Marshal(e)
			if err != nil {
				continue
			}
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, b)
			fl.Flush()
		}
	}
}

func (c *Coordinator) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// publish hands an event to the SSE subscribers and counts it; overrides
// and policy changes also go into the history.
func (c *Coordinator) publish(e events.Event) {
	switch e.Type {
	case events.TypeOverride:
		var st sharedstate.OverrideState
		_ = st.UnmarshalText([]byte(e.State)) // "none" when cleared
		var exp time.Time
		if e.Expires != nil {
			exp = *e.Expires
		}
		c.history.ObserveOverride(e.At, e.Dependency, st, e.Reason, exp)
	case events.TypePolicy:
		c.history.ObservePolicy(e.At, e.Dependency)
	}
	e = c.broker.Publish(e)
	c.metrics.events.WithLabelValues(e.Type).Inc()
}

// publishTransition publishes a breaker transition the fleet view derived.
func (c *Coordinator) publishTransition(t fleet.Transition) {
	c.publish(events.Event{
		Type: events.TypeTransition, At: t.At.UTC(), Dependency: t.Dependency, Zone: t.Zone,
		State: t.State.String(), Previous: t.Previous.String(), Generation: t.Generation,
		Origin: t.Origin, Reason: t.Reason,
	})
}
