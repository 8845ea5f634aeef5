package coordinator

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/hashicorp/memberlist"
)

// startGossip starts the fleet observer's gossip member and registers the
// coordinator in etcd (role observer), so agents and operators can find it.
func (c *Coordinator) startGossip() error {
	kr, err := c.keyring()
	if err != nil {
		return err
	}
	gc := gossip.DefaultConfig()
	gc.BindAddr = c.cfg.GossipAddr
	gc.AdvertiseAddr = c.cfg.GossipAdvertiseAddr
	gc.Keyring = kr
	gc.Logger = c.log
	for _, f := range c.opts.gossip {
		f(&gc)
	}
	gc.Name = c.cfg.Name
	gc.Meta = gossip.NodeMeta{Role: gossip.RoleObserver, Software: version(), GRPCAddr: c.GRPCAddr(), HTTPAddr: c.HTTPAddr()}
	gc.Handler = c.view
	gc.Events = c.view
	gc.Relay = false
	// The observer verifies what agents sign, with the keys of their etcd
	// member entries, as agents do.
	c.keys = gossip.NewKeyDirectory(c.lookupKey)
	gc.Keys = c.keys.Key
	g, err := gossip.New(gc)
	if err != nil {
		c.keys.Close()
		c.keys = nil
		return cliflag.AsListenError("gossip-addr", c.cfg.GossipAddr, fmt.Errorf("coordinator: fleet observer: %w", err))
	}
	c.gossipMu.Lock()
	c.gossip = g
	c.gossipMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reg, err := c.store.Register(ctx, store.Member{Node: c.cfg.Name, Role: string(gossip.RoleObserver),
		Version: version(), GossipAddr: g.Addr(), APIAddr: c.GRPCAddr(), Wire: int(protocol.MaxVersion)})
	if err != nil {
		// Not fatal: the observer works without it, agents just cannot
		// find the coordinator through etcd.
		c.log.Warn("could not register in etcd", "err", err)
	} else {
		c.reg8n = reg
	}
	return nil
}

func (c *Coordinator) keyring() (*memberlist.Keyring, error) {
	if c.cfg.KeyringFile == "" {
		return nil, nil
	}
	kr, err := gossip.LoadKeyringFile(c.cfg.KeyringFile)
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	return kr, nil
}

func (c *Coordinator) gossipNode() *gossip.Gossip {
	c.gossipMu.Lock()
	defer c.gossipMu.Unlock()
	return c.gossip
}

// joinLoop joins --join, or the agents registered in etcd, and keeps
// trying while the observer sees no agent (agents started later, or all
// restarted). Once it sees agents it reconciles membership every
// RejoinInterval like an agent does (gossip.Rejoin): up to
// gossip.RejoinFanout of the addresses of --join and of the agents
// registered in etcd that memberlist does not list as alive are joined
// again, so the observer heals after a partition although
// memberlist forgets dead members. It asks the fleet view, whose members
// come from memberlist's event callbacks, for the agent count, and
// gossip.Gossip's own member table for addresses, never memberlist's
// Members (pointers into state memberlist rewrites without a lock the
// caller can take, hashicorp/memberlist#306).
func (c *Coordinator) joinLoop() {
	retry := backoff.New(backoff.Policy{Base: time.Second, Max: 30 * time.Second, Jitter: backoff.None}, nil)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-timer.C:
		}
		g := c.gossipNode()
		if c.view.AliveAgents() == 0 {
			if addrs := c.joinAddrs(); len(addrs) > 0 {
				if n, err := g.Join(addrs); err != nil && n == 0 {
					c.log.Debug("fleet observer could not join yet", "addrs", addrs, "err", err)
				} else {
					c.log.Info("fleet observer joined the gossip", "contacted", n)
					retry.Reset()
				}
			}
		} else {
			retry.Reset()
			if missing, n, err := g.Rejoin(c.rejoinTargets()); len(missing) > 0 {
				if n > 0 {
					c.log.Info("fleet observer rejoined registered agents memberlist did not list as alive", "joined", n, "targets", missing)
				} else {
					c.log.Debug("fleet observer rejoin found none of the missing agents", "targets", missing, "err", err)
				}
			}
		}
		next := c.cfg.RejoinInterval
		if c.view.AliveAgents() == 0 {
			next = retry.Next()
		}
		timer.Reset(next)
	}
}

// joinAddrs is --join, else the gossip addresses of the agents registered
// in etcd.
func (c *Coordinator) joinAddrs() []string {
	if len(c.cfg.Join) > 0 {
		return c.cfg.Join
	}
	return c.registeredAgents()
}

// rejoinTargets is --join and the gossip addresses of the agents
// registered in etcd, without repeats.
func (c *Coordinator) rejoinTargets() []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range append(slices.Clone(c.cfg.Join), c.registeredAgents()...) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// registeredAgents are the gossip addresses of the agents registered in
// etcd (none when etcd cannot be read).
func (c *Coordinator) registeredAgents() []string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	members, _, err := c.store.ListMembers(ctx)
	if err != nil && len(members) == 0 {
		return nil
	}
	if c.keys != nil {
		entries := make([]gossip.KeyEntry, 0, len(members))
		for _, m := range members {
			if e, ok := gossip.RegisteredKey(m.Node, m.PublicKey); ok {
				entries = append(entries, e)
			}
		}
		c.keys.Replace(entries)
	}
	var addrs []string
	self := c.GossipAddr()
	for _, m := range members {
		if m.GossipAddr != "" && m.GossipAddr != self && m.Node != c.cfg.Name && m.Role != string(gossip.RoleObserver) {
			addrs = append(addrs, m.GossipAddr)
		}
	}
	return addrs
}

// lookupKey reads one node's key from its etcd member entry.
func (c *Coordinator) lookupKey(ctx context.Context, node string) (gossip.KeyEntry, bool, error) {
	m, found, err := c.store.GetMember(ctx, node)
	if err != nil || !found {
		return gossip.KeyEntry{}, false, err
	}
	e, ok := gossip.RegisteredKey(m.Node, m.PublicKey)
	return e, ok, nil
}

// tickLoop runs the fleet view's periodic work.
func (c *Coordinator) tickLoop() {
	t := time.NewTicker(c.opts.tickInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			now := c.clock.Now()
			c.view.Tick(now, c.cache)
			c.history.Tick(now, func(dep string) time.Duration { return c.cache.Policy(dep).Breaker.Window.Std() })
		}
	}
}
