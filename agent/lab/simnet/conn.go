package simnet

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

var (
	errReset  = fmt.Errorf("simnet: connection reset: %w", syscall.ECONNRESET)
	errBroken = fmt.Errorf("simnet: peer closed the connection: %w", syscall.EPIPE)
)

// pair is one stream connection: two endpoints over two one-way halves.
type pair struct {
	net         *Network
	dialer      *Transport
	acceptor    *Transport
	dialerEnd   *endpoint
	acceptorEnd *endpoint

	mu       sync.Mutex
	closed   int  // endpoints closed
	gone     bool // removed from Network.conns
	wasReset bool
}

func newPair(dialer, acceptor *Transport, l Link, ephemeral int) *pair {
	p := &pair{net: dialer.net, dialer: dialer, acceptor: acceptor}
	up, down := newHalf(), newHalf() // up: dialer → acceptor
	laddr := &net.TCPAddr{IP: dialer.tcpAddr.IP, Port: ephemeral}
	p.dialerEnd = &endpoint{pair: p, owner: dialer, peer: acceptor, link: l,
		laddr: laddr, raddr: acceptor.tcpAddr, in: down, out: up}
	p.acceptorEnd = &endpoint{pair: p, owner: acceptor, peer: dialer, link: l,
		laddr: acceptor.tcpAddr, raddr: laddr, in: up, out: down}
	return p
}

// reset fails both ends at once (a partition, a shutdown) and forgets the pair.
func (p *pair) reset() {
	p.mu.Lock()
	again := p.wasReset
	p.wasReset = true
	p.mu.Unlock()
	if again {
		return
	}
	for _, e := range []*endpoint{p.dialerEnd, p.acceptorEnd} {
		e.in.fail(errReset)
		p.net.count(e.owner, statStreamsReset, 1)
	}
	p.forget()
}

func (p *pair) endClosed() {
	p.mu.Lock()
	p.closed++
	done := p.closed == 2
	p.mu.Unlock()
	if done {
		p.forget()
	}
}

func (p *pair) forget() {
	p.mu.Lock()
	gone := p.gone
	p.gone = true
	p.mu.Unlock()
	if !gone {
		p.net.mu.Lock()
		delete(p.net.conns, p)
		p.net.mu.Unlock()
	}
}

type chunk struct {
	at   time.Time // readable from
	data []byte
}

// half is one direction of a stream: what one end writes and the other reads.
type half struct {
	mu        sync.Mutex
	chunks    []chunk
	last      time.Time // arrival of the newest chunk: later writes never overtake it
	wclosed   bool      // the writer closed: EOF once drained
	rclosed   bool      // the reader closed: writes fail
	err       error     // reset: every read and write fails
	rdeadline time.Time
	wdeadline time.Time
	changed   chan struct{} // closed and replaced on every change
}

func newHalf() *half { return &half{changed: make(chan struct{})} }

// notifyLocked wakes readers waiting on h; h.mu is held.
func (h *half) notifyLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// fail makes every later read and write of h fail with err.
func (h *half) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = err
		h.chunks = nil
		h.notifyLocked()
	}
}

// endpoint is one end of a stream: a net.Conn.
type endpoint struct {
	pair        *pair
	owner, peer *Transport
	link        Link
	laddr       *net.TCPAddr
	raddr       *net.TCPAddr
	in, out     *half
	closeOnce   sync.Once
}

var _ net.Conn = (*endpoint)(nil)

// endNow says whether a Read or Write of n bytes returns at once, and with
// what: the first of errs that is not nil (in the order given), else
// os.ErrDeadlineExceeded when deadline has passed at now, else nil when
// there is nothing to move (n == 0). Its caller holds the half's lock.
func endNow(now, deadline time.Time, n int, errs ...error) (bool, error) {
	for _, err := range errs {
		if err != nil {
			return true, err
		}
	}
	if !deadline.IsZero() && !now.Before(deadline) {
		return true, os.ErrDeadlineExceeded
	}
	return n == 0, nil
}

// errIf returns err when cond holds, else nil.
func errIf(cond bool, err error) error {
	if cond {
		return err
	}
	return nil
}

// Read returns the bytes that have arrived, waiting for them (or for the
// read deadline, EOF, a reset) when none have.
func (e *endpoint) Read(p []byte) (int, error) {
	h := e.in
	h.mu.Lock()
	for {
		now := time.Now()
		if end, err := endNow(now, h.rdeadline, len(p), errIf(h.rclosed, net.ErrClosed), h.err); end {
			h.mu.Unlock()
			return 0, err
		}
		n := 0
		for n < len(p) && len(h.chunks) > 0 && !h.chunks[0].at.After(now) {
			c := &h.chunks[0]
			k := copy(p[n:], c.data)
			n += k
			c.data = c.data[k:]
			if len(c.data) == 0 {
				h.chunks[0] = chunk{}
				h.chunks = h.chunks[1:]
			}
		}
		if n > 0 {
			h.mu.Unlock()
			return n, nil
		}
		if len(h.chunks) == 0 && h.wclosed {
			h.mu.Unlock()
			return 0, io.EOF
		}
		var wait time.Duration = -1
		if len(h.chunks) > 0 {
			wait = h.chunks[0].at.Sub(now)
		}
		if !h.rdeadline.IsZero() {
			if d := h.rdeadline.Sub(now); wait < 0 || d < wait {
				wait = d
			}
		}
		changed := h.changed
		h.mu.Unlock()
		if wait < 0 {
			<-changed
		} else {
			timer := time.NewTimer(wait)
			select {
			case <-changed:
			case <-timer.C:
			}
			timer.Stop()
		}
		h.mu.Lock()
	}
}

// Write queues p for the peer, readable one link delay from now and never
// before what was written earlier. It never blocks.
func (e *endpoint) Write(p []byte) (int, error) {
	h := e.out
	h.mu.Lock()
	now := time.Now()
	if end, err := endNow(now, h.wdeadline, len(p), errIf(h.wclosed, net.ErrClosed), h.err, errIf(h.rclosed, errBroken)); end {
		h.mu.Unlock()
		return 0, err
	}
	_, delay := e.owner.net.fate(e.link, false)
	at := now.Add(delay)
	if at.Before(h.last) {
		at = h.last
	}
	h.last = at
	h.chunks = append(h.chunks, chunk{at: at, data: append([]byte(nil), p...)})
	h.notifyLocked()
	h.mu.Unlock()
	n := e.owner.net
	n.count(e.owner, statStreamBytesSent, uint64(len(p)))
	n.count(e.peer, statStreamBytesReceived, uint64(len(p)))
	return len(p), nil
}

// Close ends this side: the peer reads what was written, then EOF; the
// peer's writes fail. Idempotent.
func (e *endpoint) Close() error {
	e.closeOnce.Do(func() {
		e.in.mu.Lock()
		e.in.rclosed = true
		e.in.chunks = nil
		e.in.notifyLocked()
		e.in.mu.Unlock()
		e.out.mu.Lock()
		e.out.wclosed = true
		e.out.notifyLocked()
		e.out.mu.Unlock()
		e.pair.endClosed()
	})
	return nil
}

func (e *endpoint) LocalAddr() net.Addr  { return e.laddr }
func (e *endpoint) RemoteAddr() net.Addr { return e.raddr }

func (e *endpoint) SetDeadline(t time.Time) error {
	e.SetReadDeadline(t)
	return e.SetWriteDeadline(t)
}

func (e *endpoint) SetReadDeadline(t time.Time) error {
	e.in.mu.Lock()
	e.in.rdeadline = t
	e.in.notifyLocked()
	e.in.mu.Unlock()
	return nil
}

func (e *endpoint) SetWriteDeadline(t time.Time) error {
	e.out.mu.Lock()
	e.out.wdeadline = t
	e.out.mu.Unlock()
	return nil
}
