package agent

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// joinTargets returns the gossip addresses to try: --join, then the other
// agents registered in etcd (when reachable).
func (a *Agent) joinTargets() []string {
	seen := map[string]bool{a.GossipAddr(): true}
	var out []string
	for _, j := range a.cfg.Join {
		if !seen[j] {
			seen[j] = true
			out = append(out, j)
		}
	}
	if a.opts.Sim.Peers != nil {
		for _, p := range a.opts.Sim.Peers() {
			if p != "" && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	if a.store != nil {
		ctx, cancel := context.WithTimeout(a.ctx, 2*time.Second)
		members, _, err := a.store.ListMembers(ctx)
		cancel()
		if err != nil && len(members) == 0 {
			a.lg.Debug("etcd members list failed", "err", err)
		} else {
			a.keys.Replace(keyEntries(members))
		}
		for _, m := range members {
			if m.Node == a.cfg.Name || m.GossipAddr == "" || seen[m.GossipAddr] {
				continue
			}
			seen[m.GossipAddr] = true
			out = append(out, m.GossipAddr)
		}
	}
	return out
}

// lookupKey reads one node's key from its etcd member entry (the gossip
// layer asks for nodes it has not seen listed yet).
func (a *Agent) lookupKey(ctx context.Context, node string) (gossip.KeyEntry, bool, error) {
	m, found, err := a.store.GetMember(ctx, node)
	if err != nil || !found {
		return gossip.KeyEntry{}, false, err
	}
	e, ok := gossip.RegisteredKey(m.Node, m.PublicKey)
	return e, ok, nil
}

func keyEntries(members []store.MemberEntry) []gossip.KeyEntry {
	out := make([]gossip.KeyEntry, 0, len(members))
	for _, m := range members {
		if e, ok := gossip.RegisteredKey(m.Node, m.PublicKey); ok {
			out = append(out, e)
		}
	}
	return out
}

// peerAddrs returns the gossip addresses of up to max other alive agents.
func (a *Agent) peerAddrs(max int) []string {
	var out []string
	for _, m := range a.gossip.Members() {
		if len(out) == max {
			break
		}
		if m.Name != a.cfg.Name && m.Meta.IsAgent() {
			out = append(out, m.Addr)
		}
	}
	return out
}

func (a *Agent) kickJoin() {
	select {
	case a.hub.joinKick <- struct{}{}:
	default:
	}
}

// joinLoop joins the cluster at start (always through a Join, which
// exchanges state) and again whenever this agent sees no other agent
// (everyone restarted), with backoff. While it has company it reconciles
// membership every RejoinInterval: up to gossip.RejoinFanout of the
// addresses of --join and of the etcd member registry that memberlist does
// not list as alive are joined again, and after a round that reached one
// of them (a heal) the next comes after HealRejoinInterval, for as long as
// rounds keep reaching missing agents. While some are missing, an agent
// that memberlist brings back (MemberJoined) starts a round at once, at
// most one per HealRejoinInterval: in a healing fleet the first revivals
// reach an agent by gossip before its own round comes, and its round is
// what makes the other side take it back (see DefaultHealRejoinInterval).
// Rounds within RejoinInterval of the last listing of the registry reuse
// it (etcd is asked at most once per RejoinInterval).
// memberlist forgets dead members, so without this two halves of a healed
// partition that each have company would never merge; a join is a
// push-pull state exchange, so records and rows converge with it.
func (a *Agent) joinLoop() {
	retry := backoff.New(backoff.Policy{Base: a.cfg.JoinRetryMin, Max: a.cfg.JoinRetryMax, Jitter: backoff.None}, nil)
	var lastRound, listed time.Time
	var targets []string // the registry as last listed
	// Rejoin rounds run beside the loop, at most maxRejoinRounds at once:
	// a round whose dials went into a partition waits out a TCP timeout,
	// and the next round must not wait for it (see rejoinRound).
	var rounds sync.WaitGroup
	defer rounds.Wait()
	slots := make(chan struct{}, maxRejoinRounds)
	for {
		if a.gossip.NumAgents() <= 1 {
			a.healing.Store(false)
		}
		if !lastRound.IsZero() && a.joined.Load() && a.gossip.NumAgents() > 1 {
			// Kicked rounds come at most every HealRejoinInterval.
			if wait := a.cfg.HealRejoinInterval - time.Since(lastRound); wait > 0 && !ctxtime.Sleep(a.ctx, wait) {
				return
			}
		}
		roundStart := time.Now()
		lastRound = roundStart
		// Counting other agents is not enough to be joined: a restarted
		// agent hears from peers that still know its address before it
		// exchanged any state with them, and would then serve its clients
		// without the fleet's breaker records (scale scenario (f)). A Join
		// is a push-pull: after one, the records are here.
		if a.gossip.NumAgents() > 1 && a.joined.Load() {
			retry.Reset()
			if targets == nil || time.Since(listed) >= a.cfg.RejoinInterval {
				targets, listed = a.joinTargets(), time.Now()
			}
			a.rejoinRound(targets, slots, &rounds)
		} else if targets := a.joinTargets(); len(targets) > 0 || a.gossip.NumAgents() > 1 {
			a.missingPeers.Store(false)
			n, err := 0, error(nil)
			if len(targets) > 0 {
				// One answer is a join (a push-pull of the whole
				// membership): the --join addresses and a few registered
				// agents at random, not all of a 500-agent registry one
				// after the other; a round that reaches none retries with
				// another sample.
				targets = joinSample(targets, len(a.cfg.Join)+gossip.RejoinFanout)
				n, err = a.gossip.Join(targets)
			}
			if n == 0 && a.gossip.NumAgents() > 1 {
				// Peers found this agent (they joined it, or still knew its
				// address): exchange state with a few of them.
				targets = a.peerAddrs(3)
				n, err = a.gossip.Join(targets)
			}
			switch {
			case err != nil && n == 0:
				a.lg.Warn("gossip join failed", "targets", targets, "err", err)
			case err != nil:
				a.lg.Info("gossip joined some peers", "joined", n, "targets", targets, "err", err)
			default:
				a.lg.Info("gossip joined", "joined", n, "targets", targets)
			}
			if n > 0 {
				a.joined.Store(true)
			}
			a.joinFailing.Store(n == 0)
		}
		d := retry.Next()
		if a.joined.Load() && a.gossip.NumAgents() > 1 {
			// Between half and one and a half intervals, at random: agents
			// that started their rounds at one moment (the fleet's start,
			// the last heal) would otherwise keep dialling in step, so that
			// after the next heal none tried again before the others.
			d = a.cfg.RejoinInterval/2 + rand.N(a.cfg.RejoinInterval)
			if a.healing.Load() {
				d = a.cfg.HealRejoinInterval
			}
			d = max(0, d-time.Since(roundStart))
		}
		t := time.NewTimer(d)
		select {
		case <-a.ctx.Done():
			t.Stop()
			return
		case <-a.hub.joinKick:
			t.Stop()
		case <-t.C:
		}
	}
}

// joinSample returns targets when there are at most n, else its first
// n-RejoinFanout (the --join addresses, which joinTargets lists first)
// followed by RejoinFanout others at random.
func joinSample(targets []string, n int) []string {
	if len(targets) <= n {
		return targets
	}
	keep := max(0, n-gossip.RejoinFanout)
	rest := slices.Clone(targets[keep:])
	rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	return append(slices.Clone(targets[:keep]), rest[:n-keep]...)
}

// maxRejoinRounds bounds the rejoin rounds dialling at once: with the
// default timings a round into a partition waits out one gossip TCP
// timeout (2 s), as long as the rejoin interval, so two keep the rounds
// on schedule.
const maxRejoinRounds = 2

// rejoinRound runs one membership reconciliation (gossip.Rejoin) beside
// the join loop, unless maxRejoinRounds are still dialling (then it skips
// this one). Rounds that waited for the one before them to finish kept
// every agent of a partitioned half in step, each dialling into the
// partition and waiting out the same TCP timeout: after the heal, no
// agent tried again until those timed out (up to a second at N = 200 in
// scale (e)). On their own schedule, the first of N agents to try again
// comes a fraction of the interval after the heal. A round that reached
// a missing agent (a heal) sets healing, which brings the next round
// after HealRejoinInterval, and kicks the loop.
func (a *Agent) rejoinRound(targets []string, slots chan struct{}, rounds *sync.WaitGroup) {
	select {
	case slots <- struct{}{}:
	default:
		a.lg.Debug("gossip rejoin round skipped: earlier rounds still dialling", "rounds", maxRejoinRounds)
		return
	}
	rounds.Go(func() {
		defer func() { <-slots }()
		missing, n, err := a.gossip.Rejoin(targets)
		a.healing.Store(len(missing) > 0 && n > 0)
		a.missingPeers.Store(len(missing) > 0)
		if len(missing) == 0 {
			return
		}
		if n == 0 {
			a.lg.Debug("gossip rejoin found none of the missing agents", "missing", len(missing), "err", err)
			return
		}
		a.lg.Info("gossip rejoined registered agents memberlist did not list as alive", "joined", n, "missing", len(missing))
		a.kickJoin()
	})
}
