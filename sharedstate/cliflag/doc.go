// Package cliflag holds what the daemons (fusebox-agent, its egress proxy,
// fusebox-coordinator) share about the addresses their flags give: whether
// one is loopback (IsLoopback), and the bind error that names the flag of
// the address (ListenError). It imports the standard library only; the
// flags themselves, their FUSEBOX_* variables and the --config file are
// package daemonflag's.
//
//	ln, err := cliflag.Listen("http-addr", cfg.HTTPAddr)
//	// err: "--http-addr 127.0.0.1:7070: address already in use"
package cliflag
