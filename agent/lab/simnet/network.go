package simnet

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultQueueLen is the receive queue of a transport, in packets, when
// Config.QueueLen is 0. memberlist drains its queue in one goroutine that
// hands each packet off quickly; 1024 packets is about what a Linux UDP
// socket buffer (212 KiB default) holds of memberlist's small packets.
const DefaultQueueLen = 1024

// DefaultPort is the port of the addresses NewTransport picks.
const DefaultPort = 7946

// Link describes the path between two nodes, one direction.
type Link struct {
	// Latency is the one-way delay of every packet and stream write
	// (optional, default 0).
	Latency time.Duration
	// Jitter adds a uniform random delay in [0, Jitter) to each packet and
	// stream write (optional, default 0).
	Jitter time.Duration
	// Loss is the probability in [0, 1] that a packet is lost (optional,
	// default 0). Streams are reliable and never lose data.
	Loss float64
}

// Validate names every problem of the link.
func (l Link) Validate() error {
	var errs []error
	if l.Latency < 0 {
		errs = append(errs, fmt.Errorf("simnet: link latency must be >= 0, got %v", l.Latency))
	}
	if l.Jitter < 0 {
		errs = append(errs, fmt.Errorf("simnet: link jitter must be >= 0, got %v", l.Jitter))
	}
	if math.IsNaN(l.Loss) || l.Loss < 0 || l.Loss > 1 {
		errs = append(errs, fmt.Errorf("simnet: link loss must be in [0, 1], got %v", l.Loss))
	}
	return errors.Join(errs...)
}

// Config configures a Network.
type Config struct {
	// Seed seeds the random source of losses and jitter (optional, default 0).
	Seed uint64
	// Link applies to every pair of nodes without a SetLink of its own
	// (optional, default: no latency, no loss).
	Link Link
	// QueueLen is each transport's receive queue in packets; a packet that
	// arrives at a full queue is dropped and counted (optional, default
	// DefaultQueueLen).
	QueueLen int
	// StreamBacklog is how many accepted streams may wait for the receiver
	// to pick them up before further dials are refused (optional, default
	// 128, like a listen backlog).
	StreamBacklog int
	// ServiceTime is the CPU time a receiving host spends on each packet
	// before memberlist has it (optional, default 0: hosts are infinitely
	// fast). A host serves its packets one at a time in arrival order: a
	// packet that arrives while it is busy waits, and one that finds
	// QueueLen packets waiting is dropped (PacketsDropped), as a host that
	// cannot keep up drops. Streams are not charged.
	ServiceTime time.Duration
}

// Validate names every problem of the configuration.
func (c Config) Validate() error {
	var errs []error
	if err := c.Link.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.QueueLen < 0 {
		errs = append(errs, fmt.Errorf("simnet: QueueLen must be >= 0, got %d", c.QueueLen))
	}
	if c.StreamBacklog < 0 {
		errs = append(errs, fmt.Errorf("simnet: StreamBacklog must be >= 0, got %d", c.StreamBacklog))
	}
	if c.ServiceTime < 0 {
		errs = append(errs, fmt.Errorf("simnet: ServiceTime must be >= 0, got %v", c.ServiceTime))
	}
	return errors.Join(errs...)
}

// ErrClosed is returned by operations on a closed Network or Transport.
var ErrClosed = errors.New("simnet: closed")

// Network connects the transports made by NewTransport. All methods are
// safe for concurrent use.
type Network struct {
	cfg Config

	mu      sync.RWMutex // guards the topology below
	nodes   map[string]*Transport
	links   map[[2]string]Link // directed overrides of cfg.Link
	groups  map[string]string  // address -> partition group; absent = ""
	nextIP  uint32
	conns   map[*pair]struct{} // open streams
	nextEph uint32

	rngMu sync.Mutex
	rng   *rand.Rand

	stats counters // totals over every transport, closed ones included; atomic

	sched     scheduler
	waiting   atomic.Int32 // dials waiting (tests)
	closed    atomic.Bool
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// New validates cfg and starts a network (one goroutine delivers delayed
// packets until Close).
func New(cfg Config) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.QueueLen == 0 {
		cfg.QueueLen = DefaultQueueLen
	}
	if cfg.StreamBacklog == 0 {
		cfg.StreamBacklog = 128
	}
	n := &Network{
		cfg:    cfg,
		nodes:  make(map[string]*Transport),
		links:  make(map[[2]string]Link),
		groups: make(map[string]string),
		conns:  make(map[*pair]struct{}),
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		done:   make(chan struct{}),
	}
	n.sched.wake = make(chan struct{}, 1)
	n.wg.Add(1)
	go n.deliverLoop()
	return n, nil
}

// Close shuts down every transport still open, resets open streams, stops
// the delivery goroutine and drops the packets still in flight. Shut the
// memberlists down first. Close is idempotent.
func (n *Network) Close() error {
	n.closeOnce.Do(func() {
		n.closed.Store(true)
		n.mu.RLock()
		open := make([]*Transport, 0, len(n.nodes))
		for _, t := range n.nodes {
			open = append(open, t)
		}
		n.mu.RUnlock()
		for _, t := range open {
			t.Shutdown()
		}
		close(n.done)
		n.wg.Wait()
	})
	return nil
}

// NewTransport registers a node at addr ("ip:port"; "" picks the next free
// address 10.x.y.z:7946) and returns its transport, to be put in
// memberlist.Config.Transport. An address is free again once its transport
// is shut down, so a restarted node can keep its address.
func (n *Network) NewTransport(addr string) (*Transport, error) {
	if n.closed.Load() {
		return nil, ErrClosed
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var ap netip.AddrPort
	if addr == "" {
		for {
			n.nextIP++
			ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(n.nextIP >> 16), byte(n.nextIP >> 8), byte(n.nextIP)}), DefaultPort)
			if _, used := n.nodes[ap.String()]; !used {
				break
			}
		}
	} else {
		var err error
		if ap, err = netip.ParseAddrPort(addr); err != nil {
			return nil, fmt.Errorf("simnet: address %q: want ip:port: %w", addr, err)
		}
		if ap.Port() == 0 {
			return nil, fmt.Errorf("simnet: address %q: port 0 is not an address", addr)
		}
		if _, used := n.nodes[ap.String()]; used {
			return nil, fmt.Errorf("simnet: address %s is in use", ap)
		}
	}
	t := &Transport{
		net:     n,
		addr:    ap,
		key:     ap.String(),
		udpAddr: net.UDPAddrFromAddrPort(ap),
		tcpAddr: net.TCPAddrFromAddrPort(ap),
		packets: make(chan *memberlist.Packet, n.cfg.QueueLen),
		streams: make(chan net.Conn, n.cfg.StreamBacklog),
		done:    make(chan struct{}),
	}
	n.nodes[t.key] = t
	return t, nil
}

// Addrs returns the addresses of the open transports, sorted.
func (n *Network) Addrs() []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]string, 0, len(n.nodes))
	for a := range n.nodes {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// SetLink sets the link between a and b, both directions (Config.Link
// applies to pairs without one). Unknown addresses are refused.
func (n *Network) SetLink(a, b string, l Link) error {
	if err := l.Validate(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range []string{a, b} {
		if _, ok := n.nodes[x]; !ok {
			return fmt.Errorf("simnet: SetLink: no transport at %q", x)
		}
	}
	n.links[[2]string{a, b}] = l
	n.links[[2]string{b, a}] = l
	return nil
}

// SetDefaultLink replaces Config.Link for every pair without a SetLink.
func (n *Network) SetDefaultLink(l Link) error {
	if err := l.Validate(); err != nil {
		return err
	}
	n.mu.Lock()
	n.cfg.Link = l
	n.mu.Unlock()
	return nil
}

// Partition splits the network: each named group holds the listed
// addresses; addresses not listed form one more group of their own. Nodes
// reach each other only within their group. Packets in flight between
// groups are dropped when they arrive, streams between groups are reset,
// dials between groups time out. A Partition replaces the previous one.
// Empty group names, unknown addresses and an address in two groups are
// refused, all of them named, and nothing changes.
func (n *Network) Partition(groups map[string][]string) error {
	n.mu.Lock()
	var errs []error
	next := make(map[string]string)
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		if g == "" {
			errs = append(errs, errors.New(`simnet: Partition: group name "" is reserved for the unlisted addresses`))
			continue
		}
		for _, a := range groups[g] {
			if _, ok := n.nodes[a]; !ok {
				errs = append(errs, fmt.Errorf("simnet: Partition: group %q: no transport at %q", g, a))
				continue
			}
			if prev, dup := next[a]; dup {
				errs = append(errs, fmt.Errorf("simnet: Partition: %s is in groups %q and %q", a, prev, g))
				continue
			}
			next[a] = g
		}
	}
	if len(errs) > 0 {
		n.mu.Unlock()
		return errors.Join(errs...)
	}
	n.groups = next
	var cut []*pair
	for p := range n.conns {
		if n.groups[p.dialer.key] != n.groups[p.acceptor.key] {
			cut = append(cut, p)
		}
	}
	n.mu.Unlock()
	for _, p := range cut {
		p.reset()
	}
	return nil
}

// Heal ends the partition: every node reaches every other again.
func (n *Network) Heal() {
	n.mu.Lock()
	n.groups = make(map[string]string)
	n.mu.Unlock()
}

// Group returns the partition group of addr ("" when unlisted or healed).
func (n *Network) Group(addr string) string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.groups[addr]
}

// Stats returns the totals over every transport the network made, closed
// ones included.
func (n *Network) Stats() Stats { return n.stats.load() }

// route reports the link from src to dst, whether dst is listening and
// whether the two are in the same partition group. Callers hold no lock.
func (n *Network) route(src, dst string) (l Link, to *Transport, reachable bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	to = n.nodes[dst]
	l, ok := n.links[[2]string{src, dst}]
	if !ok {
		l = n.cfg.Link
	}
	return l, to, n.groups[src] == n.groups[dst]
}

// fate draws whether a packet is lost and its delay.
func (n *Network) fate(l Link, lossy bool) (lost bool, delay time.Duration) {
	if l.Loss == 0 && l.Jitter == 0 {
		return false, l.Latency
	}
	n.rngMu.Lock()
	defer n.rngMu.Unlock()
	if lossy && l.Loss > 0 && n.rng.Float64() < l.Loss {
		return true, 0
	}
	delay = l.Latency
	if l.Jitter > 0 {
		delay += time.Duration(n.rng.Int64N(int64(l.Jitter)))
	}
	return false, delay
}

func (n *Network) unregister(t *Transport) {
	n.mu.Lock()
	if n.nodes[t.key] == t {
		delete(n.nodes, t.key)
	}
	var mine []*pair
	for p := range n.conns {
		if p.dialer == t || p.acceptor == t {
			mine = append(mine, p)
		}
	}
	n.mu.Unlock()
	for _, p := range mine {
		p.reset()
	}
}

// ephemeralPortLocked returns a dialer's local port; n.mu is held.
func (n *Network) ephemeralPortLocked() int {
	n.nextEph++
	return 32768 + int(n.nextEph%28000)
}

// --- delayed delivery -------------------------------------------------------

type inflight struct {
	at   time.Time
	seq  uint64
	from *Transport
	to   string
	pkt  *memberlist.Packet
	// served is the receiver whose host has served pkt (ServiceTime):
	// due, it goes to memberlist (nil: pkt is on the wire).
	served *Transport
}

type pqueue []*inflight

func (q pqueue) Len() int { return len(q) }
func (q pqueue) Less(i, j int) bool {
	if q[i].at.Equal(q[j].at) {
		return q[i].seq < q[j].seq
	}
	return q[i].at.Before(q[j].at)
}
func (q pqueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *pqueue) Push(x any)   { *q = append(*q, x.(*inflight)) }
func (q *pqueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return x
}

type scheduler struct {
	mu   sync.Mutex
	q    pqueue
	seq  uint64
	wake chan struct{} // buffered(1): the earliest deadline changed
}

func (n *Network) schedule(f *inflight) {
	s := &n.sched
	s.mu.Lock()
	s.seq++
	f.seq = s.seq
	heap.Push(&s.q, f)
	first := s.q[0] == f
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// deliverLoop hands delayed packets to their receivers when they are due.
func (n *Network) deliverLoop() {
	defer n.wg.Done()
	s := &n.sched
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*inflight
	for {
		s.mu.Lock()
		now := time.Now()
		due = due[:0]
		for len(s.q) > 0 && !s.q[0].at.After(now) {
			due = append(due, heap.Pop(&s.q).(*inflight))
		}
		wait := time.Hour
		if len(s.q) > 0 {
			wait = s.q[0].at.Sub(now)
		}
		s.mu.Unlock()
		for i, f := range due {
			if f.served != nil {
				n.served(f.served, f.pkt)
			} else {
				n.deliver(f.from, f.to, f.pkt)
			}
			due[i] = nil
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-n.done:
			s.mu.Lock()
			s.q = nil
			s.mu.Unlock()
			return
		case <-s.wake:
		case <-timer.C:
		}
	}
}

// deliver puts a packet into the receiver's queue, or counts why not.
func (n *Network) deliver(from *Transport, to string, p *memberlist.Packet) {
	_, dst, reachable := n.route(from.key, to)
	switch {
	case dst == nil || dst.closed.Load():
		n.count(from, statPacketsUnroutable, 1)
		return
	case !reachable:
		n.count(from, statPacketsCut, 1)
		return
	}
	p.Timestamp = time.Now()
	if n.cfg.ServiceTime > 0 {
		n.serve(dst, p)
		return
	}
	n.handOff(dst, p)
}

// handOff puts a packet into the receiver's queue (memberlist's), or
// counts it dropped when the queue is full.
func (n *Network) handOff(dst *Transport, p *memberlist.Packet) {
	select {
	case dst.packets <- p:
		n.count(dst, statPacketsReceived, 1)
		n.count(dst, statPacketBytesReceived, uint64(len(p.Buf)))
	default:
		n.count(dst, statPacketsDropped, 1)
	}
}
