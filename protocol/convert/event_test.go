package convert

import (
	"reflect"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// An event survives the Admin API's Watch unchanged, each type keeps its
// name, and a type the wire does not know reads as "unknown".
func TestEventRoundTrip(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC)
	exp := at.Add(time.Hour)
	for _, e := range []Event{
		{ID: 7, Type: EventTransition, At: at, Dependency: "billing", Zone: "z1", State: "open", Previous: "closed",
			Generation: 3, Origin: "node-a", Reason: "failure rate 0.6"},
		{ID: 8, Type: EventOverride, At: at, Dependency: "billing", State: "forced-open", Reason: "drill", Actor: "eve",
			Expires: &exp, Revision: 42},
		{ID: 9, Type: EventPolicy, At: at, Dependency: "_default", State: "put", Revision: 43},
		{ID: 10, Type: EventPolicy, Dependency: "x", State: "deleted"},
	} {
		if got := EventFromProto(EventToProto(e)); !reflect.DeepEqual(got, e) {
			t.Errorf("round trip of %+v gave %+v", e, got)
		}
	}
	if got := EventFromProto(&fuseboxv1.WatchEvent{Id: 1}).Type; got != "unknown" {
		t.Errorf("unspecified type reads as %q, want unknown", got)
	}
	if got := EventToProto(Event{Type: "mystery"}).GetType(); got != fuseboxv1.EventType_EVENT_TYPE_UNSPECIFIED {
		t.Errorf("unknown type travels as %v", got)
	}
}
