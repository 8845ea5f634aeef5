package sharedstate

import (
	"slices"
	"testing"
)

// The sorted order is cached between changes: a store or delete after a
// sortedValues call must show in the next one, and a caller changing its
// slice must not change what the next caller gets.
func TestDepMapSortedValuesFollowsChanges(t *testing.T) {
	m := newDepMap()
	names := func(ds []*depState) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.name)
		}
		return out
	}
	if got := m.sortedValues(); len(got) != 0 {
		t.Fatalf("empty map: got %v", names(got))
	}
	m.store("b", &depState{name: "b"})
	m.store("c", &depState{name: "c"})
	if got, want := names(m.sortedValues()), []string{"b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	m.store("a", &depState{name: "a"})
	first := m.sortedValues()
	if got, want := names(first), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("after a store: got %v, want %v", got, want)
	}
	first[0] = &depState{name: "z"}
	m.delete("b")
	if got, want := names(m.sortedValues()), []string{"a", "c"}; !slices.Equal(got, want) {
		t.Fatalf("after a delete and a caller's write: got %v, want %v", got, want)
	}
}
