package convert

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// Types of events (Event.Type).
const (
	EventTransition = "transition" // a breaker changed state or generation
	EventOverride   = "override"   // an override was set, replaced or cleared
	EventPolicy     = "policy"     // a policy was written or deleted
)

// Event is one thing that happened in the fleet, as the coordinator's
// /api/v1/events stream carries it (JSON) and fuseboxctl watch prints it.
// On the Admin API's Watch it travels as a fuseboxv1.WatchEvent.
type Event struct {
	// ID increases by one per event published by the coordinator's event
	// broker, from the broker's first ID (per coordinator: two
	// coordinators, or one before and after a restart, number their events
	// independently).
	ID   uint64    `json:"id"`
	Type string    `json:"type"`
	At   time.Time `json:"at"`
	// Dependency is the dependency concerned ("_default" for the fleet
	// default policy).
	Dependency string `json:"dependency"`
	// Zone is the zone of a scope "zone" breaker's transition.
	Zone string `json:"zone,omitempty"`
	// State is the new state: closed, open or half-open for transitions;
	// forced-open, forced-closed or none (cleared) for overrides; put or
	// deleted for policies.
	State    string `json:"state"`
	Previous string `json:"previous,omitempty"`
	// Generation of the breaker record (transitions).
	Generation uint64 `json:"generation,omitempty"`
	// Origin is the node that proposed the transition.
	Origin   string     `json:"origin,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Actor    string     `json:"actor,omitempty"`
	Expires  *time.Time `json:"expires,omitempty"`
	Revision int64      `json:"revision,omitempty"`
}

var eventTypes = map[string]fuseboxv1.EventType{
	EventTransition: fuseboxv1.EventType_EVENT_TYPE_TRANSITION,
	EventOverride:   fuseboxv1.EventType_EVENT_TYPE_OVERRIDE,
	EventPolicy:     fuseboxv1.EventType_EVENT_TYPE_POLICY,
}

// EventToProto converts an event for the Admin API's Watch (an unknown
// Type travels as EVENT_TYPE_UNSPECIFIED).
func EventToProto(e Event) *fuseboxv1.WatchEvent {
	w := &fuseboxv1.WatchEvent{
		Id: e.ID, Type: eventTypes[e.Type], Dependency: e.Dependency, Zone: e.Zone,
		State: e.State, Previous: e.Previous, Generation: e.Generation, Origin: e.Origin,
		Reason: e.Reason, Actor: e.Actor, Revision: e.Revision,
	}
	if !e.At.IsZero() {
		w.At = timestamppb.New(e.At)
	}
	if e.Expires != nil {
		w.Expires = timestamppb.New(*e.Expires)
	}
	return w
}

// EventFromProto converts a Watch event (times in UTC; an unspecified or
// unknown type is "unknown").
func EventFromProto(m *fuseboxv1.WatchEvent) Event {
	e := Event{
		ID: m.GetId(), Type: "unknown", Dependency: m.GetDependency(), Zone: m.GetZone(),
		State: m.GetState(), Previous: m.GetPrevious(), Generation: m.GetGeneration(), Origin: m.GetOrigin(),
		Reason: m.GetReason(), Actor: m.GetActor(), Revision: m.GetRevision(),
	}
	for name, t := range eventTypes {
		if t == m.GetType() {
			e.Type = name
		}
	}
	if m.GetAt() != nil {
		e.At = m.GetAt().AsTime().UTC()
	}
	if m.GetExpires() != nil {
		t := m.GetExpires().AsTime().UTC()
		e.Expires = &t
	}
	return e
}
