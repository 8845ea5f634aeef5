package simnet

import "sync/atomic"

// Stats counts what crossed the network. A Transport's Stats count its own
// side: what it sent (and what became of it on the way), what it received,
// what its queue dropped. The Network's Stats are the sums over every
// transport it made.
type Stats struct {
	// PacketsSent and PacketBytesSent count every packet handed to WriteTo,
	// whatever happened to it afterwards.
	PacketsSent, PacketBytesSent uint64
	// PacketsReceived and PacketBytesReceived count packets put into a
	// receive queue.
	PacketsReceived, PacketBytesReceived uint64
	// PacketsLost counts packets the link lost (Link.Loss); counted at the sender.
	PacketsLost uint64
	// PacketsCut counts packets dropped by a partition; counted at the sender.
	PacketsCut uint64
	// PacketsUnroutable counts packets to an address nobody listens on;
	// counted at the sender.
	PacketsUnroutable uint64
	// PacketsDropped counts packets that found the receive queue full;
	// counted at the receiver.
	PacketsDropped uint64

	// StreamsOpened counts dials that connected; StreamsRefused dials to an
	// address nobody listens on (or whose backlog was full); StreamsTimedOut
	// dials into a partition or slower than their timeout; StreamsReset
	// connections reset by a partition or a shutdown. Counted at the dialer
	// (resets at both ends).
	StreamsOpened, StreamsRefused, StreamsTimedOut, StreamsReset uint64
	// StreamBytesSent counts bytes written to streams, StreamBytesReceived
	// bytes written to streams by the other end.
	StreamBytesSent, StreamBytesReceived uint64

	// What the packets sent carried, parsed as memberlist packets (CRC and
	// compound framing undone): UserMessages and UserBytes count user
	// messages (the delegate's broadcasts and direct sends: rows and
	// records), OwnMessages memberlist's own (probes, acks, alive, suspect
	// and dead gossip); the rest of PacketBytesSent (OwnBytes) is
	// memberlist's messages and headers. PacketsWithUser counts the packets
	// that carried at least one user message.
	UserMessages, UserBytes, OwnMessages, PacketsWithUser uint64
	// memberlist's own messages by kind: ProbeMessages and ProbeBytes are
	// its failure detector's (ping, indirect ping, ack, nack),
	// MembershipMessages and MembershipBytes its membership gossip (alive,
	// suspect, dead). What is left of OwnBytes is the packets' headers
	// (label, CRC, compound framing) and messages it could not parse.
	ProbeMessages, ProbeBytes, MembershipMessages, MembershipBytes uint64
	// SuspectMessages and DeadMessages count the suspect and dead messages
	// among MembershipMessages; the others are alive messages.
	SuspectMessages, DeadMessages uint64
}

// HeaderBytes returns the packet bytes that were neither user messages,
// probes nor membership gossip: headers and what could not be parsed.
func (s Stats) HeaderBytes() uint64 { return s.OwnBytes() - s.ProbeBytes - s.MembershipBytes }

// OwnBytes returns the packet bytes that were not user messages:
// memberlist's own messages and the packets' headers.
func (s Stats) OwnBytes() uint64 { return s.PacketBytesSent - s.UserBytes }

// Sub returns s - o field by field: what happened between two readings.
func (s Stats) Sub(o Stats) Stats {
	a, b := s.array(), o.array()
	var d [numStats]uint64
	for i := range d {
		d[i] = a[i] - b[i]
	}
	return fromArray(d)
}

// Messages returns the packets and stream connections sent: what "messages
// spent" means in the scale measurements.
func (s Stats) Messages() uint64 { return s.PacketsSent + s.StreamsOpened }

// Bytes returns the bytes sent by packets and streams.
func (s Stats) Bytes() uint64 { return s.PacketBytesSent + s.StreamBytesSent }

type stat int

const (
	statPacketsSent stat = iota
	statPacketBytesSent
	statPacketsReceived
	statPacketBytesReceived
	statPacketsLost
	statPacketsCut
	statPacketsUnroutable
	statPacketsDropped
	statStreamsOpened
	statStreamsRefused
	statStreamsTimedOut
	statStreamsReset
	statStreamBytesSent
	statStreamBytesReceived
	statUserMessages
	statUserBytes
	statOwnMessages
	statPacketsWithUser
	statProbeMessages
	statProbeBytes
	statMembershipMessages
	statMembershipBytes
	statSuspectMessages
	statDeadMessages
	numStats
)

type counters [numStats]atomic.Uint64

func (c *counters) load() Stats {
	var a [numStats]uint64
	for i := range a {
		a[i] = c[i].Load()
	}
	return fromArray(a)
}

// count adds v to stat s of transport t and of the network.
func (n *Network) count(t *Transport, s stat, v uint64) {
	t.stats[s].Add(v)
	n.stats[s].Add(v)
}

func (s Stats) array() [numStats]uint64 {
	return [numStats]uint64{
		statPacketsSent:         s.PacketsSent,
		statPacketBytesSent:     s.PacketBytesSent,
		statPacketsReceived:     s.PacketsReceived,
		statPacketBytesReceived: s.PacketBytesReceived,
		statPacketsLost:         s.PacketsLost,
		statPacketsCut:          s.PacketsCut,
		statPacketsUnroutable:   s.PacketsUnroutable,
		statPacketsDropped:      s.PacketsDropped,
		statStreamsOpened:       s.StreamsOpened,
		statStreamsRefused:      s.StreamsRefused,
		statStreamsTimedOut:     s.StreamsTimedOut,
		statStreamsReset:        s.StreamsReset,
		statStreamBytesSent:     s.StreamBytesSent,
		statStreamBytesReceived: s.StreamBytesReceived,
		statUserMessages:        s.UserMessages,
		statUserBytes:           s.UserBytes,
		statOwnMessages:         s.OwnMessages,
		statPacketsWithUser:     s.PacketsWithUser,
		statProbeMessages:       s.ProbeMessages,
		statProbeBytes:          s.ProbeBytes,
		statMembershipMessages:  s.MembershipMessages,
		statMembershipBytes:     s.MembershipBytes,
		statSuspectMessages:     s.SuspectMessages,
		statDeadMessages:        s.DeadMessages,
	}
}

func fromArray(a [numStats]uint64) Stats {
	return Stats{
		PacketsSent:         a[statPacketsSent],
		PacketBytesSent:     a[statPacketBytesSent],
		PacketsReceived:     a[statPacketsReceived],
		PacketBytesReceived: a[statPacketBytesReceived],
		PacketsLost:         a[statPacketsLost],
		PacketsCut:          a[statPacketsCut],
		PacketsUnroutable:   a[statPacketsUnroutable],
		PacketsDropped:      a[statPacketsDropped],
		StreamsOpened:       a[statStreamsOpened],
		StreamsRefused:      a[statStreamsRefused],
		StreamsTimedOut:     a[statStreamsTimedOut],
		StreamsReset:        a[statStreamsReset],
		StreamBytesSent:     a[statStreamBytesSent],
		StreamBytesReceived: a[statStreamBytesReceived],
		UserMessages:        a[statUserMessages],
		UserBytes:           a[statUserBytes],
		OwnMessages:         a[statOwnMessages],
		PacketsWithUser:     a[statPacketsWithUser],
		ProbeMessages:       a[statProbeMessages],
		ProbeBytes:          a[statProbeBytes],
		MembershipMessages:  a[statMembershipMessages],
		MembershipBytes:     a[statMembershipBytes],
		SuspectMessages:     a[statSuspectMessages],
		DeadMessages:        a[statDeadMessages],
	}
}
