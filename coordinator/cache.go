package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator/internal/events"
	"github.com/fusebox-dev/fusebox/coordinator/internal/fleet"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// cacheStartTimeout bounds how long Start waits for the first list of
// policies and overrides (on top of Start's context).
const cacheStartTimeout = 15 * time.Second

// cache follows the policies and overrides in etcd (store.Watch: list,
// then watch from the next revision, re-list on compaction and on a rewind)
// for the fleet view and the events stream. It keeps the last good effective policy of
// every dependency: an invalid value in etcd is logged, counted and
// ignored. Admin reads go to etcd directly; the cache serves the fleet view,
// which must not wait for etcd.
//
// It implements fleet.Source and store.RewindHandler. Its methods are safe
// for concurrent use; the Handler methods are called by the watcher's
// single goroutine.
type cache struct {
	log     *slog.Logger
	publish func(events.Event)
	invalid func(kind string)
	rewinds func(reason store.RewindReason)
	clock   sharedstate.Clock

	mu        sync.RWMutex
	st        store.State
	def       sharedstate.Policy
	effective map[string]sharedstate.Policy // last good effective policy per dependency
	synced    bool
	rewound   bool // the next Sync follows a rewind: publish all it holds

	syncedCh chan struct{}
	restarts func()
	watcher  *store.Watcher
}

func newCache(log *slog.Logger, publish func(events.Event), invalid func(kind string), rewinds func(store.RewindReason),
	clock sharedstate.Clock) *cache {
	return &cache{
		log: log, publish: publish, invalid: invalid, rewinds: rewinds, clock: clock,
		def:       sharedstate.DefaultPolicy(),
		effective: map[string]sharedstate.Policy{},
		syncedCh:  make(chan struct{}),
		st:        store.State{Policies: map[string]store.PolicyEntry{}, Overrides: map[string]store.OverrideEntry{}},
	}
}

// start starts the watcher and waits for its first complete state.
func (c *cache) start(ctx context.Context, s *store.Store, restarts func()) error {
	c.restarts = restarts
	c.watcher = s.Watch(context.Background(), c, store.WatchOptions{})
	t := time.NewTimer(cacheStartTimeout)
	defer t.Stop()
	select {
	case <-c.syncedCh:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("coordinator: waiting for etcd: %w", ctx.Err())
	case <-t.C:
		return fmt.Errorf("coordinator: etcd did not answer within %v: is it reachable (--etcd, TLS, credentials)?", cacheStartTimeout)
	}
}

func (c *cache) close() {
	if c.watcher != nil {
		c.watcher.Close()
	}
}

// etcdStatus is how the cache follows etcd (nil before start).
func (c *cache) etcdStatus() *store.SyncStatus {
	if c == nil || c.watcher == nil {
		return nil
	}
	st := c.watcher.Status()
	return &st
}

// ---- store.Handler ----

// Sync replaces the state. After the first one (a re-list after a
// compaction, a lost watch or a rewind) it publishes what changed
// meanwhile; after a rewind, everything it holds (a mod revision equal to
// one of the old history proves nothing).
func (c *cache) Sync(st store.State) {
	c.mu.Lock()
	old, first, rewound := c.st, !c.synced, c.rewound
	c.st = st
	c.synced, c.rewound = true, false
	c.recomputeLocked()
	c.mu.Unlock()
	if first {
		close(c.syncedCh)
		return
	}
	if c.restarts != nil {
		c.restarts()
	}
	for name, e := range st.Policies {
		if o, ok := old.Policies[name]; rewound || !ok || o.ModRevision != e.ModRevision {
			c.publishEvent(store.Event{Kind: store.PolicyPut, Name: name, Revision: e.ModRevision, Policy: e})
		}
	}
	for name := range old.Policies {
		if _, ok := st.Policies[name]; !ok {
			c.publishEvent(store.Event{Kind: store.PolicyDeleted, Name: name, Revision: st.Revision})
		}
	}
	for name, e := range st.Overrides {
		if o, ok := old.Overrides[name]; rewound || !ok || o.ModRevision != e.ModRevision {
			c.publishEvent(store.Event{Kind: store.OverridePut, Name: name, Revision: e.ModRevision, Override: e})
		}
	}
	for name := range old.Overrides {
		if _, ok := st.Overrides[name]; !ok {
			c.publishEvent(store.Event{Kind: store.OverrideDeleted, Name: name, Revision: st.Revision})
		}
	}
}

// Apply applies the changes of one watch response and publishes them.
func (c *cache) Apply(rev int64, evs []store.Event) {
	c.mu.Lock()
	c.st.Revision = rev
	defaultChanged := false
	for _, e := range evs {
		switch e.Kind {
		case store.PolicyPut:
			c.st.Policies[e.Name] = e.Policy
		case store.PolicyDeleted:
			delete(c.st.Policies, e.Name)
			delete(c.effective, e.Name)
		case store.OverridePut:
			c.st.Overrides[e.Name] = e.Override
		case store.OverrideDeleted:
			delete(c.st.Overrides, e.Name)
		}
		if (e.Kind == store.PolicyPut || e.Kind == store.PolicyDeleted) && e.Name == sharedstate.DefaultPolicyName {
			defaultChanged = true
		} else if e.Kind == store.PolicyPut {
			c.refreshLocked(e.Name)
		}
	}
	if defaultChanged {
		c.recomputeLocked()
	}
	c.mu.Unlock()
	for _, e := range evs {
		c.publishEvent(e)
	}
}

// Rewound logs and counts a rewind: etcd no longer holds the history the
// cache followed (restored, wiped, another cluster). The watcher's next
// Sync replaces everything.
func (c *cache) Rewound(r store.Rewind) {
	c.mu.Lock()
	c.rewound = true
	c.mu.Unlock()
	c.log.Warn("etcd's history went back (a restore, a wipe or another cluster?): listing policies and overrides again from scratch",
		"reason", string(r.Reason), "from_revision", r.FromRevision, "to_revision", r.ToRevision,
		"from_cluster", r.FromCluster, "to_cluster", r.ToCluster)
	if c.rewinds != nil {
		c.rewinds(r.Reason)
	}
}

// Invalid logs and counts a value the watcher skipped.
func (c *cache) Invalid(err *store.InvalidValueError) {
	kind := "policy"
	if strings.Contains(err.Key, "/overrides/") {
		kind = "override"
	}
	c.log.Warn("invalid "+kind+" in etcd ignored; the last good value stays in force", "key", err.Key,
		"mod_revision", err.ModRevision, "err", err.Err)
	if c.invalid != nil {
		c.invalid(kind)
	}
}

// Error logs a failed list or watch (the watcher retries).
func (c *cache) Error(err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, store.ErrClosed) {
		return
	}
	c.log.Warn("etcd watch of policies and overrides failed; retrying", "err", err)
	if c.restarts != nil {
		c.restarts()
	}
}

// recomputeLocked recomputes the default and every effective policy,
// keeping the last good one where the combination is invalid.
func (c *cache) recomputeLocked() {
	c.def = c.st.Default()
	for name := range c.effective {
		if _, ok := c.st.Policies[name]; !ok {
			delete(c.effective, name)
		}
	}
	for name := range c.st.Policies {
		if name != sharedstate.DefaultPolicyName {
			c.refreshLocked(name)
		}
	}
}

func (c *cache) refreshLocked(name string) {
	p, err := c.st.Effective(name)
	if err != nil {
		c.log.Warn("policy invalid over the current default; the last good one stays in force", "dependency", name, "err", err)
		if c.invalid != nil {
			c.invalid("policy")
		}
		return
	}
	c.effective[name] = p
}

// publishEvent turns a store event into an SSE event.
func (c *cache) publishEvent(e store.Event) {
	ev := events.Event{Dependency: e.Name, Revision: e.Revision, At: c.clock.Now().UTC()}
	switch e.Kind {
	case store.PolicyPut:
		ev.Type, ev.State = events.TypePolicy, "put"
	case store.PolicyDeleted:
		ev.Type, ev.State = events.TypePolicy, "deleted"
	case store.OverridePut:
		ev.Type, ev.State = events.TypeOverride, e.Override.State.String()
		ev.Reason, ev.Actor = e.Override.Reason, e.Override.Actor
		if !e.Override.Expires.IsZero() {
			exp := e.Override.Expires
			ev.Expires = &exp
		}
	case store.OverrideDeleted:
		ev.Type, ev.State = events.TypeOverride, "none"
	default:
		return
	}
	c.publish(ev)
}

// ---- fleet.Source ----

// Policy returns the effective policy of dependency.
func (c *cache) Policy(dependency string) sharedstate.Policy {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if p, ok := c.effective[dependency]; ok {
		return p
	}
	p := c.def
	p.Dependency = dependency
	return p
}

// Override returns the override of dependency in force at now.
func (c *cache) Override(dependency string, now time.Time) (fleet.Override, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.st.Overrides[dependency]
	if !ok || !e.ActiveAt(now) {
		return fleet.Override{}, false
	}
	return fleet.Override{State: e.State, Reason: e.Reason, Actor: e.Actor, Created: e.Created, Expires: e.Expires}, true
}

// Dependencies returns the dependencies with a policy or an override.
func (c *cache) Dependencies() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.st.Policies)+len(c.st.Overrides))
	for name := range c.st.Policies {
		if name != sharedstate.DefaultPolicyName {
			out = append(out, name)
		}
	}
	for name := range c.st.Overrides {
		if _, ok := c.st.Policies[name]; !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// storedPolicy returns the policy stored for dependency (its patch), if any.
func (c *cache) storedPolicy(dependency string) (store.PolicyEntry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.st.Policies[dependency]
	return e, ok
}

// overridesInForce returns the overrides in force at now.
func (c *cache) overridesInForce(now time.Time) []store.OverrideEntry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []store.OverrideEntry
	for _, e := range c.st.Overrides {
		if e.ActiveAt(now) {
			out = append(out, e)
		}
	}
	return out
}

// defaultPolicy returns the fleet default in force.
func (c *cache) defaultPolicy() sharedstate.Policy {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.def
}

// counts returns the number of policies and of overrides in force by state.
func (c *cache) counts(now time.Time) (int, map[string]int) {
	if c == nil {
		return 0, map[string]int{}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	forced := map[string]int{}
	for _, e := range c.st.Overrides {
		if e.ActiveAt(now) {
			forced[e.State.String()]++
		}
	}
	return len(c.st.Policies), forced
}
