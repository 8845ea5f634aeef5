// Package store keeps Fusebox's shared configuration in etcd: policies,
// operator overrides, the audit log and member registrations, under one key
// prefix (default "/fusebox/"):
//
//	policies/_default       the fleet default policy (complete), "schema": 1
//	policies/<dependency>   a dependency's policy: a document read over the default
//	overrides/<dependency>  {state, reason, actor, created, expires}, on a lease when it has a TTL
//	audit/<seq, 20 digits>  {actor, action, dependency, before, after, at}
//	members/<node>          {node, role, zone, version, gossipAddr, apiAddr}, on a session lease
//
// Every value is validated with package sharedstate before it is written
// (an invalid policy is refused with a *sharedstate.ValidationError naming
// every violation) and again when it is read (an invalid value is skipped
// and reported as an *InvalidValueError; watchers keep the last good value).
//
// # Compare-and-swap
//
// Writes take WriteOptions{Actor, Expect}. Expect is unconditional by
// default; ExpectAbsent (or ExpectModRevision(0)) requires the key not to
// exist; ExpectModRevision(n) requires its mod revision to be n. A mismatch
// returns a *ConflictError (errors.Is(err, ErrConflict)) naming the current
// and the expected revision. Missing keys are errors wrapping ErrNotFound.
//
// # Audit log
//
// Every policy or override change writes an audit entry in the same etcd
// transaction as the change, so there is one entry per successful change
// and none for a failed one. The key is audit/<seq>, seq being the newest
// entry's seq plus one, zero-padded to 20 digits so that key order is
// numeric order. The transaction requires audit/<seq> not to exist yet, so
// two concurrent writers cannot take the same seq: the loser re-reads and
// retries with the next one. Hence seqs are unique, gap-free and in commit
// (revision) order. The etcd revision of the change itself is not knowable
// before the transaction commits, so it cannot be the key; it is reported
// as AuditEntry.Revision (the entry's create revision, which is the
// change's revision). Overrides that expire by their TTL leave no entry.
//
// # Watching
//
// Watch lists policies/ and overrides/ at one revision, delivers the state
// (Handler.Sync), then watches from the next revision (WithRev,
// WithRequireLeader) and delivers changes (Handler.Apply). It reads and
// watches the one key range that holds both directories, rather than two
// prefixes, so one stream gives one revision order over both. When the
// revision it needs has been compacted it lists again; other failures are
// retried forever with an injectable backoff, and etcd's client resumes a
// broken watch by itself once etcd is back. A member without a leader
// (its cluster lost its quorum) ends the watch (WithRequireLeader): the
// error is reported (Handler.Error) and the watch retried from where it
// stopped; a WatchingHandler hears when etcd accepts it again. Invalid
// values are reported (Handler.Invalid, with the key) and skipped, keeping
// the last good value. Every call of the Handler comes from one goroutine;
// nothing is queued by this package.
//
// # etcd history that goes back
//
// etcd restored from a snapshot, or wiped and started empty, numbers its
// revisions from the snapshot's (or 1) again, and etcd's client resumes a
// watch at the revision it had reached: the changes of the new history
// would not arrive until it got that far. The watcher checks that etcd
// still holds its history: every WatchOptions.CheckInterval a linearizable
// read of one key (another cluster ID: RewindNewCluster; a revision below
// its own: RewindRevisionWentBack; a watch response that shows either
// triggers the read, since a lagging member may answer a watch with a
// lower revision); when the client's connection is back after it was lost,
// or a watch resumes after an error, the same plus the keys at its
// revision compared with its own (RewindHistoryChanged); a watch that needs
// a revision compacted beyond any it knew etcd had reached
// (RewindCompacted). WatchOptions.Initial is checked at the first list.
// On a rewind the watcher tells a RewindHandler (Rewound) and lists again
// from scratch. Watcher.Status says how it follows etcd; agents publish it
// in their registration (Member.Etcd). A compare-and-swap whose expected
// revision is above etcd's revision is refused with a ConflictError whose
// FromAnotherHistory is true.
//
// # Reads and writes around a leader change
//
// Reads of several keys at one revision (the first step of every write)
// are retried while etcd is unavailable (IsUnavailable); a write whose
// outcome is unknown is never retried: its error is returned.
//
// # Timeouts
//
// Every method takes a context and is also bounded by Config.RequestTimeout
// (default 10s), so a call returns an error rather than hang when etcd is
// unreachable. Pass a shorter deadline where a caller must not wait that
// long.
//
// # Usage
//
//	st, err := store.New(store.Config{Client: cli})
//	if err != nil { return err }
//	w := store.WriteOptions{Actor: "alice", Expect: store.ExpectAbsent}
//	_, err = st.PutPolicy(ctx, "shipping-api", []byte(`{"breaker": {"minimumRequests": 50}}`), w)
//	_, err = st.SetOverride(ctx, "shipping-api", store.OverrideSpec{
//		State: sharedstate.ForcedOpen, Reason: "incident 42", TTL: 10 * time.Minute}, w)
//
//	watcher := st.Watch(ctx, handler, store.WatchOptions{})
//	defer watcher.Close()
//
// Tests start etcd with package embedded:
//
//	srv := embeddedtest.Start(t)
//	st, _ := store.New(store.Config{Client: embeddedtest.Client(t, srv)})
package store
