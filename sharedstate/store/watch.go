package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// State is the watched part of the store, policies and overrides, as of one
// etcd revision. It holds only valid values: where etcd holds an invalid
// one, State keeps the last good value the watcher saw (or none).
type State struct {
	// Revision is the etcd revision the state reflects.
	Revision int64
	// Policies by name; the fleet default is under
	// sharedstate.DefaultPolicyName.
	Policies map[string]PolicyEntry
	// Overrides by dependency.
	Overrides map[string]OverrideEntry
}

// Clone returns a deep-enough copy of st: new maps, shared immutable values.
func (st State) Clone() State {
	return State{Revision: st.Revision, Policies: maps.Clone(st.Policies), Overrides: maps.Clone(st.Overrides)}
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

// Effective returns the policy in force for dependency: its own policy
// merged over Default, validated. The watcher checks each dependency policy
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

func (k EventKind) String() string {
	switch k {
	case PolicyPut:
		return "policy-put"
	case PolicyDeleted:
		return "policy-deleted"
	case OverridePut:
		return "override-put"
	case OverrideDeleted:
		return "override-deleted"
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
	// after a compaction, or after a resumed watch could not continue. It
	// replaces everything the handler had. st is the handler's to keep.
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

// HandlerFuncs is a Handler made of optional functions: a nil one ignores
// its calls.
type HandlerFuncs struct {
	SyncFunc    func(State)
	ApplyFunc   func(int64, []Event)
	InvalidFunc func(*InvalidValueError)
	ErrorFunc   func(error)
}

// Sync calls SyncFunc, if set.
func (h HandlerFuncs) Sync(st State) {
	if h.SyncFunc != nil {
		h.SyncFunc(st)
	}
}

// Apply calls ApplyFunc, if set.
func (h HandlerFuncs) Apply(rev int64, events []Event) {
	if h.ApplyFunc != nil {
		h.ApplyFunc(rev, events)
	}
}

// Invalid calls InvalidFunc, if set.
func (h HandlerFuncs) Invalid(err *InvalidValueError) {
	if h.InvalidFunc != nil {
		h.InvalidFunc(err)
	}
}

// Error calls ErrorFunc, if set.
func (h HandlerFuncs) Error(err error) {
	if h.ErrorFunc != nil {
		h.ErrorFunc(err)
	}
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
	Initial *State
}

// DefaultBackoff waits 100ms × 2^(attempt-1), capped at 10s, with full
// jitter.
func DefaultBackoff(attempt int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < attempt && d < 10*time.Second; i++ {
		d *= 2
	}
	d = min(d, 10*time.Second)
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// Watcher follows the store's policies and overrides: it lists them at a
// revision, then watches from the next one (WithRev, WithRequireLeader) and
// hands both to a Handler. It re-lists when the revision it needs was
// compacted, and retries failures forever with a backoff, so it never gives
// up while etcd is away; etcd's client resumes a broken watch by itself when
// etcd comes back.
//
// One goroutine does all the work; Close stops it and waits for it.
type Watcher struct {
	s    *Store
	h    Handler
	opts WatchOptions

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu  sync.Mutex
	err error // why it stopped; set before done is closed

	// Owned by the goroutine.
	state State
	rev   int64 // the last revision delivered
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
	wctx, cancel := context.WithCancel(ctx)
	w := &Watcher{
		s: s, h: h, opts: opts, ctx: wctx, cancel: cancel, done: make(chan struct{}),
		state: State{Policies: map[string]PolicyEntry{}, Overrides: map[string]OverrideEntry{}},
	}
	if opts.Initial != nil {
		init := opts.Initial.Clone()
		if init.Policies != nil {
			w.state.Policies = init.Policies
		}
		if init.Overrides != nil {
			w.state.Overrides = init.Overrides
		}
	}
	go w.run()
	return w
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

// Close stops the watcher and waits for its goroutine. It is idempotent.
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
	defer close(w.done)
	defer w.cancel()
	needList := true
	attempt := 0     // consecutive failures, for the backoff
	compactions := 0 // consecutive compactions with nothing delivered between
	for {
		if w.stopping() {
			return
		}
		var err error
		if needList {
			if err = w.list(); err == nil {
				needList = false
			}
		}
		if err == nil {
			delivered := false
			err = w.watch(&delivered)
			if delivered {
				attempt, compactions = 0, 0
			}
			if errors.Is(err, rpctypes.ErrCompacted) {
				// The revision we need is gone: list again, at once,
				// unless compaction keeps outrunning us.
				needList = true
				w.h.Error(fmt.Errorf("%w; listing again", err))
				if compactions++; compactions < 3 {
					continue
				}
			}
		}
		if w.stopping() {
			return
		}
		attempt++
		if !errors.Is(err, rpctypes.ErrCompacted) {
			w.h.Error(err)
		}
		if !w.sleep(w.opts.Backoff(attempt)) {
			return
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
		w.stopping()
		return false
	case <-w.s.cli.Ctx().Done():
		w.stopping()
		return false
	}
}

// watchRange returns the key range holding overrides/ and policies/ (one
// range, so one watch stream and one revision order covers both; keys in it
// that belong to neither are ignored).
func (w *Watcher) watchRange() (from, end string) {
	return w.s.prefix + overridesDir, prefixEnd(w.s.prefix + policiesDir)
}

// list reads everything at one revision and delivers it with Sync.
func (w *Watcher) list() error {
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.ListTimeout)
	defer cancel()
	from, end := w.watchRange()
	var policies, overrides []*mvccpb.KeyValue
	rev, err := rangeKeys(ctx, w.s.cli, from, end, 0, func(kv *mvccpb.KeyValue) {
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

	next := State{Revision: rev, Policies: make(map[string]PolicyEntry, len(policies)), Overrides: make(map[string]OverrideEntry, len(overrides))}
	// The default first: dependency policies are checked against it.
	defKey := w.s.PolicyKey(sharedstate.DefaultPolicyName)
	for _, kv := range policies {
		if string(kv.Key) == defKey {
			e, err := w.s.decodePolicy(kv, sharedstate.Policy{})
			w.keepOrReport(next.Policies, sharedstate.DefaultPolicyName, e, err)
		}
	}
	def := next.Default()
	for _, kv := range policies {
		if string(kv.Key) != defKey {
			name := strings.TrimPrefix(string(kv.Key), w.s.prefix+policiesDir)
			e, err := w.s.decodePolicy(kv, def)
			w.keepOrReport(next.Policies, name, e, err)
		}
	}
	for _, kv := range overrides {
		dep := strings.TrimPrefix(string(kv.Key), w.s.prefix+overridesDir)
		e, err := w.s.decodeOverride(kv)
		if err == nil {
			next.Overrides[dep] = e
			continue
		}
		w.reportInvalid(err)
		if old, ok := w.state.Overrides[dep]; ok {
			next.Overrides[dep] = old
		}
	}
	w.state = next
	w.rev = rev
	w.h.Sync(next.Clone())
	return nil
}

// keepOrReport stores a decoded policy in m, or reports the decoding error
// and keeps the last good value of name, if any.
func (w *Watcher) keepOrReport(m map[string]PolicyEntry, name string, e PolicyEntry, err error) {
	if err == nil {
		m[name] = e
		return
	}
	w.reportInvalid(err)
	if old, ok := w.state.Policies[name]; ok {
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

// watch watches from w.rev+1 until the watch fails; it applies and
// delivers what arrives, and sets *delivered when something arrived.
func (w *Watcher) watch(delivered *bool) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
	defer cancel()
	from, end := w.watchRange()
	ch := w.s.cli.Watch(ctx, from, clientv3.WithRange(end), clientv3.WithRev(w.rev+1), clientv3.WithProgressNotify(),
		clientv3.WithCreatedNotify())
	for resp := range ch {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("store: watch from revision %d: %w", w.rev+1, err)
		}
		if resp.Created {
			// etcd accepted the watch (a resumed stream inside etcd's
			// client sends none). Not a delivery: the backoff keeps
			// growing while watches are created and then fail.
			if wh, ok := w.h.(WatchingHandler); ok {
				wh.Watching(w.rev)
			}
			continue
		}
		*delivered = true
		if resp.IsProgressNotify() {
			// Everything up to the header revision has been delivered.
			w.rev = max(w.rev, resp.Header.Revision)
			continue
		}
		var events []Event
		for _, ev := range resp.Events {
			if e, ok := w.applyEvent(ev); ok {
				events = append(events, e)
			}
			w.rev = max(w.rev, ev.Kv.ModRevision)
		}
		w.state.Revision = w.rev
		if len(events) > 0 {
			w.h.Apply(w.rev, events)
		}
	}
	if w.ctx.Err() != nil {
		return w.ctx.Err()
	}
	return fmt.Errorf("store: watch from revision %d: channel closed", w.rev+1)
}

// applyEvent updates the state with one etcd event and returns the Event
// to deliver, if any (an invalid value, or a key that is neither a policy
// nor an override, yields none).
func (w *Watcher) applyEvent(ev *clientv3.Event) (Event, bool) {
	key := string(ev.Kv.Key)
	rev := ev.Kv.ModRevision
	switch {
	case strings.HasPrefix(key, w.s.prefix+policiesDir):
		name := strings.TrimPrefix(key, w.s.prefix+policiesDir)
		if ev.Type == clientv3.EventTypeDelete {
			if _, ok := w.state.Policies[name]; !ok {
				return Event{}, false
			}
			delete(w.state.Policies, name)
			return Event{Kind: PolicyDeleted, Name: name, Revision: rev}, true
		}
		e, err := w.s.decodePolicy(ev.Kv, w.state.Default())
		if err != nil {
			w.reportInvalid(err)
			return Event{}, false
		}
		w.state.Policies[name] = e
		return Event{Kind: PolicyPut, Name: name, Revision: rev, Policy: e}, true
	case strings.HasPrefix(key, w.s.prefix+overridesDir):
		dep := strings.TrimPrefix(key, w.s.prefix+overridesDir)
		if ev.Type == clientv3.EventTypeDelete {
			if _, ok := w.state.Overrides[dep]; !ok {
				return Event{}, false
			}
			delete(w.state.Overrides, dep)
			return Event{Kind: OverrideDeleted, Name: dep, Revision: rev}, true
		}
		e, err := w.s.decodeOverride(ev.Kv)
		if err != nil {
			w.reportInvalid(err)
			return Event{}, false
		}
		w.state.Overrides[dep] = e
		return Event{Kind: OverridePut, Name: dep, Revision: rev, Override: e}, true
	}
	return Event{}, false
}
