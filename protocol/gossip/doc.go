// Package gossip is the gossip member both Fusebox daemons run: the
// fusebox-agent in role "agent", the coordinator's fleet observer in role
// "observer". It owns a hashicorp/memberlist and its delegates: the frame
// codec of package protocol on every path, a TransmitLimitedQueue of frames
// named (kind, dependency, node) so a newer update invalidates a queued older
// one, direct best-effort sends, push-pull state, node metadata (NodeMeta:
// role, zone, version, API addresses), membership events, keyring files
// (LoadKeyringFile, ApplyKeyring) and memberlist's log turned into slog
// records.
//
// What the member hears goes to a Handler; membership changes go to
// MemberEvents. Each hook documents its concurrency contract. Malformed
// frames are dropped and counted (Stats.Dropped by DropReasons), never a
// panic.
//
// With a Signer, a member signs the rows and records it originates
// (Ed25519ctx over the item's bytes) and relays others' in the envelopes
// they came in; receivers take an item only signed by its origin's key, as
// a KeySource says (a KeyDirectory of the etcd member entries, or else the
// members' metadata), checking membership and the handler's Screener
// (items it knows already) before the signature. It sends at the lowest
// frame version an alive member speaks (SendVersion), so a fleet with
// members of the previous release keeps working during a rolling upgrade.
//
//	cfg := gossip.DefaultConfig()
//	cfg.Name, cfg.BindAddr = "coordinator-1", "0.0.0.0:7947"
//	cfg.Meta = gossip.NodeMeta{Role: gossip.RoleObserver, Software: version}
//	cfg.Handler = fleetView // implements gossip.Handler
//	cfg.Events = fleetView  // implements gossip.MemberEvents (optional)
//	cfg.Keyring = keyring   // gossip.LoadKeyringFile (optional)
//	cfg.Signer = key        // gossip.LoadOrCreateKey (optional: an agent signs, an observer need not)
//	cfg.Keys = dir.Key      // a gossip.KeyDirectory of the etcd member entries (optional)
//	g, err := gossip.New(cfg) // Validate names every bad field
//	if err != nil {
//		return err
//	}
//	defer g.Close(time.Second) // Leave, then Shutdown
//	_, err = g.Join(addrs)
package gossip
