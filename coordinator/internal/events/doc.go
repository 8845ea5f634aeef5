// Package events fans the coordinator's events (breaker transitions,
// overrides set and cleared, policy changes) out to the server-sent-events
// clients of /api/v1/events.
//
// A Broker never blocks its publisher: each subscriber has a bounded queue,
// and a subscriber too slow to drain it loses events (counted by the
// broker's Dropped callback) rather than slowing the observer down. The
// broker keeps the last few events so a reconnecting client that sends
// Last-Event-ID gets what it missed, when it is still there.
//
// Usage:
//
//	b := events.NewBroker(256, 512, droppedCounter.Inc)
//	sub, ok := b.Subscribe(lastEventID) // replays what it still keeps
//	defer sub.Close()
//	b.Publish(events.Event{Type: events.TypeOverride, Dependency: "db", State: "forced-open"})
//	for e := range sub.C { … } // until sub.Close or b.Close
package events
