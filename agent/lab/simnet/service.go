package simnet

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// A receiving host's CPU (Config.ServiceTime): one server per transport,
// first come first served. A packet that arrived waits until the host is
// done with the ones before it, then takes ServiceTime of the host, then
// goes to memberlist. The wait is what a host that cannot keep up adds to
// every message; packets beyond QueueLen waiting are dropped.

// service is a transport's host: when it is next free and how many
// packets wait for it or are being served.
type service struct {
	busyUntil time.Time
	waiting   int
}

// serve queues p at dst's host, or drops it when QueueLen packets wait
// there already.
func (n *Network) serve(dst *Transport, p *memberlist.Packet) {
	dst.svcMu.Lock()
	if dst.svc.waiting >= n.cfg.QueueLen {
		dst.svcMu.Unlock()
		n.count(dst, statPacketsDropped, 1)
		return
	}
	start := p.Timestamp
	if dst.svc.busyUntil.After(start) {
		start = dst.svc.busyUntil
	}
	done := start.Add(n.cfg.ServiceTime)
	dst.svc.busyUntil = done
	dst.svc.waiting++
	dst.svcMu.Unlock()
	n.schedule(&inflight{at: done, to: dst.key, pkt: p, served: dst})
}

// served hands a packet the host is done with to memberlist.
func (n *Network) served(dst *Transport, p *memberlist.Packet) {
	dst.svcMu.Lock()
	dst.svc.waiting--
	dst.svcMu.Unlock()
	if dst.closed.Load() {
		return
	}
	p.Timestamp = time.Now() // when memberlist reads it, as from a socket
	n.handOff(dst, p)
}
