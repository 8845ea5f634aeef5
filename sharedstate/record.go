package sharedstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// BreakerState is a breaker's state. Records carry only Closed and Open;
// HalfOpen is derived (an Open record whose open duration has passed) and
// appears in snapshots.
type BreakerState uint8

const (
	Closed BreakerState = iota
	Open
	HalfOpen
)

var breakerStateNames = [...]string{Closed: "closed", Open: "open", HalfOpen: "half-open"}

func (s BreakerState) String() string { return enumString(breakerStateNames[:], s, "breaker-state") }

// LabelValue is s as a Prometheus label value: "closed", "open",
// "half_open" (snake_case, where String says "half-open"), "unknown" for an
// invalid state. Every metric labelled by breaker state uses it.
func (s BreakerState) LabelValue() string { return enumLabel(breakerStateNames[:], s) }

// MarshalText encodes s as "closed", "open" or "half-open".
func (s BreakerState) MarshalText() ([]byte, error) {
	if s > HalfOpen {
		return nil, fmt.Errorf("fusebox: invalid breaker state %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes "closed", "open" or "half-open".
func (s *BreakerState) UnmarshalText(b []byte) error {
	i := slices.Index(breakerStateNames[:], string(b))
	if i < 0 {
		return fmt.Errorf("fusebox: invalid breaker state %q", b)
	}
	*s = BreakerState(i)
	return nil
}

// BreakerRecord is the replicated breaker decision for one dependency (and,
// for scope "zone", one zone). Records are merged with Merge; see there for
// the order. The field limits below are enforced by Validate and by
// Engine.ApplyRecord.
type BreakerRecord struct {
	Dependency string       `json:"dependency"`
	Zone       string       `json:"zone,omitempty"` // "" for the fleet-wide record; the zone for scope "zone"
	Generation uint64       `json:"generation"`
	State      BreakerState `json:"state"` // Closed or Open
	Since      time.Time    `json:"since"`
	OpenCount  uint32       `json:"openCount"` // opens in a row: 1 after a trip, +1 per failed probe; 0 when closed
	Origin     string       `json:"origin"`    // the proposing node
	Reason     string       `json:"reason,omitempty"`
	// IncidentStart is when the run of opens this open record belongs to
	// began: the trip, kept by the re-opens after failed probes (zero in a
	// closed record, and in records of builds that do not say). Trip is
	// what the trip rule decided that trip on (nil: not known). See
	// evidence.go. Merge and SameRecord do not compare them: the proposer
	// writes them with the record, so its generation and origin decide.
	IncidentStart time.Time     `json:"incidentStart,omitzero"`
	Trip          *TripEvidence `json:"trip,omitempty"`
}

// Limits on record fields, so a record stays small on the wire.
const (
	MaxNodeNameLen = 256
	MaxReasonLen   = 1024
)

// Validate checks a record received from elsewhere.
func (r BreakerRecord) Validate() error {
	var problems []string
	if err := ValidateDependencyName(r.Dependency); err != nil {
		problems = append(problems, err.Error())
	}
	if r.State != Closed && r.State != Open {
		problems = append(problems, fmt.Sprintf("state %s: a record is closed or open", r.State))
	}
	if len(r.Zone) > MaxNodeNameLen || len(r.Origin) > MaxNodeNameLen {
		problems = append(problems, fmt.Sprintf("zone or origin longer than %d bytes", MaxNodeNameLen))
	}
	if len(r.Reason) > MaxReasonLen {
		problems = append(problems, fmt.Sprintf("reason longer than %d bytes", MaxReasonLen))
	}
	if r.State != Open && (!r.IncidentStart.IsZero() || r.Trip != nil) {
		problems = append(problems, "a closed record carries no incident start or trip evidence")
	}
	if !r.IncidentStart.IsZero() && r.IncidentStart.After(r.Since) {
		problems = append(problems, "incident start after since")
	}
	if r.Trip != nil {
		problems = append(problems, r.Trip.validate()...)
	}
	if len(problems) > 0 {
		return fmt.Errorf("fusebox: invalid breaker record: %s", strings.Join(problems, "; "))
	}
	return nil
}

// HalfOpenAt is when an Open record turns half-open under b: after
// b.FleetOpenDurationFor(openCount).
func (r BreakerRecord) HalfOpenAt(b BreakerPolicy) time.Time {
	return r.Since.Add(b.FleetOpenDurationFor(r.OpenCount))
}

// StateAt derives the record's effective state at now under b: Closed, Open,
// or HalfOpen once since + openDuration(openCount) has passed.
func (r BreakerRecord) StateAt(b BreakerPolicy, now time.Time) BreakerState {
	if r.State != Open {
		return Closed
	}
	if now.Before(r.HalfOpenAt(b)) {
		return Open
	}
	return HalfOpen
}

// Merge returns the record that wins between a and b: the higher Generation;
// on a tie Open beats Closed; then the lower Origin. Remaining ties (only
// possible when one origin proposed twice for one generation, which the
// engine never does) are broken by the earlier Since, the higher OpenCount,
// the lower Reason, Zone and Dependency, so that Merge picks the maximum of a
// total order and is therefore commutative, associative and idempotent. Merge
// is meant for records of the same dependency and zone.
func Merge(a, b BreakerRecord) BreakerRecord {
	if recordLess(a, b) {
		return b
	}
	return a
}

// recordLess reports whether b beats a (a < b in the merge order).
func recordLess(a, b BreakerRecord) bool {
	if a.Generation != b.Generation {
		return a.Generation < b.Generation
	}
	if a.State != b.State {
		return a.State < b.State // Closed(0) < Open(1)
	}
	if a.Origin != b.Origin {
		return a.Origin > b.Origin // the lower origin wins
	}
	if !a.Since.Equal(b.Since) {
		return a.Since.After(b.Since) // the earlier since wins
	}
	if a.OpenCount != b.OpenCount {
		return a.OpenCount < b.OpenCount
	}
	if a.Reason != b.Reason {
		return a.Reason > b.Reason
	}
	if a.Zone != b.Zone {
		return a.Zone > b.Zone
	}
	return a.Dependency > b.Dependency
}

// SameRecord reports whether a and b are the same record (Since compared as
// an instant).
func SameRecord(a, b BreakerRecord) bool {
	return a.Dependency == b.Dependency && a.Zone == b.Zone && a.Generation == b.Generation &&
		a.State == b.State && a.Since.Equal(b.Since) && a.OpenCount == b.OpenCount &&
		a.Origin == b.Origin && a.Reason == b.Reason
}

// ErrInvalidOverride is matched (errors.Is) by errors that refuse an override.
var ErrInvalidOverride = errors.New("fusebox: invalid override")

// OverrideState is an operator's override of a breaker. The zero value,
// OverrideNone, means no override.
type OverrideState uint8

const (
	OverrideNone OverrideState = iota
	ForcedOpen
	ForcedClosed
)

var overrideStateNames = [...]string{OverrideNone: "none", ForcedOpen: "forced-open", ForcedClosed: "forced-closed"}

func (s OverrideState) String() string { return enumString(overrideStateNames[:], s, "override-state") }

// LabelValue is s as a Prometheus label value: "none", "forced_open",
// "forced_closed" (snake_case, where String says "forced-open"), "unknown"
// for an invalid state.
func (s OverrideState) LabelValue() string { return enumLabel(overrideStateNames[:], s) }

// MarshalText encodes s as "forced-open" or "forced-closed" ("none" for OverrideNone).
func (s OverrideState) MarshalText() ([]byte, error) {
	if s > ForcedClosed {
		return nil, fmt.Errorf("%w: state %d", ErrInvalidOverride, uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes "forced-open", "forced-closed" or "none".
func (s *OverrideState) UnmarshalText(b []byte) error {
	i := slices.Index(overrideStateNames[:], string(b))
	if i < 0 {
		return fmt.Errorf("%w: state %q: want forced-open or forced-closed", ErrInvalidOverride, b)
	}
	*s = OverrideState(i)
	return nil
}

// Override is an operator's decision for one dependency, stored in etcd as
// overrides/<dependency>. It beats every computed state, including shadow
// mode. ForcedClosed disables the breaker, not the retry budget.
type Override struct {
	State   OverrideState `json:"state"`
	Reason  string        `json:"reason"`
	Actor   string        `json:"actor"`
	Created time.Time     `json:"created"`
	Expires time.Time     `json:"expires,omitzero"` // zero: until cleared
}

// ActiveAt reports whether o is in force at now.
func (o *Override) ActiveAt(now time.Time) bool {
	return o != nil && o.State != OverrideNone && (o.Expires.IsZero() || now.Before(o.Expires))
}

// Validate checks an override and returns nil or a *ValidationError matching
// ErrInvalidOverride.
func (o Override) Validate() error {
	var vs []Violation
	if o.State != ForcedOpen && o.State != ForcedClosed {
		vs = append(vs, Violation{Field: "state", Value: o.State.String(), Message: "must be forced-open or forced-closed"})
	}
	if len(o.Reason) > MaxReasonLen {
		vs = append(vs, Violation{Field: "reason", Value: fmt.Sprintf("%d bytes", len(o.Reason)), Message: fmt.Sprintf("must be at most %d bytes", MaxReasonLen)})
	}
	if len(o.Actor) > MaxNodeNameLen {
		vs = append(vs, Violation{Field: "actor", Value: fmt.Sprintf("%d bytes", len(o.Actor)), Message: fmt.Sprintf("must be at most %d bytes", MaxNodeNameLen)})
	}
	if !o.Expires.IsZero() && !o.Created.IsZero() && !o.Expires.After(o.Created) {
		vs = append(vs, Violation{Field: "expires", Value: o.Expires.Format(time.RFC3339Nano), Message: "must be after created (" + o.Created.Format(time.RFC3339Nano) + ")"})
	}
	if len(vs) > 0 {
		return &ValidationError{Violations: vs, kind: ErrInvalidOverride}
	}
	return nil
}

// ParseOverride decodes an override strictly (unknown fields refused) and
// validates it.
func ParseOverride(data []byte) (Override, error) {
	var o Override
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return Override{}, fmt.Errorf("%w: %v", ErrInvalidOverride, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Override{}, fmt.Errorf("%w: trailing data after the override object", ErrInvalidOverride)
	}
	if err := o.Validate(); err != nil {
		return Override{}, err
	}
	return o, nil
}
