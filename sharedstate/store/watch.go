package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
)

// State is the watched part of the store, policies and overrides, as of one
// etcd revision. It holds only valid values: where etcd holds an invalid
// one, State keeps the last good value the watcher saw (or none).
type State struct {
	// Revision is the etcd revision the state reflects.
	Revision int64
	// ClusterID is the etcd cluster the state was listed from (0 when
	// unknown).
	ClusterID ClusterID
	// Policies by name; the fleet default is under
	// sharedstate.DefaultPolicyName.
	Policies map[string]PolicyEntry
	// Overrides by dependency.
	Overrides map[string]OverrideEntry
}

// Clone returns a deep-enough copy of st: new maps, shared immutable values.
func (st State) Clone() State {
	return State{Revision: st.Revision, ClusterID: st.ClusterID, Policies: maps.Clone(st.Policies), Overrides: maps.Clone(st.Overrides)}
}

// Default returns the fleet default in force: the stored one, or
// sharedstate.DefaultPolicy when none is stored.
func (st State) Default() sharedstate.Policy {
	if e, ok := st.Policies[sharedstate.DefaultPolicyName]; ok {
		if p, err := e.Policy(sharedstate.Policy{}); err == nil {
			return p
		}
	}
	return sharedstate.DefaultPolicy()
}

// Effective returns the policy in force for dependency: its own document
// read over Default, validated. The watcher checks each dependency policy
// against the default in force when the policy arrives, but does not
// re-check every policy when the default changes: an error here means the
// combination is invalid, and the caller keeps its last good policy.
func (st State) Effective(dependency string) (sharedstate.Policy, error) {
	def := st.Default()
	e, ok := st.Policies[dependency]
	if !ok {
		def.Dependency = dependency
		return def, nil
	}
	return e.Policy(def)
}

// EventKind says what changed.
type EventKind uint8

const (
	PolicyPut       EventKind = iota + 1 // a policy was created or changed
	PolicyDeleted                        // a policy was deleted
	OverridePut                          // an override was set
	OverrideDeleted                      // an override was cleared or expired
)

var eventKindNames = [...]string{PolicyPut: "policy-put", PolicyDeleted: "policy-deleted",
	OverridePut: "override-put", OverrideDeleted: "override-deleted"}

func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && eventKindNames[k] != "" {
		return eventKindNames[k]
	}
	return fmt.Sprintf("event-kind(%d)", uint8(k))
}

// Event is one change seen by a Watcher.
type Event struct {
	Kind     EventKind
	Name     string        // the dependency, or sharedstate.DefaultPolicyName
	Revision int64         // the etcd revision of the change
	Policy   PolicyEntry   // the new value, for PolicyPut
	Override OverrideEntry // the new value, for OverridePut
}

// Handler receives what a Watcher sees.
//
// Its methods are called from the watcher's single goroutine, one at a time
// and never concurrently, in revision order. They should return promptly:
// while one runs the watcher reads nothing from etcd (back-pressure instead
// of a queue; etcd's client buffers what arrives meanwhile). They must not
// call the Watcher's Close (that would wait for itself).
type Handler interface {
	// Sync delivers the complete state after every (re)list: the first one,
	// after a compaction, or after a rewind (RewindHandler). It replaces
	// everything the handler had. st is the handler's to keep.
	Sync(st State)
	// Apply delivers the changes of one watch response, in revision order,
	// after the watcher's state has been updated; rev is the revision the
	// state is at afterwards.
	Apply(rev int64, events []Event)
	// Invalid reports a value that does not parse or validate. The watcher
	// skipped it and keeps the last good value of that key, if it had one.
	Invalid(err *InvalidValueError)
	// Error reports a failure to list or watch; the watcher retries after a
	// backoff. Useful for logs and metrics.
	Error(err error)
}

// WatchingHandler is a Handler that also wants to know when its watch
// runs: Watching is called, on the watcher's goroutine like the Handler's
// methods, each time etcd confirms a watch the Watcher opened — after the
// first Sync, and again after every Error that the Watcher recovered from
// by watching again (with no re-list in between) — with the revision the
// handler's state is at. Changes after rev will be delivered.
type WatchingHandler interface {
	Handler
	Watching(rev int64)
}

// WatchOptions configure Watch. The zero value is ready to use.
type WatchOptions struct {
	// Backoff returns the wait before retry number attempt (1, 2, …) after a
	// failed list or watch (optional, default DefaultBackoff).
	Backoff func(attempt int) time.Duration

	// ListTimeout bounds each list (optional, default the Store's
	// RequestTimeout).
	ListTimeout time.Duration

	// Initial seeds the last good values (optional), e.g. with the state an
	// agent cached on disk: a key that is invalid in etcd at the first list
	// keeps its value from Initial. Initial is not delivered by itself.
	// Its Revision and ClusterID are checked against the first list: a
	// cluster ID that differs, or a list revision below Initial's, is a
	// rewind, and then nothing of Initial is kept. So is an entry whose key
	// etcd does not hold at Initial's revision, or holds with a lower mod
	// revision than the entry's (etcd restored or wiped, and written past
	// that revision since), unless that revision is compacted. (A higher
	// one is the same history: a value that was invalid, the entry its
	// last good one.)
	Initial *State

	// CheckInterval is how often the watcher asks etcd, with one
	// linearizable read of one key, whether it still holds the history the
	// watcher follows (its cluster ID, and a revision not below the
	// watcher's), and asks for a progress notification (optional, default
	// DefaultCheckInterval). Besides, after every reconnection to etcd
	// and every watch resumed after an error, the watcher compares the
	// keys etcd holds at the watcher's revision with its own.
	CheckInterval time.Duration
}

// DefaultCheckInterval is WatchOptions.CheckInterval's default.
const DefaultCheckInterval = 5 * time.Second

// DefaultBackoff waits 100ms × 2^(attempt-1), capped at 10s, with full
// jitter (sharedstate/backoff), and at least 1ns.
func DefaultBackoff(attempt int) time.Duration {
	p := backoff.Policy{Base: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: backoff.Full}
	return p.Wait(attempt-1, 0, backoff.Uniform(rand.Uint64())) + 1
}

// Watcher follows the store's policies and overrides: it lists them at a
// revision, then watches from the next one (WithRev, WithRequireLeader) and
// hands both to a Handler. It re-lists when the revision it needs was
// compacted, and retries failures forever with a backoff, so it never gives
// up while etcd is away; etcd's client resumes a broken watch by itself when
// etcd comes back.
//
// etcd's client resumes a watch from the next revision it needs even when
// the etcd it reconnects to has another history (restored from a
// snapshot, or wiped): that watch would wait for a revision that history
// may reach much later, and the changes before it would never arrive. So
// the watcher checks that etcd still holds its history (see
// WatchOptions.CheckInterval, and RewindReason for what it detects); when
// it does not, it reports a Rewind (RewindHandler) and lists again from
// scratch.
//
// Two goroutines: one does all the work and calls the Handler, one
// follows the client's connection; Close stops both and waits for them.
type Watcher struct {
	s    *Store
	h    Handler
	opts WatchOptions

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	kick chan struct{}  // the connection to etcd is back: check etcd's history
	wg   sync.WaitGroup // the connection follower

	mu     sync.Mutex
	err    error      // why it stopped; set before done is closed
	status SyncStatus // what Status returns

	// Owned by the goroutine.
	state   State
	rev     int64            // the last revision delivered
	cluster ClusterID        // the cluster listed from (Initial's before the first list)
	keys    map[string]int64 // every key of the watched range at rev, with its mod revision
	head    int64            // the highest revision etcd is known to have reached in this history
	verify  bool             // compare etcd's keys at rev with keys at the next check
	compact int64            // the compaction revision of the last compacted watch
	initial *State           // WatchOptions.Initial until the first list
}

// Watch starts a Watcher that calls h until ctx is done or Close is called.
// It returns at once; the first Sync arrives once etcd answers.
func (s *Store) Watch(ctx context.Context, h Handler, opts WatchOptions) *Watcher {
	if opts.Backoff == nil {
		opts.Backoff = DefaultBackoff
	}
	if opts.ListTimeout <= 0 {
		opts.ListTimeout = s.timeout
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &Watcher{
		s: s, h: h, opts: opts, ctx: wctx, cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1),
		state: emptyState(),
	}
	if opts.Initial != nil {
		init := opts.Initial.Clone()
		if init.Policies != nil {
			w.state.Policies = init.Policies
		}
		if init.Overrides != nil {
			w.state.Overrides = init.Overrides
		}
		w.rev, w.cluster = init.Revision, init.ClusterID
		w.initial = &init
	}
	if conn := s.cli.ActiveConnection(); conn != nil {
		w.wg.Add(1)
		go w.followConn(conn)
	}
	go w.run()
	return w
}

func emptyState() State {
	return State{Policies: map[string]PolicyEntry{}, Overrides: map[string]OverrideEntry{}}
}

// Status returns how the watcher follows etcd now. It is safe for
// concurrent use; called from a Handler method, it already reflects the
// call (after Sync: synced, at the new revision; after Rewound: not synced,
// the rewind counted).
func (w *Watcher) Status() SyncStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.status
	if st.LastRewind != nil {
		r := *st.LastRewind
		st.LastRewind = &r
	}
	return st
}

func (w *Watcher) setStatus(f func(*SyncStatus)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.status)
}

// Done is closed when the watcher has stopped.
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Err returns nil while the watcher runs, and why it stopped once Done is
// closed: ErrClosed after Close, the context's error when the context
// passed to Watch ended, or an error when the etcd client was closed.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close stops the watcher and waits for its goroutines. It is idempotent.
func (w *Watcher) Close() {
	w.once.Do(func() {
		w.setErr(ErrClosed)
		w.cancel()
	})
	<-w.done
}

func (w *Watcher) setErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// run is the watcher's goroutine.
func (w *Watcher) run() {
	defer func() {
		w.cancel()
		w.wg.Wait()
		close(w.done)
	}()
	needList := true
	scratch := false // the next list keeps no last good value: after a rewind
	attempt := 0     // consecutive failures, for the backoff
	compactions := 0 // consecutive compactions with nothing delivered between
	rewinds := 0     // consecutive rewinds with nothing delivered between
	for {
		if w.stopping() {
			return
		}
		var err error
		if needList {
			if err = w.list(scratch); err == nil {
				needList, scratch = false, false
			}
		}
		if err == nil {
			delivered := false
			var rw *Rewind
			rw, err = w.watch(&delivered)
			if delivered {
				attempt, compactions, rewinds = 0, 0, 0
			}
			if rw != nil {
				// etcd lost the history we follow: list from scratch, at
				// once, unless it keeps changing (endpoints of two
				// clusters in one client).
				w.rewound(*rw)
				needList, scratch = true, true
				if rewinds++; rewinds < 2 {
					continue
				}
				err = fmt.Errorf("store: etcd's history changed again (%s); listing again after a backoff", rw)
			}
			if errors.Is(err, rpctypes.ErrCompacted) {
				// The revision we need is gone: list again, at once,
				// unless compaction keeps outrunning us.
				needList = true
				w.report(fmt.Errorf("%w; listing again", err))
				if w.compact > w.head {
					// Beyond anything we knew etcd had reached: not routine
					// retention, but history we never saw.
					w.rewound(Rewind{Reason: RewindCompacted, FromRevision: w.rev, ToRevision: w.compact,
						FromCluster: w.cluster, ToCluster: w.cluster})
				}
				if compactions++; compactions < 3 {
					continue
				}
			} else if err != nil && !needList {
				// The next watch resumes from w.rev without a list: check
				// that etcd's history is still ours once it runs.
				w.verify = true
			}
		}
		if w.stopping() {
			return
		}
		attempt++
		if !errors.Is(err, rpctypes.ErrCompacted) {
			w.report(err)
		}
		if !w.sleep(w.opts.Backoff(attempt)) {
			return
		}
	}
}

// report hands a failure to the handler.
func (w *Watcher) report(err error) {
	w.setStatus(func(s *SyncStatus) { s.Synced = false })
	w.h.Error(err)
}

// rewound records a rewind and tells the handler.
func (w *Watcher) rewound(r Rewind) {
	r.At = w.s.now()
	w.setStatus(func(s *SyncStatus) {
		s.Synced = false
		s.Rewinds++
		s.LastRewind = &r
	})
	if rh, ok := w.h.(RewindHandler); ok {
		rh.Rewound(r)
	}
}

// compare returns the rewind that a response header of etcd shows against
// what the watcher follows, or nil: another cluster, or a revision below
// the watcher's. Only a linearizable read proves a rewind: a member that
// lags behind the one the watcher heard from last may answer a watch with
// a lower revision.
func (w *Watcher) compare(cluster ClusterID, rev int64) *Rewind {
	r := Rewind{FromRevision: w.rev, ToRevision: rev, FromCluster: w.cluster, ToCluster: cluster}
	switch {
	case cluster != 0 && w.cluster != 0 && cluster != w.cluster:
		r.Reason = RewindNewCluster
	case rev < w.rev:
		r.Reason = RewindRevisionWentBack
	default:
		return nil
	}
	return &r
}

// errInconclusive: a deep check found w.rev compacted, so nothing to
// compare with. The watch that needs a compacted revision fails and says
// so; until then the check is owed.
var errInconclusive = errors.New("store: check etcd's history: the watcher's revision is compacted")

// check asks etcd, with a linearizable read, whether it still holds the
// history the watcher follows; with deep, it also compares the keys etcd
// holds at w.rev with w.keys (a rewound etcd may have been written past
// w.rev already). It returns the rewind found, or nil.
//
// Only a check while the watcher is not in doubt (not deep) raises w.head:
// after a reconnection etcd may show a revision bumped by a restore, which
// must not make the compaction that comes with it look routine.
func (w *Watcher) check(deep bool) (*Rewind, error) {
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.ListTimeout)
	defer cancel()
	resp, err := w.s.cli.Get(ctx, w.s.PolicyKey(sharedstate.DefaultPolicyName), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("store: check etcd's history: %w", err)
	}
	cluster, head := ClusterID(resp.Header.ClusterId), resp.Header.Revision
	if rw := w.compare(cluster, head); rw != nil {
		return rw, nil
	}
	if !deep {
		w.head = max(w.head, head)
		return nil, nil
	}
	from, end := w.watchRange()
	n, same := 0, true
	_, _, err = rangePages(ctx, w.s.cli, from, end, w.rev, func(kv *mvccpb.KeyValue) {
		n++
		if mod, ok := w.keys[string(kv.Key)]; !ok || mod != kv.ModRevision {
			same = false
		}
	}, clientv3.WithKeysOnly())
	changed := Rewind{Reason: RewindHistoryChanged, FromRevision: w.rev, ToRevision: head, FromCluster: w.cluster, ToCluster: cluster}
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return nil, errInconclusive
	case errors.Is(err, rpctypes.ErrFutureRev):
		changed.Reason = RewindRevisionWentBack // between the two reads
		return &changed, nil
	case err != nil:
		return nil, fmt.Errorf("store: check etcd's history at revision %d: %w", w.rev, err)
	case !same || n != len(w.keys):
		return &changed, nil
	}
	return nil, nil
}

// followConn kicks the watcher each time the client's connection to etcd
// is ready again after it was lost (etcd restarted, or the client moved to
// another member): etcd may have come back with another history, which
// the client's resumed watch does not reveal.
func (w *Watcher) followConn(conn *grpc.ClientConn) {
	defer w.wg.Done()
	st := conn.GetState()
	lost := false
	for conn.WaitForStateChange(w.ctx, st) {
		if st == connectivity.Ready {
			lost = true // it left Ready, if only for a moment
		}
		st = conn.GetState()
		if st == connectivity.Shutdown {
			return
		}
		if st == connectivity.Ready && lost {
			lost = false
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
	}
}

// stopping reports whether the watcher must stop, and records why.
func (w *Watcher) stopping() bool {
	if err := w.ctx.Err(); err != nil {
		w.setErr(context.Cause(w.ctx))
		return true
	}
	if err := w.s.cli.Ctx().Err(); err != nil {
		w.setErr(errors.New("store: watch: etcd client closed"))
		return true
	}
	return false
}

// sleep waits d or until the watcher stops; it reports whether to go on.
func (w *Watcher) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.ctx.Done():
	case <-w.s.cli.Ctx().Done():
	}
	w.stopping()
	return false
}

// watchRange returns the key range holding overrides/ and policies/ (one
// range, so one watch stream and one revision order covers both; keys in it
// that belong to neither are ignored).
func (w *Watcher) watchRange() (from, end string) {
	return w.s.prefix + overridesDir, prefixEnd(w.s.prefix + policiesDir)
}
