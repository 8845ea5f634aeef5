package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// list reads everything at one revision and delivers it with Sync. With
// scratch (after a rewind), or when the list itself shows a rewind
// (against the previous list, or WatchOptions.Initial), it keeps no last
// good value of a key that is invalid in etcd.
func (w *Watcher) list(scratch bool) error {
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.ListTimeout)
	defer cancel()
	from, end := w.watchRange()
	var policies, overrides []*mvccpb.KeyValue
	keys := map[string]int64{}
	rev, hdr, err := rangePages(ctx, w.s.cli, from, end, 0, func(kv *mvccpb.KeyValue) {
		keys[string(kv.Key)] = kv.ModRevision
		switch k := string(kv.Key); {
		case strings.HasPrefix(k, w.s.prefix+policiesDir):
			policies = append(policies, kv)
		case strings.HasPrefix(k, w.s.prefix+overridesDir):
			overrides = append(overrides, kv)
		}
	})
	if err != nil {
		return fmt.Errorf("store: list policies and overrides: %w", err)
	}
	cluster := ClusterID(hdr.ClusterId)
	if !scratch {
		rw := w.compare(cluster, rev)
		if rw == nil && w.initial != nil {
			if rw, err = w.checkInitial(ctx, cluster, rev); err != nil {
				return err
			}
		}
		if rw != nil {
			w.rewound(*rw)
			scratch = true
		}
	}
	last := w.state // the last good values
	if scratch {
		last = emptyState()
		w.head = 0
	}

	next := State{Revision: rev, ClusterID: cluster, Policies: make(map[string]PolicyEntry, len(policies)), Overrides: make(map[string]OverrideEntry, len(overrides))}
	// The default first: dependency policies are checked against it.
	defKey := w.s.PolicyKey(sharedstate.DefaultPolicyName)
	for _, kv := range policies {
		if string(kv.Key) == defKey {
			e, err := w.s.decodePolicy(kv, sharedstate.Policy{})
			keepOrReport(w, next.Policies, last.Policies, sharedstate.DefaultPolicyName, e, err)
		}
	}
	def := next.Default()
	for _, kv := range policies {
		if string(kv.Key) != defKey {
			name := strings.TrimPrefix(string(kv.Key), w.s.prefix+policiesDir)
			e, err := w.s.decodePolicy(kv, def)
			keepOrReport(w, next.Policies, last.Policies, name, e, err)
		}
	}
	for _, kv := range overrides {
		dep := strings.TrimPrefix(string(kv.Key), w.s.prefix+overridesDir)
		e, err := w.s.decodeOverride(kv)
		keepOrReport(w, next.Overrides, last.Overrides, dep, e, err)
	}
	w.state, w.rev, w.cluster, w.keys, w.initial = next, rev, cluster, keys, nil
	w.head, w.verify = max(w.head, rev), false
	w.setStatus(func(s *SyncStatus) { s.Synced, s.ClusterID, s.Revision = true, cluster, rev })
	w.h.Sync(next.Clone())
	return nil
}

// checkInitial compares WatchOptions.Initial's entries that have a mod
// revision with what etcd holds at Initial's revision, and returns the
// rewind (history_changed) when a key is missing there or has a lower mod
// revision than its entry. A compacted revision compares nothing.
func (w *Watcher) checkInitial(ctx context.Context, cluster ClusterID, head int64) (*Rewind, error) {
	init := w.initial
	want := map[string]int64{}
	for name, e := range init.Policies {
		if e.ModRevision > 0 {
			want[w.s.PolicyKey(name)] = e.ModRevision
		}
	}
	for dep, e := range init.Overrides {
		if e.ModRevision > 0 {
			want[w.s.OverrideKey(dep)] = e.ModRevision
		}
	}
	if len(want) == 0 || init.Revision <= 0 {
		return nil, nil
	}
	got := map[string]int64{}
	from, end := w.watchRange()
	_, _, err := rangePages(ctx, w.s.cli, from, end, init.Revision, func(kv *mvccpb.KeyValue) {
		got[string(kv.Key)] = kv.ModRevision
	}, clientv3.WithKeysOnly())
	if errors.Is(err, rpctypes.ErrCompacted) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: check the initial state at revision %d: %w", init.Revision, err)
	}
	for key, mod := range want {
		if got[key] < mod {
			return &Rewind{Reason: RewindHistoryChanged, FromRevision: init.Revision, ToRevision: head,
				FromCluster: init.ClusterID, ToCluster: cluster}, nil
		}
	}
	return nil, nil
}

// keepOrReport stores a decoded entry in m, or reports the decoding error
// and keeps the last good value of name from last, if any.
func keepOrReport[T any](w *Watcher, m, last map[string]T, name string, e T, err error) {
	if err == nil {
		m[name] = e
		return
	}
	w.reportInvalid(err)
	if old, ok := last[name]; ok {
		m[name] = old
	}
}

func (w *Watcher) reportInvalid(err error) {
	var iv *InvalidValueError
	if !errors.As(err, &iv) {
		iv = &InvalidValueError{Err: err}
	}
	w.h.Invalid(iv)
}

// watch watches from w.rev+1 until the watch fails or etcd shows a
// rewind; it applies and delivers what arrives, checks etcd's history
// (check) every CheckInterval, after a reconnection and when a response
// looks wrong, and sets *delivered when something arrived.
func (w *Watcher) watch(delivered *bool) (*Rewind, error) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
	defer cancel()
	from, end := w.watchRange()
	ch := w.s.cli.Watch(ctx, from, clientv3.WithRange(end), clientv3.WithRev(w.rev+1), clientv3.WithProgressNotify(),
		clientv3.WithCreatedNotify())
	tick := time.NewTicker(w.opts.CheckInterval)
	defer tick.Stop()
	for {
		check, err := w.next(ctx, ch, tick.C, delivered)
		if err != nil {
			return nil, err
		}
		if !check {
			continue
		}
		rw, err := w.check(w.verify)
		if err != nil {
			continue // tried again at the next tick; the watch fails by itself if etcd does
		}
		if rw != nil {
			return rw, nil
		}
		w.verify = false
	}
}

// next waits for one thing to handle in watch and handles it: a watch
// response (delivered), a reconnection, or a tick. It reports whether
// etcd's history must be checked now, or the error that ends the watch.
func (w *Watcher) next(ctx context.Context, ch clientv3.WatchChan, tick <-chan time.Time, delivered *bool) (bool, error) {
	// A reconnection first: check before anything that came over the new
	// connection is applied.
	select {
	case <-w.kick:
		w.verify = true
		return true, nil
	default:
	}
	select {
	case <-w.kick:
		w.verify = true
		return true, nil
	case <-tick:
		// A progress notification moves w.rev to etcd's revision when
		// nothing changed, so that a deep check compares keys there.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = w.s.cli.RequestProgress(pctx)
		cancel()
		return true, nil
	case resp, ok := <-ch:
		if !ok {
			if w.ctx.Err() != nil {
				return false, w.ctx.Err()
			}
			return false, fmt.Errorf("store: watch from revision %d: channel closed", w.rev+1)
		}
		if err := resp.Err(); err != nil {
			w.compact = resp.CompactRevision
			return false, fmt.Errorf("store: watch from revision %d: %w", w.rev+1, err)
		}
		// Another cluster, or a revision below ours: a rewind, or a member
		// that lags behind the one we heard from last; a linearizable read
		// tells.
		check := w.compare(ClusterID(resp.Header.ClusterId), resp.Header.Revision) != nil
		if resp.Created {
			// etcd accepted the watch (a resumed stream inside etcd's
			// client sends none). Not a delivery: the backoff keeps
			// growing while watches are created and then fail.
			w.setStatus(func(s *SyncStatus) { s.Synced = true })
			if wh, ok := w.h.(WatchingHandler); ok {
				wh.Watching(w.rev)
			}
			return check || w.verify, nil
		}
		*delivered = true
		w.deliver(resp)
		return check, nil
	}
}

// deliver applies one watch response (events, or a progress notification)
// and hands the events to the handler.
func (w *Watcher) deliver(resp clientv3.WatchResponse) {
	var events []Event
	if resp.IsProgressNotify() {
		// Everything up to the header revision has been delivered.
		w.rev = max(w.rev, resp.Header.Revision)
	}
	for _, ev := range resp.Events {
		if ev.Type == clientv3.EventTypeDelete {
			delete(w.keys, string(ev.Kv.Key))
		} else {
			w.keys[string(ev.Kv.Key)] = ev.Kv.ModRevision
		}
		if e, ok := w.applyEvent(ev); ok {
			events = append(events, e)
		}
		w.rev = max(w.rev, ev.Kv.ModRevision)
	}
	w.head = max(w.head, w.rev)
	w.state.Revision = w.rev
	rev := w.rev
	w.setStatus(func(s *SyncStatus) { s.Revision = rev })
	if len(events) > 0 {
		w.h.Apply(w.rev, events)
	}
}

// applyEvent updates the state with one etcd event and returns the Event
// to deliver, if any (an invalid value, or a key that is neither a policy
// nor an override, yields none).
func (w *Watcher) applyEvent(ev *clientv3.Event) (Event, bool) {
	key := string(ev.Kv.Key)
	e := Event{Revision: ev.Kv.ModRevision}
	var ok bool
	if e.Name, ok = strings.CutPrefix(key, w.s.prefix+policiesDir); ok {
		e.Kind, e.Policy, ok = applyTo(w, w.state.Policies, e.Name, ev, PolicyPut, PolicyDeleted,
			func(kv *mvccpb.KeyValue) (PolicyEntry, error) { return w.s.decodePolicy(kv, w.state.Default()) })
	} else if e.Name, ok = strings.CutPrefix(key, w.s.prefix+overridesDir); ok {
		e.Kind, e.Override, ok = applyTo(w, w.state.Overrides, e.Name, ev, OverridePut, OverrideDeleted, w.s.decodeOverride)
	}
	return e, ok
}

// applyTo applies ev to m, the state's entries of one kind, and returns
// what changed: put (a value decode accepts, returned), deleted (an entry
// m held) or nothing (an invalid value, reported, or the delete of a key m
// did not hold).
func applyTo[T any](w *Watcher, m map[string]T, name string, ev *clientv3.Event, put, deleted EventKind,
	decode func(*mvccpb.KeyValue) (T, error)) (EventKind, T, bool) {
	var v T
	if ev.Type == clientv3.EventTypeDelete {
		_, held := m[name]
		delete(m, name)
		return deleted, v, held
	}
	v, err := decode(ev.Kv)
	if err != nil {
		w.reportInvalid(err)
		return 0, v, false
	}
	m[name] = v
	return put, v, true
}
