package coordinator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/coordinator/internal/replay"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// The dashboard's policy editor and what-if pages: a stored policy read
// and written with a compare-and-swap (the Admin API's GetPolicy and
// PutPolicy, so the validation and the audit are theirs), a simulation
// (SimulatePolicy), and a dependency's history for the plot.

// maxSeriesPoints bounds the points GET /api/v1/series answers.
const maxSeriesPoints = 600

// storedPolicyJSON is a stored policy as /api/v1/policies/NAME shows it.
type storedPolicyJSON struct {
	Dependency  string          `json:"dependency"`
	Policy      json.RawMessage `json:"policy"`
	ModRevision int64           `json:"modRevision"`
}

// handleGetPolicy is GET /api/v1/policies/{dependency}: the Admin API's
// GetPolicy, the document as stored and its mod revision (404 when the
// dependency runs on the fleet default).
func (c *Coordinator) handleGetPolicy(_ http.ResponseWriter, r *http.Request) (any, error) {
	return storedPolicyOf((&adminServer{c: c}).GetPolicy(r.Context(), &fuseboxv1.GetPolicyRequest{Dependency: r.PathValue("dependency")}))
}

// storedPolicyOf is the Admin API's answer of GetPolicy or PutPolicy as
// /api/v1 shows it.
func storedPolicyOf(e *fuseboxv1.PolicyEntry, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return storedPolicyJSON{Dependency: e.GetDependency(), Policy: rawJSON(e.GetPolicyJson()), ModRevision: e.GetModRevision()}, nil
}

// putPolicyRequest is the body of PUT /api/v1/policies/{dependency}.
type putPolicyRequest struct {
	// Policy is the document to store (required).
	Policy json.RawMessage `json:"policy"`
	// ExpectedRevision makes the write a compare-and-swap: the stored
	// policy's mod revision, 0 for "none stored yet"; absent (null) writes
	// unconditionally, as fuseboxctl policy set without
	// --expected-revision.
	ExpectedRevision *int64 `json:"expectedRevision"`
	// Actor names the person (optional), as fuseboxctl's --actor.
	Actor string `json:"actor"`
}

// handlePutPolicy is PUT /api/v1/policies/{dependency}: the Admin API's
// PutPolicy. 400 names every violation (errorBody.violations, by JSON
// path), 409 is a revision conflict.
func (c *Coordinator) handlePutPolicy(w http.ResponseWriter, r *http.Request) (any, error) {
	var req putPolicyRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if len(req.Policy) == 0 || string(req.Policy) == "null" {
		return nil, fmt.Errorf("%w: policy is required", ErrInvalidRequest)
	}
	return storedPolicyOf((&adminServer{c: c}).PutPolicy(r.Context(), &fuseboxv1.PutPolicyRequest{Dependency: r.PathValue("dependency"),
		PolicyJson: req.Policy, ExpectedRevision: req.ExpectedRevision, Actor: req.Actor}))
}

// simulateRequest is the body of POST /api/v1/simulate.
type simulateRequest struct {
	Dependency string          `json:"dependency"`
	Policy     json.RawMessage `json:"policy"`
	// Since is a Go duration ("15m"); "" for the default (1h).
	Since string `json:"since"`
}

// handleSimulate is POST /api/v1/simulate: the Admin API's
// SimulatePolicy, its answer as protojson (camelCase), plus "changes": the
// fields the proposed policy changes in the current one, in the form of
// /api/v1/audit's (sharedstate.DiffDocuments of the two effective
// policies, as fuseboxctl policy simulate shows them). A POST because the
// policy is a document, but it reads only: role viewer.
func (c *Coordinator) handleSimulate(w http.ResponseWriter, r *http.Request) (any, error) {
	var req simulateRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	pb := &fuseboxv1.SimulatePolicyRequest{Dependency: req.Dependency, PolicyJson: req.Policy}
	if req.Since != "" {
		d, err := time.ParseDuration(req.Since)
		if err != nil {
			return nil, fmt.Errorf("%w: since %q: not a duration such as \"15m\"", ErrInvalidRequest, req.Since)
		}
		pb.Since = durationpb.New(d)
	}
	resp, err := (&adminServer{c: c}).SimulatePolicy(r.Context(), pb)
	if err != nil {
		return nil, err
	}
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(resp)
	if err != nil {
		return nil, err
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	changes := sharedstate.DiffDocuments(resp.GetCurrent().GetPolicyJson(), resp.GetProposed().GetPolicyJson())
	out["changes"], err = json.Marshal(append([]sharedstate.FieldChange{}, changes...))
	return out, err
}

// seriesPoint is one point of GET /api/v1/series.
type seriesPoint struct {
	At            time.Time `json:"at"`
	FirstAttempts uint64    `json:"firstAttempts"`
	Retries       uint64    `json:"retries"`
	Successes     uint64    `json:"successes"`
	Failures      uint64    `json:"failures"`
	SlowCalls     uint64    `json:"slowCalls"`
	Rejected      uint64    `json:"rejected"`
	FailureRate   float64   `json:"failureRate"`
	SlowRate      float64   `json:"slowRate"`
	Nodes         int       `json:"nodes"`
}

// seriesInterval is one band of the fleet's breaker states.
type seriesInterval struct {
	State  string    `json:"state"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Reason string    `json:"reason,omitempty"`
}

// handleSeries is GET /api/v1/series?dependency=NAME[&since=15m]: what
// the history kept of a dependency over the last since (default 15m, at
// most the coarse horizon) from its first count, in at most 600 points
// (slots summed), and the fleet's breaker states as bands.
func (c *Coordinator) handleSeries(_ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	dep := q.Get("dependency")
	if err := sharedstate.ValidateDependencyName(dep); err != nil {
		return nil, err
	}
	since := 15 * time.Minute
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%w: since %q: want a positive duration such as \"15m\"", ErrInvalidRequest, v)
		}
		since = min(d, c.history.Config().CoarseHorizon)
	}
	to := c.clock.Now().Add(-history.Settle)
	from := to.Add(-since)
	segs, err := c.history.Range(dep, from, to)
	if err != nil {
		return nil, err
	}
	var flat []seriesPoint
	var step time.Duration
	for _, seg := range segs {
		for i, s := range seg.Slots {
			flat = append(flat, seriesPoint{At: seg.From.Add(time.Duration(i) * seg.Step), FirstAttempts: uint64(s.FirstAttempts),
				Retries: uint64(s.Retries), Successes: uint64(s.Successes), Failures: uint64(s.Failures), SlowCalls: uint64(s.SlowCalls),
				Rejected: uint64(s.Rejected), Nodes: s.Nodes()})
		}
		step = max(step, seg.Step)
	}
	// Before its first count the dependency had no history: the plot
	// starts there (the breaker's states likewise).
	for len(flat) > 1 && flat[0].FirstAttempts+flat[0].Successes+flat[0].Failures+flat[0].Rejected+flat[0].Retries == 0 {
		flat = flat[1:]
	}
	if len(flat) > 0 && flat[0].At.After(from) {
		from = flat[0].At
	}
	per := max(1, (len(flat)+maxSeriesPoints-1)/maxSeriesPoints)
	points := make([]seriesPoint, 0, len(flat)/per+1)
	for i := 0; i < len(flat); i += per {
		p := flat[i]
		for _, q := range flat[i+1 : min(i+per, len(flat))] {
			p.FirstAttempts += q.FirstAttempts
			p.Retries += q.Retries
			p.Successes += q.Successes
			p.Failures += q.Failures
			p.SlowCalls += q.SlowCalls
			p.Rejected += q.Rejected
			p.Nodes = max(p.Nodes, q.Nodes)
		}
		if req := p.Successes + p.Failures; req > 0 {
			p.FailureRate = float64(p.Failures) / float64(req)
			p.SlowRate = min(1, float64(p.SlowCalls)/float64(req))
		}
		points = append(points, p)
	}
	pol := c.cache.Policy(dep)
	var bands []seriesInterval
	for _, iv := range replay.Reality(c.history.Records(dep, from, to), pol.Breaker, from, to) {
		bands = append(bands, seriesInterval{State: iv.State, From: iv.From.UTC(), To: iv.To.UTC(), Reason: iv.Reason})
	}
	if bands == nil {
		bands = []seriesInterval{}
	}
	return map[string]any{"dependency": dep, "from": from.UTC(), "to": to.UTC(),
		"step": (time.Duration(per) * step).String(), "points": points, "states": bands}, nil
}
