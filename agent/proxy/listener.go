package proxy

import (
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Why a connection was refused (the reason label of
// connections_refused_total).
const (
	refusedTotal     = iota // MaxConns were open
	refusedPerClient        // MaxConnsPerClient were open from its address
	numRefusals
)

var refusalNames = [numRefusals]string{"max_conns", "max_conns_per_client"}

// limitListener caps the connections open at once, in total and per
// client address. One past a cap is accepted, answered 503 and closed at
// once: a client never waits in the backlog for a slot that may not come.
// The per-address table holds only addresses with a connection open, so it
// is bounded by the total cap.
type limitListener struct {
	net.Listener
	max, maxPerClient int64
	open              atomic.Int64
	refused           func(reason int) // counts a refused connection

	mu        sync.Mutex
	perClient map[netip.Addr]int64 // open connections by client address
}

func newLimitListener(ln net.Listener, max, maxPerClient int, refused func(int)) *limitListener {
	return &limitListener{Listener: ln, max: int64(max), maxPerClient: int64(maxPerClient), refused: refused,
		perClient: map[netip.Addr]int64{}}
}

// refusals are the whole answers to a connection past a cap.
var refusals = [numRefusals][]byte{
	refusal("too-many-connections", "fusebox proxy: too many connections open (the proxy's limit)\n"),
	refusal("too-many-client-connections", "fusebox proxy: too many connections open from your address (the proxy's limit per client)\n"),
}

func refusal(reason, body string) []byte {
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
		"Retry-After: 1\r\n" + HeaderRejected + ": " + reason + "\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := clientAddr(c.RemoteAddr())
		if reason, ok := l.admit(key); !ok {
			l.refused(reason)
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Write(refusals[reason])
			_ = c.Close()
			continue
		}
		return &limitConn{Conn: c, l: l, key: key}, nil
	}
}

// admit counts a new connection from key, or says which cap refuses it.
func (l *limitListener) admit(key netip.Addr) (int, bool) {
	if l.open.Add(1) > l.max {
		l.open.Add(-1)
		return refusedTotal, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perClient[key] >= l.maxPerClient {
		l.open.Add(-1)
		return refusedPerClient, false
	}
	l.perClient[key]++
	return 0, true
}

func (l *limitListener) release(key netip.Addr) {
	l.mu.Lock()
	if n := l.perClient[key] - 1; n > 0 {
		l.perClient[key] = n
	} else {
		delete(l.perClient, key)
	}
	l.mu.Unlock()
	l.open.Add(-1)
}

// clientAddr is the IP of a client's address (the zero Addr for one that
// is not TCP: all such connections share one count).
func clientAddr(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

type limitConn struct {
	net.Conn
	l    *limitListener
	key  netip.Addr
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.key) })
	return err
}
