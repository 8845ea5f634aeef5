package gossip

import (
	"bufio"
	"encoding/binary"
	"log"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// memberlist message types this layer looks at (memberlist's wire format:
// the values are part of its protocol and never change).
const (
	mlCompoundMsg = 7
	mlUserMsg     = 8
	mlCompressMsg = 9
	mlHasCrcMsg   = 12
)

// guardTransport is memberlist's NetTransport with one rule added for
// gossip without a keyring: a user message (where rows and records travel)
// is taken only in a UDP packet from the address of an alive member, and
// never over a TCP stream (this layer sends user messages by UDP only).
// memberlist's own messages pass untouched, so strangers can still join
// (a TCP push-pull, which the delegate checks) and members that were
// declared dead can still refute it. Compressed packets and streams are
// refused from non-members: members of this layer never compress, and what
// a compressed packet carries cannot be told without decompressing it.
//
// With a keyring the guard is off: memberlist refuses what no key
// decrypts, which is the real authentication; without one, a source
// address can be spoofed, so this stops a stray or careless sender, not a
// determined one (see agent/README.md, "Threat model").
type guardTransport struct {
	*memberlist.NetTransport
	g       *Gossip
	packets chan *memberlist.Packet
	streams chan net.Conn
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

func newGuardTransport(g *Gossip, bindHost string, bindPort int, logger *log.Logger) (*guardTransport, error) {
	var nt *memberlist.NetTransport
	var err error
	tries := 1
	if bindPort == 0 {
		tries = 10 // the port is picked for TCP, then bound for UDP: racy
	}
	for range tries {
		if nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{bindHost}, BindPort: bindPort, Logger: logger}); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	t := &guardTransport{NetTransport: nt, g: g, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), stop: make(chan struct{})}
	t.wg.Add(2)
	go t.packetLoop()
	go t.streamLoop()
	return t, nil
}

func (t *guardTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *guardTransport) StreamCh() <-chan net.Conn           { return t.streams }

// Shutdown stops the listeners, then the guard's goroutines.
func (t *guardTransport) Shutdown() error {
	err := t.NetTransport.Shutdown()
	t.once.Do(func() { close(t.stop) })
	t.wg.Wait()
	return err
}

func (t *guardTransport) packetLoop() {
	defer t.wg.Done()
	in := t.NetTransport.PacketCh()
	for {
		select {
		case <-t.stop:
			return
		case p := <-in:
			if !t.g.memberAddr(p.From) {
				buf, stripped := stripUserMessages(p.Buf)
				if stripped > 0 {
					t.g.dropFrom(p.From.String(), stripped)
				}
				if buf == nil {
					continue
				}
				p.Buf = buf
			}
			select {
			case t.packets <- p:
			case <-t.stop:
				return
			}
		}
	}
}

func (t *guardTransport) streamLoop() {
	defer t.wg.Done()
	in := t.NetTransport.StreamCh()
	for {
		select {
		case <-t.stop:
			return
		case c := <-in:
			t.wg.Add(1)
			go t.checkStream(c)
		}
	}
}

// checkStream peeks at a stream's first byte and closes it when it is a
// user or compressed message; memberlist gets the rest, bytes included.
func (t *guardTransport) checkStream(c net.Conn) {
	defer t.wg.Done()
	r := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	first, err := r.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil || first[0] == mlUserMsg || first[0] == mlCompressMsg {
		if err == nil {
			t.g.Drop("not_member", 1, "from", c.RemoteAddr().String(), "stream", true)
		}
		c.Close()
		return
	}
	select {
	case t.streams <- &peekedConn{Conn: c, r: r}:
	case <-t.stop:
		c.Close()
	}
}

type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// stripUserMessages returns buf without its user messages and how many it
// removed; nil when nothing is left. A compressed packet counts as one
// user message (members of this layer never compress).
func stripUserMessages(buf []byte) ([]byte, int) {
	b := buf
	if len(b) >= 5 && b[0] == mlHasCrcMsg {
		b = b[5:] // the checksum goes with any rewrite; memberlist accepts packets without one
	}
	if len(b) == 0 {
		return buf, 0
	}
	switch b[0] {
	case mlUserMsg, mlCompressMsg:
		return nil, 1
	case mlCompoundMsg:
	default:
		return buf, 0
	}
	if len(b) < 2 {
		return buf, 0 // malformed: memberlist refuses it
	}
	n := int(b[1])
	if len(b) < 2+2*n {
		return buf, 0
	}
	lens := b[2 : 2+2*n]
	body := b[2+2*n:]
	var keep [][]byte
	stripped := 0
	for i := range n {
		l := int(binary.BigEndian.Uint16(lens[2*i:]))
		if l > len(body) {
			return nil, stripped + 1 // truncated compound: refuse it whole
		}
		part := body[:l]
		body = body[l:]
		if len(part) > 0 && (part[0] == mlUserMsg || part[0] == mlCompressMsg) {
			stripped++
			continue
		}
		keep = append(keep, part)
	}
	if stripped == 0 {
		return buf, 0
	}
	if len(keep) == 0 {
		return nil, stripped
	}
	out := []byte{mlCompoundMsg, byte(len(keep))}
	for _, p := range keep {
		out = binary.BigEndian.AppendUint16(out, uint16(len(p)))
	}
	for _, p := range keep {
		out = append(out, p...)
	}
	return out, stripped
}
