package sharedstate

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestProbeHoldersProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := rapid.SliceOfN(rapid.StringMatching(`n[0-9]{1,2}`), 0, 30).Draw(t, "members")
		k := rapid.IntRange(1, 6).Draw(t, "k")
		gen := rapid.Uint64Range(0, 5).Draw(t, "gen")
		round := rapid.Uint64Range(0, 5).Draw(t, "round")
		distinct := slices.Compact(slices.Sorted(slices.Values(names)))

		got := ProbeHolders("dep", gen, round, names, k)
		if want := min(k, len(distinct)); len(got) != want {
			t.Fatalf("%d holders, want min(%d, %d) = %d", len(got), k, len(distinct), want)
		}
		seen := map[string]bool{}
		for _, h := range got {
			if seen[h] || !slices.Contains(distinct, h) {
				t.Fatalf("holder %q duplicated or not a member", h)
			}
			seen[h] = true
		}
		perm := rapid.Permutation(names).Draw(t, "permuted")
		if other := ProbeHolders("dep", gen, round, perm, k); !slices.Equal(got, other) {
			t.Fatalf("order of members changed the holders: %v vs %v", got, other)
		}
		if len(distinct) > k {
			changed := false
			for r := round + 1; r < round+64 && !changed; r++ {
				changed = !slices.Equal(slices.Sorted(slices.Values(got)),
					slices.Sorted(slices.Values(ProbeHolders("dep", gen, r, names, k))))
			}
			if !changed {
				t.Fatalf("64 probe rounds chose the same holders %v", got)
			}
		}
	})
}

func TestProbeHoldersMinimalDisruption(t *testing.T) {
	var members []string
	for i := range 20 {
		members = append(members, fmt.Sprintf("node-%02d", i))
	}
	before := ProbeHolders("dep", 1, 0, members, 3)
	// Removing a non-holder changes nothing.
	for _, m := range members {
		if slices.Contains(before, m) {
			continue
		}
		rest := slices.DeleteFunc(slices.Clone(members), func(s string) bool { return s == m })
		if after := ProbeHolders("dep", 1, 0, rest, 3); !slices.Equal(before, after) {
			t.Fatalf("removing non-holder %s moved permits: %v -> %v", m, before, after)
		}
	}
}
