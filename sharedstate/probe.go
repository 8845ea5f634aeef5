package sharedstate

import (
	"cmp"
	"slices"
	"strings"
)

// ProbeHolders returns the members that hold probe permits for a half-open
// breaker: the k members with the highest rendezvous score
// probeScore(dependency, generation, round, member), best first (ties, which
// need a 64-bit hash collision, go to the lower name). Duplicates in members
// are ignored, so the result has exactly min(k, distinct members) entries and
// does not depend on the order of members. A new round (after probeTimeout
// without a decisive result) or a new generation reshuffles the permits;
// adding or removing one member moves at most one permit.
func ProbeHolders(dependency string, generation, round uint64, members []string, k int) []string {
	if k <= 0 || len(members) == 0 {
		return nil
	}
	type scored struct {
		name  string
		score uint64
	}
	all := make([]scored, 0, len(members))
	for _, m := range members {
		all = append(all, scored{m, probeScore(dependency, generation, round, m)})
	}
	slices.SortFunc(all, func(a, b scored) int {
		return cmp.Or(cmp.Compare(b.score, a.score), strings.Compare(a.name, b.name))
	})
	all = slices.CompactFunc(all, func(a, b scored) bool { return a.name == b.name })
	if len(all) > k {
		all = all[:k]
	}
	out := make([]string, len(all))
	for i, s := range all {
		out[i] = s.name
	}
	return out
}

// ranksBefore reports whether member a (score sa) ranks before member b.
func ranksBefore(sa uint64, a string, sb uint64, b string) bool {
	if sa != sb {
		return sa > sb
	}
	return a < b
}

// probeScore is the rendezvous (highest random weight) score of member for
// the probe round (dependency, generation, round): FNV-1a over the fields,
// finished with a splitmix64 mix.
func probeScore(dependency string, generation, round uint64, member string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(dependency); i++ {
		h = (h ^ uint64(dependency[i])) * prime
	}
	h = (h ^ 0xff) * prime // separator: no name contains 0xff
	for _, v := range [2]uint64{generation, round} {
		for i := 0; i < 8; i++ {
			h = (h ^ (v & 0xff)) * prime
			v >>= 8
		}
	}
	for i := 0; i < len(member); i++ {
		h = (h ^ uint64(member[i])) * prime
	}
	return mix64(h)
}
