package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// GossipHandler receives what the gossip layer decodes and supplies this
// node's push-pull state.
//
// Concurrency contract: memberlist calls these methods from its own
// goroutines, possibly concurrently with each other and with the caller's
// code; they must be thread-safe, must not block (they run on the packet
// receive path) and must not keep a reference to their arguments after
// returning.
type GossipHandler interface {
	// ApplyBatch applies the rows and records of a broadcast or direct
	// message from a peer. It returns the rows and records that were new to
	// this node (nil when none); a relaying Gossip re-broadcasts them. It
	// returns how many items it refused (invalid, over a cap), which are
	// counted as dropped with reason "invalid_item".
	ApplyBatch(b *fuseboxv1.GossipBatch) (fresh *fuseboxv1.GossipBatch, refused int)
	// ApplyState applies a peer's push-pull state (join is true during a
	// join), with the same results as ApplyBatch.
	ApplyState(s *fuseboxv1.PushPullState, join bool) (fresh *fuseboxv1.GossipBatch, refused int)
	// LocalState returns this node's push-pull state; nil sends none (an
	// observer).
	LocalState(join bool) *fuseboxv1.PushPullState
}

// MemberEvents is told about membership changes. Its methods may be called
// by several goroutines but never concurrently, so their order is the
// order of events. They must not block for long and must not call back into
// the Gossip (memberlist holds locks while it calls them).
type MemberEvents interface {
	MemberJoined(Member)
	MemberLeft(Member)
	MemberUpdated(Member)
}

// Member is a gossip member as this node sees it.
type Member struct {
	Name string
	// Addr is the member's gossip address, host:port.
	Addr string
	// Meta is the decoded NodeMeta; MetaErr says why it did not decode (the
	// member is then treated as having no role).
	Meta    NodeMeta
	MetaErr error
	// State is "alive" for members of Gossip.Members and of MemberJoined
	// and MemberUpdated events; in a MemberLeft event it is whatever
	// memberlist last wrote into the node and may be stale (memberlist does
	// not tell a leave from a death there).
	State string
}

// GossipConfig configures a Gossip.
type GossipConfig struct {
	// Name is the node name, unique in the cluster (required).
	Name string
	// BindAddr is the memberlist bind address, host:port; port 0 picks a
	// free port (required).
	BindAddr string
	// AdvertiseAddr is the address peers reach this node at (optional,
	// default from BindAddr and the bound port).
	AdvertiseAddr string
	// Meta is published through Delegate.NodeMeta (required: Role set).
	Meta NodeMeta
	// Keyring encrypts gossip (optional, default none).
	Keyring *memberlist.Keyring
	// GossipInterval, PushPullInterval, ProbeInterval: memberlist timings
	// (optional, defaults DefaultGossipInterval, DefaultPushPullInterval,
	// DefaultProbeInterval).
	GossipInterval, PushPullInterval, ProbeInterval time.Duration
	// RetransmitMult scales broadcast retransmits (optional, default 4).
	RetransmitMult int
	// Relay re-broadcasts what ApplyBatch/ApplyState report as new
	// (epidemic dissemination). Agents relay; an observer need not.
	Relay bool
	// Handler receives decoded gossip (required).
	Handler GossipHandler
	// Events is told about membership changes (optional).
	Events MemberEvents
	// Logger receives memberlist's log and the gossip layer's own (optional,
	// default slog.Default()).
	Logger *slog.Logger
	// Codec bounds frames (optional, default protocol.DefaultMaxFrameSize).
	Codec protocol.Codec
}

// MaxBroadcastFrame bounds one broadcast frame: memberlist packets are
// about 1.4 KB and a frame must fit in one with room for others. Larger
// items travel by push-pull only.
const MaxBroadcastFrame = 1024

// DropReasons are the values of the "reason" label of dropped gossip: the
// codec's (protocol.Reason), "unexpected_type" for a frame of the wrong type
// on a path, and "invalid_item" for a row or record the handler refused.
var DropReasons = []string{"empty", "truncated", "too_large", "unknown_version", "unknown_type", "malformed", "unexpected_type", "invalid_item"}

// GossipStats are cumulative gossip counters.
type GossipStats struct {
	// Bytes and messages in and out, by kind "message" (broadcasts and
	// direct sends) and "push_pull".
	BytesIn, BytesOut, MsgsIn, MsgsOut map[string]uint64
	// Dropped counts refused frames and items by DropReasons.
	Dropped map[string]uint64
}

type gossipCounters struct {
	bytesIn, bytesOut, msgsIn, msgsOut [2]atomic.Uint64 // index: 0 message, 1 push_pull
	dropped                            [8]atomic.Uint64 // index: DropReasons
}

var gossipKinds = [2]string{"message", "push_pull"}

func (c *gossipCounters) drop(reason string) {
	for i, r := range DropReasons {
		if r == reason {
			c.dropped[i].Add(1)
			return
		}
	}
	c.dropped[5].Add(1) // malformed
}

// Gossip owns a memberlist and its delegate: the frame codec, the broadcast
// queue keyed by (kind, dependency, node), direct sends, push-pull and
// membership. The agent runs one in role agent; the coordinator's fleet
// observer runs one in role observer with a handler that only records.
//
//	g, err := agent.NewGossip(agent.GossipConfig{
//		Name: "observer-1", BindAddr: "127.0.0.1:0",
//		Meta: agent.NodeMeta{Role: agent.RoleObserver},
//		Handler: myHandler,
//	})
//	n, err := g.Join([]string{"10.0.0.5:7946"})
//	…
//	g.Close(time.Second) // Leave, then Shutdown
//
// All methods are safe for concurrent use.
type Gossip struct {
	cfg   GossipConfig
	lg    *slog.Logger
	ml    *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue
	stats gossipCounters

	metaMu sync.Mutex
	meta   []byte

	addr string // the advertised host:port

	membersMu sync.Mutex
	members   map[string]Member // live members, copied in event callbacks

	closeOnce sync.Once
	closed    atomic.Bool
}

// NewGossip validates cfg, creates the memberlist (binding its ports) and
// starts gossiping. It does not join anyone: call Join.
func NewGossip(cfg GossipConfig) (*Gossip, error) {
	if cfg.Name == "" || cfg.Handler == nil || cfg.Meta.Role == "" {
		return nil, errors.New("agent: gossip: Name, Handler and Meta.Role are required")
	}
	meta, err := cfg.Meta.Encode()
	if err != nil {
		return nil, err
	}
	host, portStr, err := net.SplitHostPort(cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("agent: gossip bind address %q: %w", cfg.BindAddr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("agent: gossip bind port %q: %w", portStr, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.GossipInterval <= 0 {
		cfg.GossipInterval = DefaultGossipInterval
	}
	if cfg.PushPullInterval <= 0 {
		cfg.PushPullInterval = DefaultPushPullInterval
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.RetransmitMult <= 0 {
		cfg.RetransmitMult = DefaultRetransmitMult
	}
	g := &Gossip{cfg: cfg, lg: cfg.Logger.With("component", "gossip"), meta: meta, members: map[string]Member{}}

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = host
	mc.BindPort = port
	mc.AdvertisePort = port
	if cfg.AdvertiseAddr != "" {
		ah, ap, err := net.SplitHostPort(cfg.AdvertiseAddr)
		if err != nil {
			return nil, fmt.Errorf("agent: gossip advertise address %q: %w", cfg.AdvertiseAddr, err)
		}
		if mc.AdvertisePort, err = strconv.Atoi(ap); err != nil {
			return nil, fmt.Errorf("agent: gossip advertise port %q: %w", ap, err)
		}
		mc.AdvertiseAddr = ah
	}
	mc.GossipInterval = cfg.GossipInterval
	mc.PushPullInterval = cfg.PushPullInterval
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = min(500*time.Millisecond, cfg.ProbeInterval/2)
	mc.RetransmitMult = cfg.RetransmitMult
	mc.TCPTimeout = 2 * time.Second
	mc.DeadNodeReclaimTime = 5 * time.Second // a restarted agent (new port) may take its name back
	mc.GossipToTheDeadTime = 10 * cfg.ProbeInterval
	if cfg.Keyring != nil {
		mc.Keyring = cfg.Keyring
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	mc.Delegate = (*gossipDelegate)(g)
	mc.Events = (*gossipEvents)(g)
	mc.Logger = newMemberlistLogger(cfg.Logger)

	var created atomic.Pointer[memberlist.Memberlist]
	g.queue = &memberlist.TransmitLimitedQueue{RetransmitMult: cfg.RetransmitMult, NumNodes: func() int {
		if ml := created.Load(); ml != nil {
			return ml.NumMembers()
		}
		return 1
	}}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("agent: gossip: %w", err)
	}
	created.Store(ml)
	g.ml = ml
	// Read once, right after Create: LocalNode returns memberlist's live
	// state, which it may rewrite later.
	n := ml.LocalNode()
	g.addr = net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	return g, nil
}

// Join contacts the given gossip addresses (host:port) and merges state
// with them; it returns how many answered. An encryption mismatch shows as
// an error here and as a memberlist error on the peer's log.
func (g *Gossip) Join(addrs []string) (int, error) {
	n, err := g.ml.Join(addrs)
	if err != nil {
		var hint string
		if g.cfg.Keyring != nil {
			hint = "is the peer up, and does its gossip keyring (--keyring-file) share a key with this one?"
		} else {
			hint = "is the peer up, and is gossip encryption off on it too (this agent has no --keyring-file)?"
		}
		return n, fmt.Errorf("agent: gossip join %v: %w (%s)", addrs, err, hint)
	}
	return n, nil
}

// Name returns this node's name.
func (g *Gossip) Name() string { return g.cfg.Name }

// Addr returns the address peers reach this node at, host:port (the
// resolved port when bound to port 0).
func (g *Gossip) Addr() string { return g.addr }

// Members returns the live members (joined and not yet left or dead),
// this node included, sorted by name.
//
// They come from the Gossip's own table, copied inside memberlist's event
// callbacks (which run under memberlist's node lock): memberlist.Members
// returns pointers into state that memberlist keeps changing, and reading
// them later is a data race.
func (g *Gossip) Members() []Member {
	g.membersMu.Lock()
	out := make([]Member, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, m)
	}
	g.membersMu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// NumAgents returns how many alive members, this node included, have role
// agent.
func (g *Gossip) NumAgents() int {
	c := 0
	for _, m := range g.Members() {
		if m.Meta.IsAgent() {
			c++
		}
	}
	return c
}

func memberOf(n *memberlist.Node) Member {
	m := Member{Name: n.Name, Addr: n.Address(), State: stateName(n.State)}
	m.Meta, m.MetaErr = DecodeNodeMeta(n.Meta)
	return m
}

func stateName(s memberlist.NodeStateType) string {
	switch s {
	case memberlist.StateAlive:
		return "alive"
	case memberlist.StateSuspect:
		return "suspect"
	case memberlist.StateDead:
		return "dead"
	case memberlist.StateLeft:
		return "left"
	}
	return "unknown"
}

// SetMeta publishes new metadata to the cluster (memberlist UpdateNode).
func (g *Gossip) SetMeta(m NodeMeta, timeout time.Duration) error {
	b, err := m.Encode()
	if err != nil {
		return err
	}
	g.metaMu.Lock()
	g.meta = b
	g.metaMu.Unlock()
	return g.ml.UpdateNode(timeout)
}

// Broadcast queues rows and records for epidemic broadcast, one frame per
// item named (kind, dependency, node): a queued older update of the same
// item is superseded. Items whose frame exceeds MaxBroadcastFrame are left
// to push-pull.
func (g *Gossip) Broadcast(b *fuseboxv1.GossipBatch) {
	if b == nil || g.closed.Load() {
		return
	}
	for _, r := range b.GetRows() {
		g.queueItem("w\x00"+r.GetDependency()+"\x00"+r.GetNode(), &fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{r}})
	}
	for _, r := range b.GetRecords() {
		g.queueItem("b\x00"+r.GetDependency(), &fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{r}})
	}
}

func (g *Gossip) queueItem(name string, b *fuseboxv1.GossipBatch) {
	frame, err := g.cfg.Codec.EncodeBatch(b)
	if err != nil || len(frame) > MaxBroadcastFrame {
		g.lg.Debug("gossip item too large to broadcast, left to push-pull", "item", name, "err", err)
		return
	}
	g.queue.QueueBroadcast(&namedBroadcast{name: name, msg: frame})
}

// SendDirect sends records straight to every other alive member (UDP,
// best effort): a breaker transition reaches the fleet in one round trip,
// and gossip and push-pull repair what it loses.
func (g *Gossip) SendDirect(records []*fuseboxv1.BreakerRecord) {
	if len(records) == 0 || g.closed.Load() {
		return
	}
	frame, err := g.cfg.Codec.EncodeBatch(&fuseboxv1.GossipBatch{Records: records})
	if err != nil {
		g.lg.Warn("gossip direct send: encode", "err", err)
		return
	}
	for _, n := range g.Members() {
		if n.Name == g.cfg.Name {
			continue
		}
		// SendToAddress is SendBestEffort by address: a UDP user message.
		if err := g.ml.SendToAddress(memberlist.Address{Addr: n.Addr, Name: n.Name}, frame); err != nil {
			g.lg.Debug("gossip direct send failed", "to", n.Name, "err", err)
			continue
		}
		g.stats.bytesOut[0].Add(uint64(len(frame)))
		g.stats.msgsOut[0].Add(1)
	}
}

// QueuedBroadcasts returns how many broadcasts wait in the queue.
func (g *Gossip) QueuedBroadcasts() int { return g.queue.NumQueued() }

// Stats returns cumulative counters.
func (g *Gossip) Stats() GossipStats {
	s := GossipStats{
		BytesIn: map[string]uint64{}, BytesOut: map[string]uint64{},
		MsgsIn: map[string]uint64{}, MsgsOut: map[string]uint64{},
		Dropped: map[string]uint64{},
	}
	for i, k := range gossipKinds {
		s.BytesIn[k] = g.stats.bytesIn[i].Load()
		s.BytesOut[k] = g.stats.bytesOut[i].Load()
		s.MsgsIn[k] = g.stats.msgsIn[i].Load()
		s.MsgsOut[k] = g.stats.msgsOut[i].Load()
	}
	for i, r := range DropReasons {
		s.Dropped[r] = g.stats.dropped[i].Load()
	}
	return s
}

// Close leaves the cluster (waiting up to leaveTimeout for the leave
// message to spread; 0 skips leaving, like a crash) and shuts memberlist
// down. It is idempotent.
func (g *Gossip) Close(leaveTimeout time.Duration) error {
	var err error
	g.closeOnce.Do(func() {
		g.closed.Store(true)
		if leaveTimeout > 0 {
			if lerr := g.ml.Leave(leaveTimeout); lerr != nil {
				err = fmt.Errorf("agent: gossip leave: %w", lerr)
			}
		}
		if serr := g.ml.Shutdown(); serr != nil && err == nil {
			err = fmt.Errorf("agent: gossip shutdown: %w", serr)
		}
	})
	return err
}

// namedBroadcast is one queued frame; a newer one with the same name
// invalidates it.
type namedBroadcast struct {
	name string
	msg  []byte
}

func (b *namedBroadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*namedBroadcast)
	return ok && o.name == b.name
}
func (b *namedBroadcast) Name() string    { return b.name }
func (b *namedBroadcast) Message() []byte { return b.msg }
func (b *namedBroadcast) Finished()       {}

// gossipDelegate is the memberlist.Delegate of a Gossip.
type gossipDelegate Gossip

func (d *gossipDelegate) NodeMeta(limit int) []byte {
	d.metaMu.Lock()
	defer d.metaMu.Unlock()
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}

// NotifyMsg decodes a broadcast or direct message. memberlist reuses buf:
// Decode copies what it keeps.
func (d *gossipDelegate) NotifyMsg(buf []byte) {
	g := (*Gossip)(d)
	g.stats.bytesIn[0].Add(uint64(len(buf)))
	g.stats.msgsIn[0].Add(1)
	f, err := g.cfg.Codec.Decode(buf)
	if err != nil {
		g.stats.drop(protocol.Reason(err))
		return
	}
	if f.Type != protocol.FrameBatch {
		g.stats.drop("unexpected_type")
		return
	}
	fresh, refused := g.cfg.Handler.ApplyBatch(f.Batch)
	g.afterApply(fresh, refused)
}

func (g *Gossip) afterApply(fresh *fuseboxv1.GossipBatch, refused int) {
	for range refused {
		g.stats.drop("invalid_item")
	}
	if g.cfg.Relay && fresh != nil {
		g.Broadcast(fresh)
	}
}

func (d *gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte {
	g := (*Gossip)(d)
	out := g.queue.GetBroadcasts(overhead, limit)
	for _, b := range out {
		g.stats.bytesOut[0].Add(uint64(len(b)))
	}
	g.stats.msgsOut[0].Add(uint64(len(out)))
	return out
}

func (d *gossipDelegate) LocalState(join bool) []byte {
	g := (*Gossip)(d)
	s := g.cfg.Handler.LocalState(join)
	if s == nil {
		return nil
	}
	frame, err := g.cfg.Codec.EncodePushPull(s)
	if err != nil {
		g.lg.Warn("gossip push-pull state not sent", "err", err)
		return nil
	}
	g.stats.bytesOut[1].Add(uint64(len(frame)))
	g.stats.msgsOut[1].Add(1)
	return frame
}

func (d *gossipDelegate) MergeRemoteState(buf []byte, join bool) {
	g := (*Gossip)(d)
	if len(buf) == 0 {
		return // a peer without state (an observer)
	}
	g.stats.bytesIn[1].Add(uint64(len(buf)))
	g.stats.msgsIn[1].Add(1)
	f, err := g.cfg.Codec.Decode(buf)
	if err != nil {
		g.stats.drop(protocol.Reason(err))
		return
	}
	if f.Type != protocol.FramePushPull {
		g.stats.drop("unexpected_type")
		return
	}
	fresh, refused := g.cfg.Handler.ApplyState(f.PushPull, join)
	g.afterApply(fresh, refused)
}

// gossipEvents is the memberlist.EventDelegate of a Gossip.
type gossipEvents Gossip

// memberlist calls these with its node lock held: n may be read here, and
// only here.

func (e *gossipEvents) NotifyJoin(n *memberlist.Node) {
	m := memberOf(n)
	m.State = "alive"
	e.setMember(m)
	if e.cfg.Events != nil {
		e.cfg.Events.MemberJoined(m)
	}
}

func (e *gossipEvents) NotifyLeave(n *memberlist.Node) {
	m := memberOf(n)
	e.membersMu.Lock()
	delete(e.members, m.Name)
	e.membersMu.Unlock()
	if e.cfg.Events != nil {
		e.cfg.Events.MemberLeft(m)
	}
}

func (e *gossipEvents) NotifyUpdate(n *memberlist.Node) {
	m := memberOf(n)
	m.State = "alive"
	e.setMember(m)
	if e.cfg.Events != nil {
		e.cfg.Events.MemberUpdated(m)
	}
}

func (e *gossipEvents) setMember(m Member) {
	e.membersMu.Lock()
	e.members[m.Name] = m
	e.membersMu.Unlock()
}
