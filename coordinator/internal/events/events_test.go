package events

import (
	"testing"
)

func TestBrokerDeliversDropsAndReplays(t *testing.T) {
	dropped := 0
	b := NewBroker(2, 3, func() { dropped++ })
	fast, ok := b.Subscribe(0)
	if !ok {
		t.Fatal("Subscribe failed")
	}
	slow, _ := b.Subscribe(0)
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
	re, _ := b.Subscribe(1)
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
	if _, ok := b.Subscribe(0); ok {
		t.Fatal("Subscribe after Close succeeded")
	}
	if e := b.Publish(Event{}); e.ID != 0 {
		t.Fatal("Publish after Close assigned an ID")
	}
}
