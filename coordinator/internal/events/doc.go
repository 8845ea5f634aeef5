// Package events fans the coordinator's events (breaker transitions,
// overrides set and cleared, policy changes) out to the server-sent-events
// clients of /api/v1/events and to the Admin API's Watch streams.
//
// A Broker never blocks its publisher: each subscriber has a bounded queue.
// A Subscribe subscriber (SSE) too slow to drain it loses events (counted by
// the broker's Dropped callback) rather than slowing the observer down; a
// Watch subscriber is ended instead (Err returns ErrFellBehind), so that it
// never misses an event without knowing. The broker keeps the last few
// events so a reconnecting client that sends Last-Event-ID (SSE) or an
// after ID (Watch) gets what it missed, when it is still there; Watch
// refuses with a *ReplayError when it is not. Limits bound the live
// subscriptions in all and per key (the subscriber's identity): past them
// Subscribe and Watch refuse with a *LimitError.
//
// Usage:
//
//	b := events.NewBroker(256, 512, 0, droppedCounter.Inc) // IDs from 1
//	b.Limit(events.Limits{Total: 1000, PerKey: 100}, refusedCounter) // optional
//	sub, err := b.Subscribe(identity, lastEventID) // replays what it still keeps
//	defer sub.Close()
//	b.Publish(events.Event{Type: events.TypeOverride, Dependency: "db", State: "forced-open"})
//	for e := range sub.C { … } // until sub.Close or b.Close
//
//	w, err := b.Watch(events.WatchOptions{After: lastSeenID}) // all kept events after it, or an error
//	…
//	for e := range w.C { … }
//	err = w.Err() // ErrFellBehind, ErrClosed, or nil after w.Close
package events
