package simnet

import "encoding/binary"

// memberlist's message types (memberlist v0.7.0 net.go: part of its wire
// protocol, append-only there).
const (
	mlPing         = 0
	mlIndirectPing = 1
	mlAck          = 2
	mlSuspect      = 3
	mlAlive        = 4
	mlDead         = 5
	mlCompound     = 7
	mlUser         = 8
	mlNack         = 11
	mlHasCRC       = 12
	mlHasLabel     = 244
)

// parts is what one memberlist packet carried, by kind: user messages (the
// delegate's broadcasts and SendBestEffort/SendToAddress: type userMsg),
// probes (ping, indirect ping, ack, nack), membership gossip (alive,
// suspect, dead) and memberlist's other messages; headers (label, CRC,
// compound framing) are the rest of the packet's bytes.
type parts struct {
	userMsgs, userBytes     int
	probeMsgs, probeBytes   int
	memberMsgs, memberBytes int
	otherMsgs               int
	// suspects and deads count the suspect and dead messages among
	// memberMsgs (the rest are alive messages).
	suspects, deads int
}

// ownMsgs returns how many of the messages were memberlist's own.
func (p parts) ownMsgs() int { return p.probeMsgs + p.memberMsgs + p.otherMsgs }

// add counts one message of l bytes whose first byte is typ.
func (p *parts) add(typ byte, l int) {
	switch typ {
	case mlUser:
		p.userMsgs++
		p.userBytes += l
	case mlPing, mlIndirectPing, mlAck, mlNack:
		p.probeMsgs++
		p.probeBytes += l
	case mlAlive, mlSuspect, mlDead:
		p.memberMsgs++
		p.memberBytes += l
		switch typ {
		case mlSuspect:
			p.suspects++
		case mlDead:
			p.deads++
		}
	default:
		p.otherMsgs++
	}
}

// split tells what a memberlist packet carried (parts). A packet it cannot
// parse (compressed, encrypted, truncated) is one other message of
// memberlist's, whole; the messages of a compound cut short are counted
// as others' from where it is cut.
func split(b []byte) (p parts) {
	if len(b) > 0 && b[0] == mlHasLabel { // [244][len][label]
		if len(b) < 2 || len(b) < 2+int(b[1]) {
			return parts{otherMsgs: 1}
		}
		b = b[2+int(b[1]):]
	}
	if len(b) > 0 && b[0] == mlHasCRC { // [12][crc32][message]
		if len(b) < 5 {
			return parts{otherMsgs: 1}
		}
		b = b[5:]
	}
	if len(b) == 0 {
		return parts{otherMsgs: 1}
	}
	if b[0] != mlCompound {
		p.add(b[0], len(b))
		return p
	}
	// [7][n][n × uint16 length][parts]
	if len(b) < 2 {
		return parts{otherMsgs: 1}
	}
	n := int(b[1])
	lens := b[2:]
	if len(lens) < 2*n {
		return parts{otherMsgs: 1}
	}
	rest := lens[2*n:]
	for i := range n {
		l := int(binary.BigEndian.Uint16(lens[2*i:]))
		if l > len(rest) {
			p.otherMsgs += n - i
			break
		}
		if l == 0 {
			p.otherMsgs++
			continue
		}
		p.add(rest[0], l)
		rest = rest[l:]
	}
	return p
}
