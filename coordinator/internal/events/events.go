package events

import (
	"errors"
	"fmt"
	"sync"

	"github.com/fusebox-dev/fusebox/protocol/convert"
)

// Types of events.
const (
	TypeTransition = convert.EventTransition
	TypeOverride   = convert.EventOverride
	TypePolicy     = convert.EventPolicy
)

// Event is one thing that happened, as the SSE stream carries it (JSON):
// convert.Event, which the Admin API's Watch and fuseboxctl watch share.
type Event = convert.Event

// Why a subscription's C was closed by the broker (Subscription.Err).
var (
	// ErrClosed: the broker was closed (the coordinator is stopping), or
	// Watch was called after that.
	ErrClosed = errors.New("events: broker closed")
	// ErrFellBehind: a Watch subscription's queue was full when an event
	// came, so the broker ended it rather than lose the event silently.
	ErrFellBehind = errors.New("events: subscriber fell behind")
	// ErrTooManySubscribers is matched (errors.Is) by *LimitError.
	ErrTooManySubscribers = errors.New("events: too many subscribers")
)

// Limits bound a broker's live subscriptions, in all and per key (the
// subscriber's identity), so that clients who open streams and never
// close them cannot take the server's memory and file descriptors.
type Limits struct {
	// Total bounds the live subscriptions (optional, 0: no limit).
	Total int
	// PerKey bounds the live subscriptions of one key (optional, 0: no
	// limit).
	PerKey int
}

// Scopes of a LimitError, also the values its callback is called with.
const (
	ScopeTotal = "total"
	ScopeKey   = "key"
)

// LimitError is the error of Subscribe and Watch past a limit. It matches
// ErrTooManySubscribers.
type LimitError struct {
	Scope string // ScopeTotal or ScopeKey
	Limit int    // the limit reached
	Key   string // the subscriber's key
}

func (e *LimitError) Error() string {
	if e.Scope == ScopeKey {
		return fmt.Sprintf("events: %d streams open for %q, the most one identity may have", e.Limit, e.Key)
	}
	return fmt.Sprintf("events: %d streams open, the most the coordinator serves", e.Limit)
}

// Is reports whether target is ErrTooManySubscribers.
func (e *LimitError) Is(target error) bool { return target == ErrTooManySubscribers }

// ReplayError is Watch's error when it cannot replay every event after
// After: the broker no longer keeps them all, or it never published After
// (Foreign), which then comes from another broker: another coordinator, or
// this one before a restart.
type ReplayError struct {
	After  uint64 // the ID the subscriber asked to resume after
	First  uint64 // the broker's first ID
	Oldest uint64 // the oldest event still kept (0: none)
	Last   uint64 // the last event published (First-1: none yet)
}

// Foreign reports whether the broker never published After.
func (e *ReplayError) Foreign() bool { return e.After < e.First || e.After > e.Last }

func (e *ReplayError) Error() string {
	if e.Foreign() {
		return fmt.Sprintf("events: event %d is not from this coordinator (its events are numbered from %d, the last is %d): "+
			"it comes from another coordinator, or from before a restart", e.After, e.First, e.Last)
	}
	return fmt.Sprintf("events: events %d to %d are no longer kept (the oldest kept is %d)", e.After+1, e.Oldest-1, e.Oldest)
}

// Broker distributes events to subscribers. Its methods are safe for
// concurrent use.
type Broker struct {
	queue   int
	keep    int
	first   uint64 // the first event's ID
	dropped func() // called once per event a subscriber lost (optional)

	mu      sync.Mutex
	nextID  uint64  // the last ID assigned (first-1: none yet)
	recent  []Event // ring of the last keep events, oldest first
	subs    map[*Subscription]struct{}
	perKey  map[string]int // live subscriptions by key
	limits  Limits
	refused func(scope string)
	closed  bool
}

// NewBroker returns a broker whose subscribers queue up to queue events and
// which keeps the last keep events for replay. Its first event's ID is
// after+1 (0 numbers from 1; the coordinator numbers from its start time
// in microseconds, so that an ID from before a restart is never taken for
// one of the new process). dropped, if not nil, is called (under the
// broker's lock: keep it cheap) for each event a slow subscriber loses.
func NewBroker(queue, keep int, after uint64, dropped func()) *Broker {
	if queue <= 0 {
		queue = 256
	}
	return &Broker{queue: queue, keep: max(keep, 0), first: after + 1, nextID: after, dropped: dropped,
		subs: map[*Subscription]struct{}{}, perKey: map[string]int{}}
}

// Limit sets the limits of live subscriptions; refused, if not nil, is
// called (under the broker's lock: keep it cheap) with the scope of each
// refusal. Subscriptions already live stay.
func (b *Broker) Limit(l Limits, refused func(scope string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.limits, b.refused = l, refused
}

// admitLocked checks that a new subscription of key may start: the broker
// is open (else ErrClosed) and under its limits.
func (b *Broker) admitLocked(key string) error {
	if b.closed {
		return ErrClosed
	}
	var err *LimitError
	switch {
	case b.limits.Total > 0 && len(b.subs) >= b.limits.Total:
		err = &LimitError{Scope: ScopeTotal, Limit: b.limits.Total, Key: key}
	case b.limits.PerKey > 0 && b.perKey[key] >= b.limits.PerKey:
		err = &LimitError{Scope: ScopeKey, Limit: b.limits.PerKey, Key: key}
	default:
		return nil
	}
	if b.refused != nil {
		b.refused(err.Scope)
	}
	return err
}

// addLocked and removeLocked keep subs and perKey together.
func (b *Broker) addLocked(s *Subscription) {
	b.subs[s] = struct{}{}
	b.perKey[s.key]++
}

func (b *Broker) removeLocked(s *Subscription) {
	delete(b.subs, s)
	if b.perKey[s.key]--; b.perKey[s.key] <= 0 {
		delete(b.perKey, s.key)
	}
}

// Subscription is one subscriber's stream. Read C until it is closed (by
// Close, by the broker's Close, or when a Watch subscription falls
// behind); the events queued before that stay readable, and Err then
// says why.
type Subscription struct {
	C <-chan Event

	b      *Broker
	c      chan Event
	key    string
	once   sync.Once
	filter func(Event) bool // nil: every event
	strict bool             // a Watch subscription: ended, not thinned, when full
	err    error            // why the broker closed c; under b.mu
}

// WatchOptions configure a Watch subscription.
type WatchOptions struct {
	// Key is the subscriber's identity, for Limits.PerKey (optional).
	Key string
	// After replays the kept events with a larger ID first (optional,
	// default 0: only new events).
	After uint64
	// Filter, if not nil, admits only the events it returns true for,
	// replayed ones included. It is called under the broker's lock: keep
	// it cheap, and never call the broker from it.
	Filter func(Event) bool
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
		if s.filter != nil && !s.filter(e) {
			continue
		}
		select {
		case s.c <- e:
		default:
			if b.dropped != nil {
				b.dropped()
			}
			if s.strict {
				b.removeLocked(s)
				s.err = ErrFellBehind
				close(s.c)
			}
		}
	}
	return e
}

// Subscribe starts a subscription for key (the subscriber's identity,
// for Limits.PerKey). When after is non-zero, the kept events with a
// larger ID are queued first (as many as fit). It fails with ErrClosed
// after Close, and with a *LimitError past a limit.
func (b *Broker) Subscribe(key string, after uint64) (*Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.admitLocked(key); err != nil {
		return nil, err
	}
	c := make(chan Event, b.queue)
	s := &Subscription{C: c, b: b, c: c, key: key}
	if after > 0 {
		for _, e := range b.recent {
			if e.ID > after && len(c) < cap(c) {
				c <- e
			}
		}
	}
	b.addLocked(s)
	return s, nil
}

// Watch starts a subscription that never loses an event silently, for
// clients that resume by ID (the Admin API's Watch). It first queues every
// kept event after opts.After that opts.Filter admits (its queue grows by
// as many); when a later event finds its queue full, the broker ends it
// instead of dropping the event: C is closed after what is queued, Err
// returns ErrFellBehind, and the Dropped callback runs once.
//
// It fails with ErrClosed after Close, with a *LimitError past a limit,
// and with a *ReplayError when it cannot replay everything after
// opts.After.
func (b *Broker) Watch(opts WatchOptions) (*Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.admitLocked(opts.Key); err != nil {
		return nil, err
	}
	var replay []Event
	if after := opts.After; after > 0 {
		var oldest uint64
		if len(b.recent) > 0 {
			oldest = b.recent[0].ID
		}
		rerr := &ReplayError{After: after, First: b.first, Oldest: oldest, Last: b.nextID}
		if rerr.Foreign() {
			return nil, rerr
		}
		if after < b.nextID { // else up to date: nothing to replay
			if oldest == 0 || oldest > after+1 {
				return nil, rerr
			}
			for _, e := range b.recent[after+1-oldest:] {
				if opts.Filter == nil || opts.Filter(e) {
					replay = append(replay, e)
				}
			}
		}
	}
	c := make(chan Event, b.queue+len(replay))
	for _, e := range replay {
		c <- e
	}
	s := &Subscription{C: c, b: b, c: c, key: opts.Key, filter: opts.Filter, strict: true}
	b.addLocked(s)
	return s, nil
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

// Err returns why the broker closed C: ErrClosed when the broker closed,
// ErrFellBehind when a Watch subscription fell behind, nil while C is
// open or after the subscription's own Close.
func (s *Subscription) Err() error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.err
}

// Close ends the subscription and closes C. It is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.b.mu.Lock()
		defer s.b.mu.Unlock()
		if _, ok := s.b.subs[s]; ok {
			s.b.removeLocked(s)
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
		b.removeLocked(s)
		s.err = ErrClosed
		close(s.c)
	}
}
