package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// newEtcdClient dials Config.Etcd with its TLS and user/password settings.
// The client connects lazily: an unreachable etcd is not an error here.
func newEtcdClient(cfg Config, lg *slog.Logger) (*store.Client, error) {
	cli, err := store.Dial(context.Background(), cfg.etcdOptions())
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	lg.Debug("etcd client created", "endpoints", cfg.Etcd)
	return cli, nil
}

// policySource says where the policies in force came from.
type policySource int32

const (
	sourceDefault policySource = iota // built-in or WithDefaultPolicy
	sourceCache                       // the data dir's cache
	sourceEtcd                        // a list or watch from etcd
)

var policySourceNames = [...]string{"default", "cache", "etcd"}

// policyState is what the agent applied from etcd (or the cache): the last
// good values, which it caches on disk.
type policyState struct {
	mu     sync.Mutex
	def    sharedstate.Policy // the built-in default (no policies/_default)
	st     store.State
	source policySource
}

func (p *policyState) init(def *sharedstate.Policy) {
	p.def = sharedstate.DefaultPolicy()
	if def != nil {
		p.def = *def
		p.def.Dependency = sharedstate.DefaultPolicyName
	}
	p.st = store.State{Policies: map[string]store.PolicyEntry{}, Overrides: map[string]store.OverrideEntry{}}
}

// loadCache applies the on-disk cache, if any: the agent enforces the last
// good policies from its first tick, whether etcd answers or not.
func (a *Agent) loadCache() {
	c, err := loadCache(a.cfg.DataDir)
	if err != nil {
		a.lg.Warn("policy cache unreadable, starting from defaults", "err", err)
		return
	}
	if c == nil {
		return
	}
	st := store.State{Revision: c.Revision, ClusterID: c.ClusterID, Policies: map[string]store.PolicyEntry{}, Overrides: map[string]store.OverrideEntry{}}
	for name, raw := range c.Policies {
		if _, err := sharedstate.DecodePolicy(sharedstate.Policy{}, raw); err != nil {
			a.lg.Warn("policy cache: entry skipped", "policy", name, "err", err)
			continue
		}
		st.Policies[name] = store.PolicyEntry{Name: name, Value: raw, ModRevision: c.PolicyRevisions[name]}
	}
	for dep, raw := range c.Overrides {
		o, err := sharedstate.ParseOverride(raw)
		if err != nil {
			a.lg.Warn("policy cache: override skipped", "dependency", dep, "err", err)
			continue
		}
		st.Overrides[dep] = store.OverrideEntry{Dependency: dep, Override: o, ModRevision: c.OverrideRevisions[dep]}
	}
	a.syncState(st, sourceCache)
	a.policiesLoaded.Store(true)
	a.lg.Info("policies loaded from cache", "file", CacheFile, "revision", c.Revision,
		"policies", len(st.Policies), "overrides", len(st.Overrides), "saved", c.Saved)
}

// syncState replaces everything applied with st.
func (a *Agent) syncState(st store.State, src policySource) {
	p := &a.policies
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.st
	p.st = st
	p.source = src
	a.applyDefaultLocked()
	for name, e := range st.Policies {
		if name != sharedstate.DefaultPolicyName {
			a.applyPolicyLocked(name, e)
		}
	}
	for name := range old.Policies {
		if _, ok := st.Policies[name]; !ok && name != sharedstate.DefaultPolicyName {
			a.removePolicyLocked(name)
		}
	}
	for dep, e := range st.Overrides {
		a.applyOverrideLocked(dep, &e)
	}
	for dep := range old.Overrides {
		if _, ok := st.Overrides[dep]; !ok {
			a.applyOverrideLocked(dep, nil)
		}
	}
}

func (a *Agent) applyDefaultLocked() {
	def := a.policies.def
	if e, ok := a.policies.st.Policies[sharedstate.DefaultPolicyName]; ok {
		p, err := e.Policy(sharedstate.Policy{})
		if err != nil {
			a.lg.Error("policies/_default invalid, keeping the previous default", "err", err)
			a.m.policyRejected.Inc()
			return
		}
		def = p
	}
	// A dependency whose policy changes gets a new snapshot, which the
	// engine's OnChange pushes to the sessions.
	if err := a.eng.SetDefaultPolicy(def); err != nil {
		a.lg.Error("default policy applied with errors", "err", err)
		a.m.policyRejected.Inc()
	}
}

func (a *Agent) applyPolicyLocked(name string, e store.PolicyEntry) {
	if err := a.eng.SetPolicyDocument(name, e.Value); err != nil {
		a.lg.Error("policy refused, keeping the last good one", "key", a.policyKey(name), "err", err)
		a.m.policyRejected.Inc()
	}
}

func (a *Agent) removePolicyLocked(name string) { a.eng.RemovePolicy(name) }

func (a *Agent) applyOverrideLocked(dep string, e *store.OverrideEntry) {
	var o *sharedstate.Override
	if e != nil {
		ov := e.Override
		o = &ov
	}
	if err := a.eng.SetOverride(dep, o); err != nil {
		a.lg.Error("override refused", "key", a.overrideKey(dep), "err", err)
		a.m.policyRejected.Inc()
	}
}

func (a *Agent) policyKey(name string) string  { return a.cfg.EtcdPrefix + "policies/" + name }
func (a *Agent) overrideKey(dep string) string { return a.cfg.EtcdPrefix + "overrides/" + dep }

func (p *policyState) counts() (policies, overrides int, rev int64, src policySource) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.st.Policies), len(p.st.Overrides), p.st.Revision, p.source
}

// saveCache writes the state applied now to the data dir.
func (a *Agent) saveCache() {
	p := &a.policies
	p.mu.Lock()
	c := &policyCache{Revision: p.st.Revision, ClusterID: p.st.ClusterID, Saved: time.Now().UTC(),
		Policies: map[string]json.RawMessage{}, Overrides: map[string]json.RawMessage{},
		PolicyRevisions: map[string]int64{}, OverrideRevisions: map[string]int64{}}
	for name, e := range p.st.Policies {
		c.Policies[name] = e.Value
		c.PolicyRevisions[name] = e.ModRevision
	}
	var encErr error
	for dep, e := range p.st.Overrides {
		b, err := json.Marshal(e.Override)
		if err != nil {
			encErr = err
			continue
		}
		c.Overrides[dep] = b
		c.OverrideRevisions[dep] = e.ModRevision
	}
	p.mu.Unlock()
	if encErr != nil {
		a.lg.Warn("policy cache: override not cached", "err", encErr)
	}
	if err := saveCache(a.cfg.DataDir, c); err != nil {
		a.lg.Error("policy cache not written", "err", err)
		a.m.cacheErrors.Inc()
	}
}

// watchHandler adapts store.WatchingHandler and store.RewindHandler to the
// agent. Its methods run on the watcher's goroutine, one at a time.
type watchHandler Agent

var (
	_ store.WatchingHandler = (*watchHandler)(nil)
	_ store.RewindHandler   = (*watchHandler)(nil)
)

func (h *watchHandler) Sync(st store.State) {
	a := (*Agent)(h)
	a.syncState(st, sourceEtcd)
	a.saveCache()
	first := !a.policiesLoaded.Swap(true)
	a.m.etcdSynced.Set(1)
	a.lg.Info("policies synced from etcd", "revision", st.Revision, "cluster", st.ClusterID, "policies", len(st.Policies),
		"overrides", len(st.Overrides), "first", first)
	a.etcdSyncChanged()
}

// Rewound: etcd no longer holds the history the agent followed (restored
// from a snapshot, wiped, another cluster): not synced until the watcher's
// list from scratch (the next Sync) replaces everything, the disk cache
// included.
func (h *watchHandler) Rewound(r store.Rewind) {
	a := (*Agent)(h)
	a.m.etcdSynced.Set(0)
	a.m.etcdRewinds.WithLabelValues(string(r.Reason)).Inc()
	a.lg.Warn("etcd's history went back (a restore, a wipe or another cluster?): listing policies and overrides again from scratch",
		"reason", string(r.Reason), "from_revision", r.FromRevision, "to_revision", r.ToRevision,
		"from_cluster", r.FromCluster, "to_cluster", r.ToCluster)
	a.etcdSyncChanged()
}

func (h *watchHandler) Apply(rev int64, events []store.Event) {
	a := (*Agent)(h)
	p := &a.policies
	p.mu.Lock()
	p.st.Revision = rev
	p.source = sourceEtcd
	for _, ev := range events {
		switch ev.Kind {
		case store.PolicyPut:
			p.st.Policies[ev.Name] = ev.Policy
			if ev.Name == sharedstate.DefaultPolicyName {
				a.applyDefaultLocked()
			} else {
				a.applyPolicyLocked(ev.Name, ev.Policy)
			}
		case store.PolicyDeleted:
			delete(p.st.Policies, ev.Name)
			if ev.Name == sharedstate.DefaultPolicyName {
				a.applyDefaultLocked()
			} else {
				a.removePolicyLocked(ev.Name)
			}
		case store.OverridePut:
			p.st.Overrides[ev.Name] = ev.Override
			o := ev.Override
			a.applyOverrideLocked(ev.Name, &o)
		case store.OverrideDeleted:
			delete(p.st.Overrides, ev.Name)
			a.applyOverrideLocked(ev.Name, nil)
		}
		a.lg.Info("etcd change applied", "event", ev.Kind.String(), "name", ev.Name, "revision", ev.Revision)
	}
	p.mu.Unlock()
	a.saveCache()
}

func (h *watchHandler) Invalid(err *store.InvalidValueError) {
	a := (*Agent)(h)
	a.m.etcdInvalid.Inc()
	a.lg.Error("invalid value in etcd ignored, last good value kept", "key", err.Key,
		"mod_revision", err.ModRevision, "err", err.Err)
}

// Watching: the watch runs again after an Error (or first runs after a
// Sync), so the agent follows etcd again.
func (h *watchHandler) Watching(int64) {
	a := (*Agent)(h)
	a.m.etcdSynced.Set(1)
	a.etcdSyncChanged()
}

func (h *watchHandler) Error(err error) {
	a := (*Agent)(h)
	if a.ctx.Err() != nil {
		return
	}
	a.m.etcdWatchErrors.Inc()
	a.m.etcdSynced.Set(0)
	a.lg.Warn("etcd watch error, retrying with backoff", "err", err)
	a.etcdSyncChanged()
}

// watchLoop follows policies/ and overrides/ until Close. The store's
// watcher lists, watches from the revision, re-lists on compaction and
// on a rewind, and retries forever with backoff; its Initial is the
// applied (cached) state, so a key that is invalid in etcd keeps its
// cached value, unless the cache turns out to come from another history.
func (a *Agent) watchLoop() {
	a.policies.mu.Lock()
	init := a.policies.st.Clone()
	a.policies.mu.Unlock()
	w := a.store.Watch(a.ctx, (*watchHandler)(a), store.WatchOptions{Initial: &init, ListTimeout: 3 * time.Second})
	a.watcher.Store(w)
	<-a.ctx.Done()
	w.Close()
}

// etcdSync is how the agent follows etcd, as its registration publishes
// it: the watcher's status without the revision (which changes with every
// write). Not synced before the watcher starts.
func (a *Agent) etcdSync() *store.SyncStatus {
	st := store.SyncStatus{}
	if w := a.watcher.Load(); w != nil {
		st = w.Status()
	}
	st.Revision = 0
	return &st
}

// etcdSyncChanged asks registerLoop to publish etcdSync.
func (a *Agent) etcdSyncChanged() {
	select {
	case a.regKick <- struct{}{}:
	default:
	}
}

// member is the agent's registration in etcd.
func (a *Agent) member() store.Member {
	return store.Member{Node: a.cfg.Name, Role: string(gossip.RoleAgent), Zone: a.cfg.Zone, Version: Version,
		GossipAddr: a.GossipAddr(), APIAddr: a.GRPCAddr(), Etcd: a.etcdSync(),
		PublicKey: gossip.EncodeKey(a.signer.Public().(ed25519.PublicKey)), Wire: int(protocol.MaxVersion)}
}

// registerLoop keeps members/<name> registered on a concurrency.Session
// lease, registering again (with backoff) whenever the lease is lost, and
// updates the registration when etcdSync changes.
func (a *Agent) registerLoop() {
	retry := backoff.New(backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: backoff.None}, nil)
	for a.ctx.Err() == nil {
		m := a.member()
		ctx, cancel := context.WithTimeout(a.ctx, 3*time.Second)
		reg, err := a.store.Register(ctx, m, store.WithMemberTTL(a.cfg.MemberTTL))
		cancel()
		if err != nil {
			if a.ctx.Err() == nil {
				a.lg.Debug("etcd registration failed, retrying", "err", err)
			}
			if !ctxtime.Sleep(a.ctx, retry.Next()) {
				return
			}
			continue
		}
		retry.Reset()
		a.lg.Debug("registered in etcd", "key", reg.Key())
		// A registration may have made this agent findable: try the registry.
		a.kickJoin()
		if !a.keepRegistration(reg, m) {
			a.closeRegistration(reg)
			return
		}
		a.lg.Warn("etcd registration lost, registering again")
		reg.Close()
	}
}

// keepRegistration updates reg whenever the agent's etcdSync differs from
// what it holds (written: the member last written), until the lease is
// lost (true) or the agent closes (false). A failed update is tried again
// a second later.
func (a *Agent) keepRegistration(reg *store.Registration, written store.Member) bool {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return false
		case <-reg.Done():
			return true
		case <-a.regKick:
		case <-retry.C:
		}
		m := a.member()
		if reflect.DeepEqual(m, written) {
			continue
		}
		ctx, cancel := context.WithTimeout(a.ctx, 3*time.Second)
		err := reg.Update(ctx, m)
		cancel()
		if err != nil {
			a.lg.Debug("etcd registration not updated, trying again", "err", err)
			retry.Reset(time.Second)
			continue
		}
		written = m
	}
}

// closeRegistration revokes the registration's lease. With etcd away the
// revoke would wait for the lease TTL: after a second the agent closes its
// own etcd client, which ends the revoke, and the key expires with its
// lease instead (an injected client is not closed: the revoke then takes up
// to the TTL).
func (a *Agent) closeRegistration(reg *store.Registration) {
	done := make(chan struct{})
	go func() {
		if err := reg.Close(); err != nil {
			a.lg.Debug("etcd registration close", "err", err)
		}
		close(done)
	}()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	a.lg.Warn("etcd registration not revoked in time (etcd unreachable?); it expires with its lease", "ttl", a.cfg.MemberTTL)
	a.closeEtcd()
	<-done
}
