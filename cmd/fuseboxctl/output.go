package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Output formats of -o.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

var formats = []string{formatTable, formatJSON, formatYAML}

func checkFormat(f string) error {
	if slices.Contains(formats, f) {
		return nil
	}
	return usageError{fmt.Errorf("-o must be table, json or yaml, got %q", f)}
}

// printData writes v as JSON or YAML (the same document: YAML is converted
// from the JSON, so field names match).
//
// Control and bidirectional formatting characters in strings are written as
// \u escapes, and bytes that are not UTF-8 as \ufffd, in both (jsonSafe):
// YAML's parser refuses a raw control character, and a terminal must not
// obey one.
func printData(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeDocument(w, format, b)
}

// writeDocument writes the JSON document doc as format, JSON or YAML (see
// printData).
func writeDocument(w io.Writer, format string, doc []byte) error {
	doc = jsonSafe(doc)
	if format != formatYAML {
		_, err := fmt.Fprintf(w, "%s\n", doc)
		return err
	}
	y, err := yaml.JSONToYAML(doc)
	if err != nil {
		return err
	}
	_, err = w.Write(y)
	return err
}

// printRemoval prints the outcome of a removal (clear, policy rm): with -o
// json|yaml {"dependency": name, key: removed}, else the line that says it.
func (g *globalOptions) printRemoval(name, key string, removed bool, removedLine, noneLine string) error {
	if g.output != formatTable {
		return printData(g.stdout, g.output, map[string]any{"dependency": name, key: removed})
	}
	if removed {
		fmt.Fprintln(g.stdout, removedLine)
	} else {
		fmt.Fprintln(g.stdout, noneLine)
	}
	return nil
}

// table writes aligned columns.
type table struct{ *tabwriter.Writer }

func newTable(w io.Writer, header ...any) *table {
	t := &table{tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

// row adds a row of cells in fmt.Sprint's form, "-" for an empty one;
// every cell is escaped (safeText): cells hold what the coordinator sent.
func (t *table) row(cells ...any) {
	text := make([]string, len(cells))
	for i, c := range cells {
		text[i] = safeText(dash(fmt.Sprint(c)))
	}
	fmt.Fprintln(t, strings.Join(text, "\t"))
}

// ---- names of the wire enums, as the CLI prints them ----

func stateName(s fuseboxv1.BreakerState) string {
	st, ok := convert.BreakerStateFromProto(s)
	if !ok {
		return "unknown"
	}
	return st.String()
}

func overrideName(s fuseboxv1.OverrideState) string {
	if o := convert.OverrideStateFromProto(s); o != sharedstate.OverrideNone {
		return o.String()
	}
	return ""
}

func modeName(m fuseboxv1.Mode) string {
	switch m {
	case fuseboxv1.Mode_MODE_SHADOW:
		return "shadow"
	case fuseboxv1.Mode_MODE_ENFORCE:
		return "enforce"
	}
	return ""
}

func dash(s string) string { return cmp.Or(s, "-") }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func tsPtr(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime().UTC()
	return &t
}

// ---- JSON/YAML documents (field names are part of the CLI's contract) ----

// countsDoc is sharedstate.Counts: its JSON names (firstAttempts, retries,
// successes, failures, slowCalls, rejected) are the CLI's too.
type countsDoc = sharedstate.Counts

func countsOf(c *fuseboxv1.Counts) countsDoc { return convert.CountsFromProto(c) }

type nodeDoc struct {
	Node          string    `json:"node"`
	Zone          string    `json:"zone"`
	Counts        countsDoc `json:"counts"`
	NodeLocalOpen bool      `json:"nodeLocalOpen"`
	Prober        bool      `json:"prober"`
	InFlight      uint64    `json:"inFlight"`
}

type zoneDoc struct {
	Zone   string    `json:"zone"`
	Counts countsDoc `json:"counts"`
}

type dependencyDoc struct {
	Dependency string `json:"dependency"`
	// Effective is what the agents do, as the dashboard's badge shows it:
	// the override in force (forced-open, forced-closed), else "shadow" for
	// a dependency in shadow mode (it refuses nothing), else the breaker's
	// state (closed, open, half-open).
	Effective      string     `json:"effective"`
	State          string     `json:"state"`
	Generation     uint64     `json:"generation"`
	Since          *time.Time `json:"since,omitempty"`
	OpenCount      uint32     `json:"openCount"`
	Reason         string     `json:"reason,omitempty"`
	Override       string     `json:"override,omitempty"`
	OverrideReason string     `json:"overrideReason,omitempty"`
	// OverrideActor is who set the override (the audit's actor);
	// OverrideExpires when it ends by itself (absent: until cleared).
	OverrideActor   string     `json:"overrideActor,omitempty"`
	OverrideExpires *time.Time `json:"overrideExpires,omitempty"`
	Mode            string     `json:"mode,omitempty"`
	Fleet           countsDoc  `json:"fleet"`
	FailureRate     float64    `json:"failureRate"`
	SlowRate        float64    `json:"slowRate"`
	BudgetUsed      float64    `json:"budgetUsed"`
	// Throttle is the fleet's adaptive throttling: enabled, and the
	// probability its formula gives over the fleet's window.
	ThrottleEnabled     bool    `json:"throttleEnabled"`
	ThrottleProbability float64 `json:"throttleProbability"`
	// InFlight is the fleet's calls in flight; MaxInFlight the policy's
	// concurrency limit (0: none).
	InFlight      uint64    `json:"inFlight"`
	MaxInFlight   uint32    `json:"maxInFlight"`
	Probers       []string  `json:"probers"`
	NodeLocalOpen []string  `json:"nodeLocalOpen"`
	Zones         []zoneDoc `json:"zones,omitempty"`
	Nodes         []nodeDoc `json:"nodes,omitempty"`
	TripRule      *tripDoc  `json:"tripRule,omitempty"`
}

// tripDoc is the trip rule of a dependency's effective policy.
type tripDoc struct {
	FailureRateThreshold  float64 `json:"failureRateThreshold"`
	SlowCallRateThreshold float64 `json:"slowCallRateThreshold"`
	MinimumRequests       uint32  `json:"minimumRequests"`
	MinFailingNodes       uint32  `json:"minFailingNodes"`
	Window                string  `json:"window"`
	Confidence            float64 `json:"confidence"`
	FastPath              bool    `json:"fastPath"`
}

func tripOf(b *fuseboxv1.BreakerSettings) *tripDoc {
	if b == nil {
		return nil
	}
	return &tripDoc{FailureRateThreshold: b.GetFailureRateThreshold(), SlowCallRateThreshold: b.GetSlowCallRateThreshold(),
		MinimumRequests: b.GetMinimumRequests(), MinFailingNodes: b.GetMinFailingNodes(),
		Window: b.GetWindow().AsDuration().String(), Confidence: b.GetConfidence(), FastPath: b.GetFastPath()}
}

// String is the trip rule in one line.
func (t *tripDoc) String() string {
	rule := "classic (confidence 0)"
	if t.Confidence > 0 {
		rule = fmt.Sprintf("lower bound at %g%% confidence", 100*t.Confidence)
		if t.FastPath {
			rule += ", fast path on (suffixes of the window from window/100 up)"
		} else {
			rule += ", fast path off"
		}
	}
	return fmt.Sprintf("%s; failures >= %s or slow calls >= %s over >= %d requests from >= %d failing node(s), window %s",
		rule, pct(t.FailureRateThreshold), pct(t.SlowCallRateThreshold), t.MinimumRequests, t.MinFailingNodes, t.Window)
}

// dependencyOf is d's summary: everything but the trip rule, zones and
// nodes (dependencyDetailOf).
func dependencyOf(d *fuseboxv1.DependencyView) dependencyDoc {
	doc := dependencyDoc{
		Dependency: d.GetDependency(), State: stateName(d.GetState()), Generation: d.GetGeneration(),
		Since: tsPtr(d.GetSince()), OpenCount: d.GetOpenCount(), Reason: d.GetReason(),
		Override: overrideName(d.GetOverride()), OverrideReason: d.GetOverrideReason(), Mode: modeName(d.GetMode()),
		Fleet: countsOf(d.GetFleet()), FailureRate: d.GetFailureRate(), SlowRate: d.GetSlowRate(),
		BudgetUsed: d.GetBudgetUsed(), Probers: nonNil(d.GetProbers()), NodeLocalOpen: nonNil(d.GetNodeLocalOpen()),
		ThrottleEnabled: d.GetThrottleEnabled(), ThrottleProbability: d.GetThrottleProbability(),
		InFlight: d.GetInFlight(), MaxInFlight: d.GetMaxInFlight(),
		OverrideActor: d.GetOverrideActor(), OverrideExpires: tsPtr(d.GetOverrideExpires()),
	}
	doc.Effective = effectiveState(doc)
	return doc
}

// dependencyDetailOf is all of d, as dep show prints it.
func dependencyDetailOf(d *fuseboxv1.DependencyView) dependencyDoc {
	doc := dependencyOf(d)
	doc.TripRule = tripOf(d.GetBreaker())
	doc.Zones = convertAll(d.GetZones(), func(z *fuseboxv1.ZoneView) zoneDoc {
		return zoneDoc{Zone: z.GetZone(), Counts: countsOf(z.GetCounts())}
	})
	doc.Nodes = convertAll(d.GetNodes(), func(n *fuseboxv1.NodeView) nodeDoc {
		return nodeDoc{Node: n.GetNode(), Zone: n.GetZone(), Counts: countsOf(n.GetCounts()),
			NodeLocalOpen: n.GetNodeLocalOpen(), Prober: n.GetProber(), InFlight: n.GetInFlight()}
	})
	return doc
}

// effectiveState is what the agents do about a dependency (see
// dependencyDoc.Effective): an override first, then shadow mode, then the
// breaker.
func effectiveState(d dependencyDoc) string {
	switch {
	case d.Override != "":
		return d.Override
	case d.Mode == "shadow":
		return "shadow"
	}
	return d.State
}

type memberDoc struct {
	Node       string       `json:"node"`
	Role       string       `json:"role"`
	Zone       string       `json:"zone"`
	Version    string       `json:"version"`
	GossipAddr string       `json:"gossipAddr"`
	APIAddr    string       `json:"apiAddr"`
	Status     string       `json:"status"`
	Etcd       *etcdSyncDoc `json:"etcd,omitempty"`
	// Wire is the highest gossip frame version the member speaks (0:
	// unknown); Signs, whether it signs its gossip.
	Wire  uint32 `json:"wire"`
	Signs bool   `json:"signs"`
}

func memberOf(m *fuseboxv1.Member) memberDoc {
	return memberDoc{Node: m.GetNode(), Role: m.GetRole(), Zone: m.GetZone(), Version: m.GetVersion(),
		GossipAddr: m.GetGossipAddr(), APIAddr: m.GetApiAddr(), Status: m.GetStatus(), Etcd: etcdSyncOf(m.GetEtcd()),
		Wire: m.GetWireVersion(), Signs: m.GetSigns()}
}

// etcdSyncDoc is how a component follows etcd: the coordinator's own in
// status, an agent's (from its registration) in members.
type etcdSyncDoc struct {
	Synced     bool           `json:"synced"`
	ClusterID  string         `json:"clusterId,omitempty"`
	Revision   int64          `json:"revision,omitempty"`
	Rewinds    uint64         `json:"rewinds"`
	LastRewind *etcdRewindDoc `json:"lastRewind,omitempty"`
}

type etcdRewindDoc struct {
	Reason        string     `json:"reason"`
	At            *time.Time `json:"at,omitempty"`
	FromRevision  int64      `json:"fromRevision"`
	ToRevision    int64      `json:"toRevision"`
	FromClusterID string     `json:"fromClusterId"`
	ToClusterID   string     `json:"toClusterId"`
}

func etcdSyncOf(e *fuseboxv1.EtcdSync) *etcdSyncDoc {
	if e == nil {
		return nil
	}
	d := &etcdSyncDoc{Synced: e.GetSynced(), ClusterID: e.GetClusterId(), Revision: e.GetRevision(), Rewinds: e.GetRewinds()}
	if r := e.GetLastRewind(); r != nil {
		d.LastRewind = &etcdRewindDoc{Reason: r.GetReason(), At: tsPtr(r.GetAt()), FromRevision: r.GetFromRevision(),
			ToRevision: r.GetToRevision(), FromClusterID: r.GetFromClusterId(), ToClusterID: r.GetToClusterId()}
	}
	return d
}

// String is a rewind in one line: "2026-12-01T10:02:03Z revision_went_back:
// revision 5120 -> 12" (and the cluster IDs when they differ).
func (r *etcdRewindDoc) String() string {
	at := "?"
	if r.At != nil {
		at = r.At.Format(time.RFC3339)
	}
	s := fmt.Sprintf("%s %s: revision %d -> %d", at, r.Reason, r.FromRevision, r.ToRevision)
	if r.FromClusterID != r.ToClusterID {
		s += fmt.Sprintf(", cluster %s -> %s", r.FromClusterID, r.ToClusterID)
	}
	return s
}

type overrideDoc struct {
	Dependency  string     `json:"dependency"`
	State       string     `json:"state"`
	Reason      string     `json:"reason"`
	Actor       string     `json:"actor"`
	Created     *time.Time `json:"created,omitempty"`
	Expires     *time.Time `json:"expires,omitempty"`
	ModRevision int64      `json:"modRevision"`
}

func overrideOf(o *fuseboxv1.OverrideEntry) overrideDoc {
	return overrideDoc{Dependency: o.GetDependency(), State: overrideName(o.GetState()), Reason: o.GetReason(),
		Actor: o.GetActor(), Created: tsPtr(o.GetCreated()), Expires: tsPtr(o.GetExpires()), ModRevision: o.GetModRevision()}
}

// policyDoc is a policy entry with the policy as a JSON object, not bytes.
type policyDoc struct {
	Dependency  string          `json:"dependency"`
	ModRevision int64           `json:"modRevision"`
	Policy      json.RawMessage `json:"policy"`
}

func policyOf(p *fuseboxv1.PolicyEntry) policyDoc {
	return policyDoc{Dependency: p.GetDependency(), ModRevision: p.GetModRevision(), Policy: rawJSON(p.GetPolicyJson())}
}

type auditDoc struct {
	Revision   int64           `json:"revision"`
	At         *time.Time      `json:"at,omitempty"`
	Actor      string          `json:"actor"`
	Action     string          `json:"action"`
	Dependency string          `json:"dependency"`
	Before     json.RawMessage `json:"before"`
	After      json.RawMessage `json:"after"`
	// Changes are the fields that differ between before and after, as the
	// coordinator computes them.
	Changes []changeDoc `json:"changes"`
}

func auditOf(a *fuseboxv1.AuditEntry) auditDoc {
	changes := convertAll(a.GetChanges(), func(c *fuseboxv1.FieldChange) sharedstate.FieldChange {
		return sharedstate.FieldChange{Field: c.GetField(), From: c.GetFrom(), To: c.GetTo()}
	})
	if len(changes) == 0 { // a coordinator older than AuditEntry.changes
		changes = sharedstate.DiffDocuments(a.GetBefore(), a.GetAfter())
	}
	return auditDoc{Revision: a.GetRevision(), At: tsPtr(a.GetAt()), Actor: a.GetActor(), Action: a.GetAction(),
		Dependency: a.GetDependency(), Before: rawJSON(a.GetBefore()), After: rawJSON(a.GetAfter()), Changes: changesOf(changes)}
}

// changeDoc is one field a write changes: its JSON values before and
// after, "-" where there is none.
type changeDoc struct {
	Field string `json:"field"`
	From  string `json:"from"`
	To    string `json:"to"`
}

// changesOf converts sharedstate's field changes.
func changesOf(cs []sharedstate.FieldChange) []changeDoc {
	return convertAll(cs, func(c sharedstate.FieldChange) changeDoc {
		return changeDoc{Field: c.Field, From: dash(c.From), To: dash(c.To)}
	})
}

// showJSON shows a JSON value in text: a string without its quotes.
func showJSON(v string) string {
	var s string
	if strings.HasPrefix(v, `"`) && json.Unmarshal([]byte(v), &s) == nil {
		return s
	}
	return v
}

// rawJSON returns b when it is JSON, else b as a JSON string, and null for
// nothing.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

// convertAll converts each of in with of, into a slice that is never nil
// (a JSON list prints as [], not null).
func convertAll[In, Out any](in []In, of func(In) Out) []Out {
	out := make([]Out, 0, len(in))
	for _, v := range in {
		out = append(out, of(v))
	}
	return out
}

// nonNil is s, or an empty slice for nil (a JSON list prints as [], not
// null).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
