// Package gossip is the gossip member both Fusebox daemons run: the
// fusebox-agent in role "agent", the coordinator's fleet observer in role
// "observer". It owns a hashicorp/memberlist and its delegates: the frame
// codec of package protocol on every path, a broadcast queue of frames
// named so a newer update invalidates a queued older one, direct sends,
// push-pull state, node metadata (NodeMeta), membership events, keyring
// files and, with a Signer, Ed25519 signatures on the items a member
// originates, checked against a KeySource. What the member hears goes to a
// Handler, membership changes to MemberEvents; each hook documents its
// concurrency contract. How the agents use it, and the threat model it
// serves: agent/README.md.
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
