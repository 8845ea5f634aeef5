package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// errOwnListener is what a dial to one of the agent's own listeners fails
// with (whatever name resolved to it): the proxy answers 403 and counts
// nothing against the dependency.
var errOwnListener = errors.New("fusebox proxy: refusing to connect to one of the agent's own listeners")

// guard knows the agent's own listeners. Its dialer's Control hook sees
// the address every connection is made to, after name resolution, so no
// name, alias or DNS answer leads the proxy to the agent itself (or to
// itself: a loop).
type guard struct {
	specific map[netip.AddrPort]bool // listeners bound to one address
	anyPort  map[uint16]bool         // listeners bound to every address (0.0.0.0, ::)

	mu      sync.Mutex
	local   map[netip.Addr]bool // this host's addresses, for anyPort
	localAt time.Time
}

// localRefresh is how long the host's interface addresses are trusted.
const localRefresh = 10 * time.Second

// newGuard resolves the addresses (host:port; a name is looked up once,
// within a second; an unresolvable one is skipped).
func newGuard(addrs []string) *guard {
	g := &guard{specific: map[netip.AddrPort]bool{}, anyPort: map[uint16]bool{}}
	for _, a := range addrs {
		host, ps, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil || n == 0 {
			continue
		}
		port := uint16(n)
		if host == "" {
			g.anyPort[port] = true
			continue
		}
		var ips []netip.Addr
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			ips, _ = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			cancel()
		}
		for _, ip := range ips {
			if ip = ip.Unmap(); ip.IsUnspecified() {
				g.anyPort[port] = true
			} else {
				g.specific[netip.AddrPortFrom(ip, port)] = true
			}
		}
	}
	return g
}

// forbidden reports whether ap is one of the agent's listeners.
func (g *guard) forbidden(ap netip.AddrPort) bool {
	ip := ap.Addr().Unmap()
	ap = netip.AddrPortFrom(ip, ap.Port())
	if g.specific[ap] {
		return true
	}
	if ip.IsUnspecified() { // dialing 0.0.0.0 reaches this host
		for s := range g.specific {
			if s.Port() == ap.Port() {
				return true
			}
		}
	}
	if !g.anyPort[ap.Port()] {
		return false
	}
	return ip.IsLoopback() || ip.IsUnspecified() || g.isLocal(ip)
}

// isLocal reports whether ip is an address of this host's interfaces.
func (g *guard) isLocal(ip netip.Addr) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.local == nil || time.Since(g.localAt) > localRefresh {
		g.local = map[netip.Addr]bool{}
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil {
					g.local[p.Addr().Unmap()] = true
				}
			}
		}
		g.localAt = time.Now()
	}
	return g.local[ip]
}

// control is the dialer's Control hook: it refuses the agent's listeners.
func (g *guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil // not an IP address: nothing of ours
	}
	if g.forbidden(ap) {
		return errOwnListener
	}
	return nil
}
