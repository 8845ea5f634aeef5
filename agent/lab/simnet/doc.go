// Package simnet is a simulated network for running many memberlist members
// in one process: an implementation of memberlist.NodeAwareTransport over
// in-process links with per-link latency and jitter, random packet loss,
// partitions into named groups, bounded receive queues and byte/message
// counters. Tests and the scale benchmark use it; production code must not
// (`make deps-check` fails when a binary under cmd/ links it).
//
// Usage:
//
//	net, _ := simnet.New(simnet.Config{Seed: 1, Link: simnet.Link{Latency: 20 * time.Millisecond, Jitter: 30 * time.Millisecond, Loss: 0.05}})
//	defer net.Close()
//	tr, _ := net.NewTransport("")        // "" picks the next free 10.x.y.z:7946
//	cfg := memberlist.DefaultLANConfig()
//	cfg.Name, cfg.Transport = "node-1", tr
//	m, _ := memberlist.Create(cfg)
//	...
//	net.Partition(map[string][]string{"left": leftAddrs, "right": rightAddrs})
//	net.Heal()
//	s := net.Stats() // packets and bytes sent, delivered, lost, cut, dropped
//
// # Model
//
// Packets (memberlist's UDP side) are best effort: each is lost with the
// link's Loss probability, delayed by Latency plus a uniform random extra in
// [0, Jitter) (so packets may overtake each other), and dropped when the
// sender and receiver are in different partition groups at the time it is
// sent or at the time it arrives, or when the receiver's queue is full
// (Config.QueueLen). Every fate is counted.
//
// Streams (memberlist's TCP side) are reliable and ordered: no loss, each
// write arrives one link delay after it was written, later writes never
// overtake earlier ones. A dial to an address nobody listens on fails at
// once ("connection refused"); a dial across a partition waits for its
// timeout and fails with a timeout error, as a SYN into a black hole would;
// streams that cross a partition when it is made are reset. Writes never
// block (the receive buffer is unbounded), which is enough for memberlist's
// request/response streams.
//
// Hosts are infinitely fast unless Config.ServiceTime says otherwise: then
// a receiver spends that much of its one CPU on each packet, serving them
// in arrival order, so that a host that receives more than it can handle
// queues and then drops, as a real one does. Streams cost no CPU.
//
// Time is the clock of the goroutines that use the network: real time, or,
// for a network made inside a testing/synctest bubble, the bubble's virtual
// time (its delivery goroutine and timers are the bubble's). In virtual
// time a simulation of hundreds of members keeps every timer on schedule
// however slow the machine that runs it, and idle protocol time costs no
// wall time; the lab's package scale runs its fleets so.
//
// Stats also split the packets sent into memberlist's own messages and
// user messages (the delegate's broadcasts and SendToAddress), so that a
// simulation can tell whether membership traffic crowds its own out.
//
// Randomness (loss, jitter) comes from one source seeded with Config.Seed;
// a single goroutine sending on a network gets the same fates in every run.
package simnet
