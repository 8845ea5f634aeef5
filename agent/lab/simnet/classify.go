package simnet

import "encoding/binary"

// memberlist's message types (memberlist v0.7.0 net.go: part of its wire
// protocol, append-only there).
const (
	mlCompound = 7
	mlUser     = 8
	mlHasCRC   = 12
	mlHasLabel = 244
)

// split tells what of a memberlist packet is user messages (the delegate's
// broadcasts and SendBestEffort/SendToAddress: type userMsg) and what is
// memberlist's own (probes, acks, alive/suspect/dead gossip, and the
// headers: CRC, label, compound framing). It returns the number and bytes
// of user messages and the number of memberlist's own messages; headers
// count as memberlist's bytes. A packet it cannot parse (compressed,
// encrypted, truncated) is memberlist's own, whole.
func split(b []byte) (userMsgs, userBytes, ownMsgs int) {
	if len(b) > 0 && b[0] == mlHasLabel { // [244][len][label]
		if len(b) < 2 || len(b) < 2+int(b[1]) {
			return 0, 0, 1
		}
		b = b[2+int(b[1]):]
	}
	if len(b) > 0 && b[0] == mlHasCRC { // [12][crc32][message]
		if len(b) < 5 {
			return 0, 0, 1
		}
		b = b[5:]
	}
	if len(b) == 0 {
		return 0, 0, 1
	}
	if b[0] != mlCompound {
		if b[0] == mlUser {
			return 1, len(b), 0
		}
		return 0, 0, 1
	}
	// [7][n][n × uint16 length][parts]
	if len(b) < 2 {
		return 0, 0, 1
	}
	n := int(b[1])
	lens := b[2:]
	if len(lens) < 2*n {
		return 0, 0, 1
	}
	parts := lens[2*n:]
	for i := range n {
		l := int(binary.BigEndian.Uint16(lens[2*i:]))
		if l > len(parts) {
			ownMsgs += n - i
			break
		}
		if l > 0 && parts[0] == mlUser {
			userMsgs++
			userBytes += l
		} else {
			ownMsgs++
		}
		parts = parts[l:]
	}
	return userMsgs, userBytes, ownMsgs
}
