// Package store keeps Fusebox's shared configuration in etcd, under one key
// prefix (default "/fusebox/"): policies, operator overrides, the audit
// trail and member registrations. Every value is validated with package
// sharedstate when it is written and again when it is read; writes are
// compare-and-swap on a key's mod revision (WriteOptions.Expect), each with
// its audit entry in the same transaction; Watch lists policies and
// overrides at one revision, then follows them in revision order, listing
// again after a compaction or when etcd's history went back.
//
//	st, err := store.New(store.Config{Client: cli})
//	if err != nil { return err }
//	w := store.WriteOptions{Actor: "alice", Expect: store.ExpectAbsent}
//	_, err = st.PutPolicy(ctx, "shipping-api", []byte(`{"breaker": {"minimumRequests": 50}}`), w)
//	_, err = st.SetOverride(ctx, "shipping-api", store.OverrideSpec{
//		State: sharedstate.ForcedOpen, Reason: "failover drill", TTL: 10 * time.Minute}, w)
//
//	watcher := st.Watch(ctx, handler, store.WatchOptions{})
//	defer watcher.Close()
//
// Tests start etcd with package embedded (embeddedtest.Start). The key
// layout and the rules are in sharedstate/DESIGN.md, "etcd key layout";
// what operators see of a rewind, in deploy/README.md, "Operating etcd".
package store
