package proxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// limitListener caps the connections open at once. One past the cap is
// accepted, answered 503 and closed at once: a client never waits in the
// backlog for a slot that may not come.
type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused func() // counts a refused connection
}

// refusal is the whole answer to a connection past the cap.
const refusal = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Retry-After: 1\r\n" + HeaderRejected + ": too-many-connections\r\nConnection: close\r\nContent-Length: 61\r\n\r\n" +
	"fusebox proxy: too many connections open (the proxy's limit)\n"

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused()
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Write([]byte(refusal))
			_ = c.Close()
			continue
		}
		return &limitConn{Conn: c, l: l}, nil
	}
}

type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
