// Package embedded runs a single-member etcd cluster inside the process,
// for two users: the coordinator's "embedded default" (no external etcd
// configured: start one and print its client URL) and every integration
// test in the project.
//
// A server listens on 127.0.0.1 port 0 by default, so tests never collide
// on ports; Endpoints reports the real address. Stop and Restart take the
// server down and bring it back on the same data directory and the same
// client URL, so tests can check what clients do while etcd is away.
//
// Port 0 caveat: etcd records the configured URLs in its member list, so a
// member started on port 0 advertises port 0 until its first Restart. Use
// Endpoints, never Client.MemberList or Config.AutoSyncInterval, to find a
// port-0 server.
//
// In a test, with the helpers of package embeddedtest (a package of its
// own, so that no binary links package testing):
//
//	srv := embeddedtest.Start(t)       // t.TempDir(), closed in t.Cleanup
//	cli := embeddedtest.Client(t, srv) // closed in t.Cleanup, before srv
//	srv.Stop()                         // etcd down, data kept
//	err := srv.Restart(ctx)            // back on the same URL
//	px := embeddedtest.NewProxy(t, srv.Endpoints()[0])
//	px.SetCut(true) // partition one client (via px.Endpoint()), etcd stays up
//
// In a program:
//
//	cfg := embedded.DefaultConfig()
//	cfg.Dir = "/var/lib/fusebox/etcd"
//	cfg.ClientURL = "http://127.0.0.1:2379"
//	srv, err := embedded.Start(ctx, cfg)
//	if err != nil { return err }
//	defer srv.Close()
//	fmt.Println("etcd at", srv.Endpoints()[0])
package embedded
