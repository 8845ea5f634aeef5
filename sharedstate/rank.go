package sharedstate

import (
	"cmp"
	"slices"
	"strings"
)

// ProposerOrder returns nodes in the order in which they propose the record
// of generation gen of dependency: the first Proposers (EngineConfig) of the
// live agents of the scope propose a trip at once, the next group after
// ProposerDelay, and so on. Tools and tests use it to tell who proposes.
func ProposerOrder(dependency string, gen uint64, nodes []string) []string {
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(a, b string) int {
		sa, sb := probeScore(dependency, gen, proposerSalt, a), probeScore(dependency, gen, proposerSalt, b)
		return cmp.Or(cmp.Compare(sb, sa), strings.Compare(a, b)) // as ranksBefore
	})
	return out
}
