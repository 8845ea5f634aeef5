package simnet

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

// Transport is one node's end of the network: a memberlist.NodeAwareTransport.
// All methods are safe for concurrent use, as memberlist requires.
type Transport struct {
	net     *Network
	addr    netip.AddrPort
	key     string // addr.String()
	udpAddr *net.UDPAddr
	tcpAddr *net.TCPAddr

	packets chan *memberlist.Packet // buffered Config.QueueLen; never closed
	streams chan net.Conn           // buffered Config.StreamBacklog; never closed

	stats    counters
	svcMu    sync.Mutex
	svc      service // the host's CPU (Config.ServiceTime)
	closed   atomic.Bool
	done     chan struct{}
	shutOnce sync.Once
}

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

// Addr returns the transport's address, ip:port.
func (t *Transport) Addr() string { return t.key }

// Stats returns this transport's counters (see Stats for which side counts what).
func (t *Transport) Stats() Stats { return t.stats.load() }

// QueueLen returns how many received packets wait for memberlist.
func (t *Transport) QueueLen() int { return len(t.packets) }

// FinalAdvertiseAddr returns the transport's own address whatever was
// configured: on a simulated network a node has exactly one.
func (t *Transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.udpAddr.IP, t.udpAddr.Port, nil
}

// WriteTo sends a packet to addr (ip:port); see WriteToAddress.
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a best-effort packet. It never blocks: the packet is
// copied, its fate drawn (lost, delayed, cut by a partition) and, when it
// survives, queued for delivery. Like UDP it reports no error for a packet
// that will not arrive; only a shut-down transport refuses to send.
func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	if t.closed.Load() {
		return now, ErrClosed
	}
	n := t.net
	n.count(t, statPacketsSent, 1)
	n.count(t, statPacketBytesSent, uint64(len(b)))
	ps := split(b)
	if ps.userMsgs > 0 {
		n.count(t, statUserMessages, uint64(ps.userMsgs))
		n.count(t, statUserBytes, uint64(ps.userBytes))
		n.count(t, statPacketsWithUser, 1)
	}
	n.count(t, statOwnMessages, uint64(ps.ownMsgs()))
	n.count(t, statProbeMessages, uint64(ps.probeMsgs))
	n.count(t, statProbeBytes, uint64(ps.probeBytes))
	n.count(t, statMembershipMessages, uint64(ps.memberMsgs))
	n.count(t, statMembershipBytes, uint64(ps.memberBytes))
	n.count(t, statSuspectMessages, uint64(ps.suspects))
	n.count(t, statDeadMessages, uint64(ps.deads))
	l, dst, reachable := n.route(t.key, a.Addr)
	switch {
	case dst == nil:
		n.count(t, statPacketsUnroutable, 1)
		return now, nil
	case !reachable:
		n.count(t, statPacketsCut, 1)
		return now, nil
	}
	lost, delay := n.fate(l, true)
	if lost {
		n.count(t, statPacketsLost, 1)
		return now, nil
	}
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: t.udpAddr}
	if delay <= 0 {
		n.deliver(t, a.Addr, p)
	} else {
		n.schedule(&inflight{at: now.Add(delay), from: t, to: a.Addr, pkt: p})
	}
	return now, nil
}

// PacketCh returns the receive queue.
func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// StreamCh returns the accepted streams.
func (t *Transport) StreamCh() <-chan net.Conn { return t.streams }

// DialTimeout opens a stream to addr (ip:port); see DialAddressTimeout.
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout opens a reliable stream. Connecting takes one round
// trip on the link; an address nobody listens on refuses at once; a peer
// across a partition makes the dial wait for timeout and fail with a
// timeout error (net.Error.Timeout() is true).
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.closed.Load() {
		return nil, ErrClosed
	}
	n := t.net
	deadline := time.Now().Add(timeout)
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Source: t.tcpAddr, Addr: addrOf(a.Addr), Err: err}
	}
	refused := func() (net.Conn, error) {
		n.count(t, statStreamsRefused, 1)
		return nil, opErr(syscall.ECONNREFUSED)
	}
	timedOut := func() (net.Conn, error) {
		if err := t.waitUntil(deadline); err != nil {
			return nil, err
		}
		n.count(t, statStreamsTimedOut, 1)
		return nil, opErr(os.ErrDeadlineExceeded)
	}
	l, dst, reachable := n.route(t.key, a.Addr)
	switch {
	case !reachable:
		return timedOut()
	case dst == nil:
		return refused()
	}
	_, there := n.fate(l, false)
	_, back := n.fate(l, false)
	if handshake := time.Now().Add(there + back); handshake.After(deadline) {
		return timedOut()
	} else if err := t.waitUntil(handshake); err != nil {
		return nil, err
	}

	n.mu.Lock()
	dst = n.nodes[a.Addr]
	switch {
	case n.groups[t.key] != n.groups[a.Addr]:
		n.mu.Unlock()
		return timedOut()
	case dst == nil || dst.closed.Load():
		n.mu.Unlock()
		return refused()
	}
	p := newPair(t, dst, l, n.ephemeralPortLocked())
	n.conns[p] = struct{}{}
	n.mu.Unlock()
	// Registered before it is handed over: a Shutdown of either side or a
	// Partition from now on resets it, wherever it is.
	select {
	case dst.streams <- p.acceptorEnd:
	default:
		p.reset()
		return refused()
	}
	n.count(t, statStreamsOpened, 1)
	return p.dialerEnd, nil
}

// waitUntil waits for the deadline, or fails when the transport or the
// network shuts down first.
func (t *Transport) waitUntil(deadline time.Time) error {
	d := time.Until(deadline)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	t.net.waiting.Add(1)
	defer t.net.waiting.Add(-1)
	select {
	case <-timer.C:
		return nil
	case <-t.done:
		return ErrClosed
	case <-t.net.done:
		return ErrClosed
	}
}

// Shutdown stops the transport: it sends and dials no more, its address
// becomes free, its open streams are reset and packets still on their way to
// it are counted unroutable. Queued packets stay in PacketCh (memberlist
// stops reading it on its own shutdown). Idempotent.
func (t *Transport) Shutdown() error {
	t.shutOnce.Do(func() {
		t.closed.Store(true)
		close(t.done)
		t.net.unregister(t)
	})
	return nil
}

func addrOf(s string) net.Addr {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return nil
	}
	return net.TCPAddrFromAddrPort(ap)
}

func (t *Transport) String() string { return fmt.Sprintf("simnet transport %s", t.key) }
