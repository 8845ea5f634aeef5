package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// The JSON side of the Admin API, for the dashboard (a browser cannot call
// gRPC). Every handler here calls the Admin API's own handler (adminServer)
// with the caller's identity in the context, so validation, the store
// write and the audit entry are the Admin API's; only the request decoding
// and the response encoding are HTTP's. Errors go through writeError
// (toStatus, then httpCodes).

// maxBodyBytes bounds a request body (an override is a few hundred bytes).
const maxBodyBytes = 64 << 10

// overrideRequest is the body of POST /api/v1/overrides/{dependency}.
type overrideRequest struct {
	// State is "forced-open" or "forced-closed" (required).
	State string `json:"state"`
	// TTL is a Go duration ("10m", "1h30m"); "" or "0" for no expiry
	// (optional). At most 168h, like the Admin API.
	TTL string `json:"ttl"`
	// Reason is free text for the audit and the dashboard (optional).
	Reason string `json:"reason"`
	// Actor names the person, as fuseboxctl's --actor (optional); the
	// token's identity is added to it in the audit.
	Actor string `json:"actor"`
}

// overrideJSON is an override as /api/v1 shows it.
type overrideJSON struct {
	Dependency  string     `json:"dependency"`
	State       string     `json:"state"` // forced-open or forced-closed
	Reason      string     `json:"reason"`
	Actor       string     `json:"actor"`
	Created     time.Time  `json:"created"`
	Expires     *time.Time `json:"expires,omitempty"` // absent: until cleared
	ModRevision int64      `json:"modRevision"`
}

func overrideJSONOf(e *fuseboxv1.OverrideEntry) overrideJSON {
	o := overrideJSON{Dependency: e.GetDependency(), State: sharedstate.ForcedOpen.String(), Reason: e.GetReason(),
		Actor: e.GetActor(), Created: e.GetCreated().AsTime().UTC(), ModRevision: e.GetModRevision()}
	if e.GetState() == fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_CLOSED {
		o.State = sharedstate.ForcedClosed.String()
	}
	if e.GetExpires() != nil {
		exp := e.GetExpires().AsTime().UTC()
		o.Expires = &exp
	}
	return o
}

// jsonHandler adapts a handler that returns its answer: a value written
// as JSON with 200, or an error written by writeError.
func jsonHandler(f func(w http.ResponseWriter, r *http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := f(w, r)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}

// decodeBody reads a JSON request body into v: "Content-Type:
// application/json", at most maxBodyBytes, no unknown fields, one value.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return fmt.Errorf("%w: Content-Type must be application/json", ErrInvalidRequest)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("%w: body larger than %d bytes", ErrInvalidRequest, maxBodyBytes)
		}
		return fmt.Errorf("%w: body: %v", ErrInvalidRequest, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: body: more than one JSON value", ErrInvalidRequest)
	}
	return nil
}

// handleSetOverride is POST /api/v1/overrides/{dependency} with an
// overrideRequest: the Admin API's ForceOpen or ForceClosed. It answers
// the override written (overrideJSON), or 400 naming every problem of the
// request at once.
func (c *Coordinator) handleSetOverride(w http.ResponseWriter, r *http.Request) (any, error) {
	dep := r.PathValue("dependency")
	var req overrideRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	var problems []error
	if err := sharedstate.ValidateDependencyName(dep); err != nil {
		problems = append(problems, err)
	}
	switch req.State {
	case sharedstate.ForcedOpen.String(), sharedstate.ForcedClosed.String():
	case "":
		problems = append(problems, errors.New(`state is required: "forced-open" or "forced-closed"`))
	default:
		problems = append(problems, fmt.Errorf(`state %q: want "forced-open" or "forced-closed"`, req.State))
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil {
			problems = append(problems, fmt.Errorf(`ttl %q: not a duration such as "10m" or "1h30m" ("" for no expiry)`, req.TTL))
		}
		ttl = d // its range is the Admin API's to check
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, errors.Join(problems...))
	}
	pb := &fuseboxv1.SetOverrideRequest{Dependency: dep, Reason: req.Reason, Actor: req.Actor}
	if ttl != 0 {
		pb.Ttl = durationpb.New(ttl)
	}
	admin := &adminServer{c: c}
	set := admin.ForceOpen
	if req.State == sharedstate.ForcedClosed.String() {
		set = admin.ForceClosed
	}
	e, err := set(r.Context(), pb)
	if err != nil {
		return nil, err
	}
	return overrideJSONOf(e), nil
}

// handleClearOverride is DELETE /api/v1/overrides/{dependency}[?actor=NAME]:
// the Admin API's ClearOverride. It answers {"cleared": true}, or false
// when there was no override (like the Admin API, not an error).
func (c *Coordinator) handleClearOverride(_ http.ResponseWriter, r *http.Request) (any, error) {
	dep := r.PathValue("dependency")
	if err := sharedstate.ValidateDependencyName(dep); err != nil {
		return nil, err
	}
	resp, err := (&adminServer{c: c}).ClearOverride(r.Context(),
		&fuseboxv1.ClearOverrideRequest{Dependency: dep, Actor: r.URL.Query().Get("actor")})
	if err != nil {
		return nil, err
	}
	return map[string]any{"dependency": dep, "cleared": resp.GetCleared()}, nil
}

// auditJSON is an audit entry as /api/v1/audit shows it: before and after
// are the stored JSON values themselves (null when absent); changes are
// the fields that differ between them, as the Admin API's
// AuditEntry.changes (sharedstate.DiffDocuments), never absent.
type auditJSON struct {
	Revision   int64                     `json:"revision"`
	At         time.Time                 `json:"at"`
	Actor      string                    `json:"actor"`
	Action     string                    `json:"action"`
	Dependency string                    `json:"dependency"`
	Before     json.RawMessage           `json:"before"`
	After      json.RawMessage           `json:"after"`
	Changes    []sharedstate.FieldChange `json:"changes"`
}

// fieldChangesOf converts the Admin API's field changes to their JSON
// form (the same fields: field, from, to), an empty list for none.
func fieldChangesOf(cs []*fuseboxv1.FieldChange) []sharedstate.FieldChange {
	out := make([]sharedstate.FieldChange, 0, len(cs))
	for _, c := range cs {
		out = append(out, sharedstate.FieldChange{Field: c.GetField(), From: c.GetFrom(), To: c.GetTo()})
	}
	return out
}

func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	if !json.Valid(b) { // never expected: the store writes JSON
		q, _ := json.Marshal(string(b))
		return q
	}
	return b
}

// handleAudit is GET /api/v1/audit[?dependency=NAME][&limit=N]: the Admin
// API's ListAudit, newest first (limit default 100, at most 1000), each
// entry with its field changes.
func (c *Coordinator) handleAudit(_ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	var limit uint64
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: limit %q: want a whole number from 0 to %d", ErrInvalidRequest, v, maxAuditLimit)
		}
		limit = n
	}
	resp, err := (&adminServer{c: c}).ListAudit(r.Context(),
		&fuseboxv1.ListAuditRequest{Dependency: q.Get("dependency"), Limit: uint32(limit)})
	if err != nil {
		return nil, err
	}
	out := make([]auditJSON, 0, len(resp.GetEntries()))
	for _, e := range resp.GetEntries() {
		out = append(out, auditJSON{Revision: e.GetRevision(), At: e.GetAt().AsTime().UTC(), Actor: e.GetActor(),
			Action: e.GetAction(), Dependency: e.GetDependency(), Before: rawJSON(e.GetBefore()), After: rawJSON(e.GetAfter()),
			Changes: fieldChangesOf(e.GetChanges())})
	}
	return map[string]any{"entries": out}, nil
}

// handleListOverrides is GET /api/v1/overrides: the Admin API's
// ListOverrides (the overrides in force, read from etcd).
func (c *Coordinator) handleListOverrides(_ http.ResponseWriter, r *http.Request) (any, error) {
	resp, err := (&adminServer{c: c}).ListOverrides(r.Context(), &fuseboxv1.ListOverridesRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]overrideJSON, 0, len(resp.GetOverrides()))
	for _, e := range resp.GetOverrides() {
		out = append(out, overrideJSONOf(e))
	}
	return map[string]any{"overrides": out}, nil
}

// handlePolicies is GET /api/v1/policies: the effective policies the
// fleet view computes with (the coordinator's etcd cache, no etcd round
// trip): {"default": POLICY, "policies": {"NAME": POLICY}} with an entry
// for every dependency that has a policy or an override. The dashboard
// needs each window for requests/s and shows the thresholds.
func (c *Coordinator) handlePolicies(http.ResponseWriter, *http.Request) (any, error) {
	names := c.cache.Dependencies()
	pols := make(map[string]sharedstate.Policy, len(names))
	for _, n := range names {
		pols[n] = c.cache.Policy(n)
	}
	return map[string]any{"default": c.cache.defaultPolicy(), "policies": pols}, nil
}

// whoamiJSON is GET /api/v1/whoami's answer.
type whoamiJSON struct {
	Name        string `json:"name"`
	Role        string `json:"role"`
	Tokens      bool   `json:"tokens"` // whether the coordinator has a tokens file
	Coordinator string `json:"coordinator"`
	Version     string `json:"version"`
}

// handleWhoami is GET /api/v1/whoami: who the token is, so the dashboard
// can say whether its user may write.
func (c *Coordinator) handleWhoami(_ http.ResponseWriter, r *http.Request) (any, error) {
	id := identityFrom(r.Context())
	return whoamiJSON{Name: id.Name, Role: id.Role.String(), Tokens: !c.authn().LoopbackOnly(),
		Coordinator: c.cfg.Name, Version: version()}, nil
}
