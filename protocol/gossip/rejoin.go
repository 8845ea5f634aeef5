package gossip

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
)

// Missing returns the targets (gossip addresses, host:port) that no alive
// member has as its address, in order: the ones a membership reconcile
// should join again. memberlist forgets dead members, so two halves of a
// healed partition that each have company never merge unless someone joins
// across; agents and the coordinator's observer call Rejoin periodically.
func (g *Gossip) Missing(targets []string) []string {
	g.membersMu.Lock()
	defer g.membersMu.Unlock()
	var out []string
	for _, t := range targets {
		if t == g.addr {
			continue
		}
		if _, alive := g.memberAddrs[t]; !alive {
			out = append(out, t)
		}
	}
	return out
}

// RejoinFanout is how many of the missing targets one Rejoin joins: one
// join across a healed partition merges both halves' member lists (a join
// is a push-pull of the whole membership), so a few suffice, and a bound
// keeps an agent from dialling every agent of the etcd registry (hundreds)
// each round while the other half is unreachable.
const RejoinFanout = 3

// Rejoin joins up to RejoinFanout targets, chosen at random among those
// Missing reports, all at once (none missing: nothing is done): a round
// takes at most one dial timeout however many are unreachable. It returns
// every missing target, how many of the chosen ones answered, and their
// errors. A join is a push-pull state exchange, so records and rows
// converge with it; a target that answers is joined twice (see below).
func (g *Gossip) Rejoin(targets []string) (missing []string, joined int, err error) {
	missing = g.Missing(targets)
	if len(missing) == 0 {
		return nil, 0, nil
	}
	chosen := slices.Clone(missing)
	rand.Shuffle(len(chosen), func(i, j int) { chosen[i], chosen[j] = chosen[j], chosen[i] })
	chosen = chosen[:min(len(chosen), RejoinFanout)]
	ns := make([]int, len(chosen))
	errs := make([]error, len(chosen))
	var wg sync.WaitGroup
	for i, t := range chosen {
		wg.Go(func() {
			if ns[i], errs[i] = g.Join([]string{t}); ns[i] > 0 {
				// Twice: memberlist takes a member it holds dead back only
				// at a higher incarnation, and each side of a join learns
				// of its own death in the join itself (and refutes, to the
				// next incarnation) after it sent its state. The second
				// exchange carries both refutations: the two take each
				// other back at once instead of when the refutations
				// arrive by gossip or a later round.
				g.Join([]string{t})
			}
		})
	}
	wg.Wait()
	for _, n := range ns {
		joined += n
	}
	return missing, joined, errors.Join(errs...)
}
