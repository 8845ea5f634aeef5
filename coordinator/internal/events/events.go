package events

import (
	"sync"
	"time"
)

// Types of events.
const (
	TypeTransition = "transition" // a breaker changed state or generation
	TypeOverride   = "override"   // an override was set, replaced or cleared
	TypePolicy     = "policy"     // a policy was written or deleted
)

// Event is one thing that happened, as the SSE stream carries it (JSON).
type Event struct {
	// ID increases by one per event published by this broker (per
	// coordinator: two coordinators number their events independently).
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

// Broker distributes events to subscribers. Its methods are safe for
// concurrent use.
type Broker struct {
	queue   int
	keep    int
	dropped func() // called once per event a subscriber lost (optional)

	mu     sync.Mutex
	nextID uint64
	recent []Event // ring of the last keep events, oldest first
	subs   map[*Subscription]struct{}
	closed bool
}

// NewBroker returns a broker whose subscribers queue up to queue events and
// which keeps the last keep events for replay. dropped, if not nil, is
// called (under the broker's lock: keep it cheap) for each event a slow
// subscriber loses.
func NewBroker(queue, keep int, dropped func()) *Broker {
	if queue <= 0 {
		queue = 256
	}
	if keep < 0 {
		keep = 0
	}
	return &Broker{queue: queue, keep: keep, dropped: dropped, subs: map[*Subscription]struct{}{}}
}

// Subscription is one subscriber's stream. Read C until it is closed (by
// Close, or by the broker's Close).
type Subscription struct {
	C <-chan Event

	b    *Broker
	c    chan Event
	once sync.Once
}

// Publish assigns e its ID and delivers it to every subscriber that has room.
// It returns the event as delivered.
func (b *Broker) Publish(e Event) Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return e
	}
	b.nextID++
	e.ID = b.nextID
	if b.keep > 0 {
		if len(b.recent) == b.keep {
			copy(b.recent, b.recent[1:])
			b.recent = b.recent[:b.keep-1]
		}
		b.recent = append(b.recent, e)
	}
	for s := range b.subs {
		select {
		case s.c <- e:
		default:
			if b.dropped != nil {
				b.dropped()
			}
		}
	}
	return e
}

// Subscribe starts a subscription. When after is non-zero, the kept events
// with a larger ID are queued first (as many as fit). The second result is
// false after Close.
func (b *Broker) Subscribe(after uint64) (*Subscription, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, false
	}
	c := make(chan Event, b.queue)
	s := &Subscription{C: c, b: b, c: c}
	if after > 0 {
		for _, e := range b.recent {
			if e.ID > after && len(c) < cap(c) {
				c <- e
			}
		}
	}
	b.subs[s] = struct{}{}
	return s, true
}

// Subscribers returns the number of live subscriptions.
func (b *Broker) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// Recent returns a copy of the kept events, oldest first.
func (b *Broker) Recent() []Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Event(nil), b.recent...)
}

// Close ends the subscription and closes C. It is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.b.mu.Lock()
		defer s.b.mu.Unlock()
		if _, ok := s.b.subs[s]; ok {
			delete(s.b.subs, s)
			close(s.c)
		}
	})
}

// Close ends every subscription (their C are closed) and makes Publish a
// no-op. It is idempotent.
func (b *Broker) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for s := range b.subs {
		delete(b.subs, s)
		close(s.c)
	}
}
