package simnet

import (
	"encoding/binary"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// compound frames parts as memberlist's makeCompoundMessage does.
func compound(parts ...[]byte) []byte {
	b := []byte{mlCompound, byte(len(parts))}
	for _, p := range parts {
		b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
	}
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func TestSplitPackets(t *testing.T) {
	user := append([]byte{mlUser}, "row"...) // 4 bytes
	alive := []byte{mlAlive, 1, 2, 3}
	ping := []byte{mlPing, 9, 9}
	crc := func(b []byte) []byte { return append([]byte{mlHasCRC, 0, 0, 0, 0}, b...) }
	for _, tc := range []struct {
		name string
		pkt  []byte
		want parts
	}{
		{"a user message alone", user, parts{userMsgs: 1, userBytes: 4}},
		{"a ping alone", ping, parts{probeMsgs: 1, probeBytes: 3}},
		{"a compound of all three", compound(alive, user, ping, user), parts{userMsgs: 2, userBytes: 8, probeMsgs: 1, probeBytes: 3, memberMsgs: 1, memberBytes: 4}},
		{"suspect and dead", compound([]byte{mlSuspect, 1}, []byte{mlDead, 1}, alive), parts{memberMsgs: 3, memberBytes: 8, suspects: 1, deads: 1}},
		{"behind a CRC", crc(compound(user, alive)), parts{userMsgs: 1, userBytes: 4, memberMsgs: 1, memberBytes: 4}},
		{"behind a label and a CRC", append([]byte{mlHasLabel, 2, 'l', 'b'}, crc(user)...), parts{userMsgs: 1, userBytes: 4}},
		{"a truncated compound", compound(user, alive)[:12], parts{userMsgs: 1, userBytes: 4, otherMsgs: 1}},
		{"lengths cut off", []byte{mlCompound, 3, 0}, parts{otherMsgs: 1}},
		{"an empty part", compound(nil, user), parts{userMsgs: 1, userBytes: 4, otherMsgs: 1}},
		{"empty", nil, parts{otherMsgs: 1}},
		{"a CRC without a message", []byte{mlHasCRC, 1}, parts{otherMsgs: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := split(tc.pkt); got != tc.want {
				t.Errorf("split = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// broadcaster is a memberlist delegate that broadcasts what it is given.
type broadcaster struct {
	q *memberlist.TransmitLimitedQueue
}

type msg []byte

func (m msg) Invalidates(memberlist.Broadcast) bool { return false }
func (m msg) Message() []byte                       { return m }
func (m msg) Finished()                             {}

func (b *broadcaster) NodeMeta(int) []byte { return nil }
func (b *broadcaster) NotifyMsg([]byte)    {}
func (b *broadcaster) GetBroadcasts(overhead, limit int) [][]byte {
	return b.q.GetBroadcasts(overhead, limit)
}
func (b *broadcaster) LocalState(bool) []byte        { return nil }
func (b *broadcaster) MergeRemoteState([]byte, bool) {}

// Real memberlists' packets are split into their own messages and the
// delegate's broadcasts, and the two add up to what was sent.
func TestStatsTellUserMessagesFromMemberlists(t *testing.T) {
	n := newNet(t, Config{Seed: 3})
	var ms []*memberlist.Memberlist
	var ds []*broadcaster
	t.Cleanup(func() {
		for _, m := range ms {
			m.Shutdown()
		}
	})
	for i := range 3 {
		tr := newTr(t, n)
		cfg := memberlist.DefaultLocalConfig()
		cfg.Name = fmt.Sprintf("node-%d", i)
		cfg.Transport = tr
		cfg.ProbeInterval, cfg.ProbeTimeout, cfg.GossipInterval = 50*time.Millisecond, 25*time.Millisecond, 20*time.Millisecond
		cfg.LogOutput = io.Discard
		cfg.EnableCompression = false // compressed packets cannot be split: they count as memberlist's own
		d := &broadcaster{q: &memberlist.TransmitLimitedQueue{RetransmitMult: 3, NumNodes: func() int { return 3 }}}
		cfg.Delegate = d
		m, err := memberlist.Create(cfg)
		if err != nil {
			tr.Shutdown()
			t.Fatal(err)
		}
		ms, ds = append(ms, m), append(ds, d)
		if i > 0 {
			if _, err := m.Join([]string{ms[0].LocalNode().Address()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 50 {
		ds[i%3].q.QueueBroadcast(msg(fmt.Sprintf("user message %02d", i)))
	}
	// Probes start at the first probe interval, which may come after the
	// user messages are out.
	sstest.Eventually(t, time.Minute, "user messages, probes and membership messages sent", func() bool {
		s := n.Stats()
		return s.UserMessages >= 50 && s.ProbeMessages > 0 && s.MembershipMessages > 0
	})
	s := n.Stats()
	if s.UserBytes == 0 || s.UserBytes+s.OwnBytes() != s.PacketBytesSent || s.PacketsWithUser == 0 || s.PacketsWithUser > s.PacketsSent {
		t.Errorf("inconsistent split: %+v", s)
	}
	// Three members joining and probing each other: probes and alive
	// messages, and headers around them.
	if s.ProbeMessages == 0 || s.ProbeBytes == 0 || s.MembershipMessages == 0 || s.MembershipBytes == 0 ||
		s.ProbeMessages+s.MembershipMessages > s.OwnMessages || s.ProbeBytes+s.MembershipBytes > s.OwnBytes() {
		t.Errorf("memberlist's own messages by kind do not add up: %+v", s)
	}
}
