package events

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestBrokerDeliversDropsAndReplays(t *testing.T) {
	dropped := 0
	b := NewBroker(2, 3, 0, func() { dropped++ })
	fast, err := b.Subscribe("a", 0)
	if err != nil {
		t.Fatal(err)
	}
	slow, _ := b.Subscribe("b", 0)
	for i := 0; i < 2; i++ {
		b.Publish(Event{Type: TypePolicy, Dependency: "d"})
		if e := <-fast.C; e.ID != uint64(i+1) {
			t.Fatalf("fast got ID %d, want %d", e.ID, i+1)
		}
	}
	// slow holds two; the third is dropped for it, delivered to fast.
	e3 := b.Publish(Event{Type: TypeOverride})
	if e3.ID != 3 || dropped != 1 {
		t.Fatalf("third event ID %d, dropped %d; want 3 and 1", e3.ID, dropped)
	}
	if e := <-fast.C; e.ID != 3 {
		t.Fatalf("fast got %d", e.ID)
	}
	if got := []uint64{(<-slow.C).ID, (<-slow.C).ID}; got[0] != 1 || got[1] != 2 {
		t.Fatalf("slow got %v", got)
	}
	// Replay: a new subscriber after ID 1 gets 2 and 3 (kept: the last 3).
	b.Publish(Event{Type: TypeTransition}) // ID 4; keep holds 2, 3, 4
	re, _ := b.Subscribe("a", 1)
	if got := []uint64{(<-re.C).ID, (<-re.C).ID}; got[0] != 2 || got[1] != 3 {
		t.Fatalf("replay got %v, want [2 3] (queue of 2)", got)
	}
	if n := len(b.Recent()); n != 3 {
		t.Fatalf("Recent() has %d, want 3", n)
	}
	if n := b.Subscribers(); n != 3 {
		t.Fatalf("Subscribers() = %d", n)
	}
	fast.Close()
	fast.Close()
	if e := <-fast.C; e.ID != 4 { // what was queued stays readable
		t.Fatalf("fast got %d, want the queued 4", e.ID)
	}
	if _, open := <-fast.C; open {
		t.Fatal("C open after Close")
	}
	b.Close()
	b.Close()
	for _, s := range []*Subscription{slow, re} {
		for range s.C { // drains and ends: closed by the broker
		}
		s.Close()
	}
	if _, err := b.Subscribe("a", 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe after Close: %v, want ErrClosed", err)
	}
	if e := b.Publish(Event{}); e.ID != 0 {
		t.Fatal("Publish after Close assigned an ID")
	}
}

func TestWatchReplaysOrRefuses(t *testing.T) {
	// IDs 101..106 of dependencies a, b, a, b, a, b; kept: 103..106.
	newBroker := func() *Broker {
		b := NewBroker(2, 4, 100, nil)
		for i := 0; i < 6; i++ {
			b.Publish(Event{Type: TypePolicy, Dependency: []string{"a", "b"}[i%2]})
		}
		return b
	}
	onlyA := func(e Event) bool { return e.Dependency == "a" }
	for _, tc := range []struct {
		name    string
		opts    WatchOptions
		want    []uint64 // replayed IDs
		gap     bool     // a *ReplayError: not all kept
		foreign bool     // a *ReplayError: an ID never published here
	}{
		{name: "new events only", opts: WatchOptions{}},
		{name: "up to date", opts: WatchOptions{After: 106}},
		{name: "all kept, more than the queue", opts: WatchOptions{After: 102}, want: []uint64{103, 104, 105, 106}},
		{name: "some kept", opts: WatchOptions{After: 104}, want: []uint64{105, 106}},
		{name: "filtered", opts: WatchOptions{After: 102, Filter: onlyA}, want: []uint64{103, 105}},
		{name: "no longer kept", opts: WatchOptions{After: 101}, gap: true},
		{name: "no longer kept, filtered", opts: WatchOptions{After: 101, Filter: onlyA}, gap: true},
		{name: "after the last", opts: WatchOptions{After: 107}, foreign: true},
		{name: "before the first", opts: WatchOptions{After: 100}, foreign: true},
		{name: "long before the first", opts: WatchOptions{After: 3}, foreign: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBroker()
			s, err := b.Watch(tc.opts)
			var re *ReplayError
			if tc.gap || tc.foreign {
				if !errors.As(err, &re) || re.Foreign() != tc.foreign {
					t.Fatalf("Watch(%+v) = %v, want a *ReplayError, foreign %v", tc.opts, err, tc.foreign)
				}
				if tc.gap && (re.Oldest != 103 || re.Last != 106 || !strings.Contains(err.Error(), "events 102 to 102 are no longer kept")) {
					t.Errorf("gap error = %+v: %v", re, err)
				}
				if tc.foreign && !strings.Contains(err.Error(), "is not from this coordinator (its events are numbered from 101, the last is 106)") {
					t.Errorf("foreign-ID error: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Watch(%+v): %v", tc.opts, err)
			}
			defer s.Close()
			var got []uint64
			for len(s.C) > 0 {
				got = append(got, (<-s.C).ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("replayed %v, want %v", got, tc.want)
			}
			// Live events follow the replay, the queue's full size free.
			live := []uint64{b.Publish(Event{Dependency: "a"}).ID, b.Publish(Event{Dependency: "a"}).ID}
			if got := []uint64{(<-s.C).ID, (<-s.C).ID}; !slices.Equal(got, live) || live[0] != 107 {
				t.Fatalf("live events %v, want %v from 107", got, live)
			}
		})
	}
	// A broker that has published nothing yet knows no ID.
	b := NewBroker(2, 4, 100, nil)
	var re *ReplayError
	if _, err := b.Watch(WatchOptions{After: 100}); !errors.As(err, &re) || !re.Foreign() {
		t.Fatalf("Watch after 100 on a fresh broker = %v, want a foreign-ID error", err)
	}
}

func TestWatchFallsBehindAndEnds(t *testing.T) {
	dropped := 0
	b := NewBroker(2, 8, 0, func() { dropped++ })
	w, err := b.Watch(WatchOptions{Filter: func(e Event) bool { return e.Dependency == "a" }})
	if err != nil {
		t.Fatal(err)
	}
	sse, _ := b.Subscribe("", 0)
	b.Publish(Event{Dependency: "a"}) // 1
	b.Publish(Event{Dependency: "b"}) // 2: filtered out, takes no room
	b.Publish(Event{Dependency: "a"}) // 3
	if dropped != 1 {                 // sse held 1 and 2 and lost 3
		t.Fatalf("dropped = %d after 3 events, want 1 (the SSE subscriber's)", dropped)
	}
	b.Publish(Event{Dependency: "a"}) // 4: w is full, so it ends
	if dropped != 3 || b.Subscribers() != 1 || w.Err() != ErrFellBehind {
		t.Fatalf("dropped %d, subscribers %d, Err %v; want 3, 1 and ErrFellBehind", dropped, b.Subscribers(), w.Err())
	}
	b.Publish(Event{Dependency: "a"}) // 5: w is gone, only the SSE one loses it
	if dropped != 4 {
		t.Fatalf("dropped = %d, want 4: an ended watcher counts once", dropped)
	}
	var got []uint64
	for e := range w.C { // what was queued, then closed
		got = append(got, e.ID)
	}
	if !slices.Equal(got, []uint64{1, 3}) {
		t.Fatalf("watcher read %v, want [1 3]", got)
	}
	w.Close() // after the broker ended it: a no-op
	// It resumes after the last ID it read.
	w2, err := b.Watch(WatchOptions{After: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := []uint64{(<-w2.C).ID, (<-w2.C).ID}; !slices.Equal(got, []uint64{4, 5}) {
		t.Fatalf("resumed with %v, want [4 5]", got)
	}
	w2.Close()
	if w2.Err() != nil {
		t.Fatalf("Err after Close = %v, want nil", w2.Err())
	}
	w3, _ := b.Watch(WatchOptions{})
	b.Close()
	if _, open := <-w3.C; open || w3.Err() != ErrClosed {
		t.Fatalf("after the broker's Close: C open %v, Err %v", open, w3.Err())
	}
	if _, err := b.Watch(WatchOptions{}); err != ErrClosed {
		t.Fatalf("Watch after Close = %v, want ErrClosed", err)
	}
	sse.Close()
}

// More subscribers than the limits allow: the broker refuses past the total
// and past one key's share, names the scope, counts each refusal, and
// admits again once a subscription closes.
func TestSubscriberLimits(t *testing.T) {
	b := NewBroker(2, 4, 0, nil)
	refused := map[string]int{}
	b.Limit(Limits{Total: 5, PerKey: 3}, func(scope string) { refused[scope]++ })
	var alice []*Subscription
	for i := range 3 {
		s, err := b.Subscribe("alice", 0)
		if err != nil {
			t.Fatalf("alice's stream %d: %v", i+1, err)
		}
		alice = append(alice, s)
	}
	_, err := b.Subscribe("alice", 0)
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrTooManySubscribers) || le.Scope != ScopeKey || le.Limit != 3 || le.Key != "alice" ||
		!strings.Contains(err.Error(), `3 streams open for "alice"`) {
		t.Fatalf("alice's 4th stream: %v, want a per-key LimitError", err)
	}
	if _, err := b.Watch(WatchOptions{Key: "alice"}); !errors.As(err, &le) || le.Scope != ScopeKey {
		t.Fatalf("alice's Watch past her limit: %v", err)
	}
	for i := range 2 {
		if _, err := b.Watch(WatchOptions{Key: "bob"}); err != nil {
			t.Fatalf("bob's stream %d: %v", i+1, err)
		}
	}
	if _, err := b.Subscribe("carol", 0); !errors.As(err, &le) || le.Scope != ScopeTotal || le.Limit != 5 {
		t.Fatalf("a 6th stream: %v, want the total LimitError", err)
	}
	if refused[ScopeKey] != 2 || refused[ScopeTotal] != 1 || b.Subscribers() != 5 {
		t.Fatalf("refusals %v, subscribers %d; want 2 per key, 1 total, 5 live", refused, b.Subscribers())
	}
	alice[0].Close()
	alice[0].Close() // idempotent: frees one slot, once
	if _, err := b.Subscribe("carol", 0); err != nil {
		t.Fatalf("after a close: %v", err)
	}
	if _, err := b.Subscribe("alice", 0); !errors.As(err, &le) || le.Scope != ScopeTotal {
		t.Fatalf("alice after carol took the freed slot: %v, want the total limit", err)
	}
	b.Close()
	if _, err := b.Subscribe("dave", 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
