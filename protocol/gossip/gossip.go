package gossip

import (
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"maps"
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

// Handler receives what the gossip layer decodes and supplies this
// node's push-pull state.
//
// Concurrency contract: memberlist calls these methods from its own
// goroutines, possibly concurrently with each other and with the caller's
// code; they must be thread-safe, must not block (they run on the packet
// receive path) and must not keep a reference to their arguments after
// returning.
type Handler interface {
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
	// PublicKey is the key of Meta.Key, decoded (nil: none, or malformed).
	PublicKey ed25519.PublicKey
	// State is "alive" for members of Gossip.Members and of MemberJoined
	// and MemberUpdated events; in a MemberLeft event it is whatever
	// memberlist last wrote into the node and may be stale (memberlist does
	// not tell a leave from a death there).
	State string
}

// MaxBroadcastFrame bounds one broadcast frame: memberlist packets are
// about 1.4 KB and a frame must fit in one with room for others. Larger
// items travel by push-pull only.
const MaxBroadcastFrame = 1024

// DropReasons are the values of the "reason" label of dropped gossip, one
// per cause:
//
//   - the codec's (protocol.Reason): "empty", "truncated", "too_large",
//     "unknown_version", "unknown_type", "malformed";
//   - "unexpected_type": a frame of the wrong type on a path;
//   - "invalid_item": a row or record the handler refused as malformed;
//   - "not_member": a row whose node, or a record whose origin, is not an
//     alive member (a broadcast or direct message), or push-pull state from a
//     sender that is not one (a signed row batch of a member that departed
//     within the hour is held instead, and applied when it is back);
//   - "not_agent": the same from an alive member whose role is not agent (an
//     observer never speaks for the fleet);
//   - "row_not_sender": a push-pull row of a node other than its sender
//     (push-pull carries the sender's own rows only);
//   - "unsigned": a plain row or record in the name of an origin that
//     signs (its key is registered), in a frame without signed items, while
//     no member of the previous release is alive (those relay what they
//     hear without signatures: such copies are dropped uncounted);
//   - "unknown_key": a row or record of an origin whose key is not known
//     (not registered yet; the KeySource looks it up), or signed in the
//     name of one registered without a key;
//   - "bad_signature": a signed row or record whose signature is not its
//     claimed origin's (also counted by origin, Stats.BadSignatures);
//   - the handler's refusals, counted through Gossip.Drop:
//     "generation_max", "generation_jump", "since_future", "zone_scope",
//     "too_many_zones", "too_many_rows", "too_many_dependencies",
//     "replayed", "evicted" (see sharedstate.RefusalReason).
//
// Each reason is logged as a warning at most once a minute, except
// "not_member" and "unknown_key" items about a member that joined or left
// within the last minute: a fleet that stops or starts drops those as a
// matter of course, and they are logged at debug level.
var DropReasons = []string{"empty", "truncated", "too_large", "unknown_version", "unknown_type", "malformed",
	"unexpected_type", "invalid_item", "not_member", "not_agent", "row_not_sender",
	"generation_max", "generation_jump", "since_future", "zone_scope", "too_many_zones", "too_many_rows", "too_many_dependencies",
	"unsigned", "unknown_key", "bad_signature", "replayed", "evicted"}

const numDropReasons = 23 // len(DropReasons), checked by a test

// Stats are cumulative gossip counters.
type Stats struct {
	// Bytes and messages in and out, by kind "message" (broadcasts and
	// direct sends) and "push_pull".
	BytesIn, BytesOut, MsgsIn, MsgsOut map[string]uint64
	// Dropped counts refused frames and items by DropReasons.
	Dropped map[string]uint64
	// DirectOut counts the packets SendDirect sent (also in MsgsOut
	// "message"): a breaker transition costs one per other member and
	// proposer.
	DirectOut uint64
	// DirectRecordsOut counts the direct packets that carried breaker
	// records (the rest carried urgent rows only): the cost of
	// transitions, bounded by proposers × other members per transition.
	DirectRecordsOut uint64
	// RoundsOut counts the packets of the broadcast rounds (also in MsgsOut
	// "message"; Config.RowFanout).
	RoundsOut uint64
	// UnknownVersions counts refused frames by their version (decimal), a
	// version this build does not speak.
	UnknownVersions map[string]uint64
	// BadSignatures counts signed items whose signature failed, by claimed
	// origin (at most 64 names; the rest under "other").
	BadSignatures map[string]uint64
	// Signed and Verified count the signatures this node made and checked.
	Signed, Verified uint64
}

type counters struct {
	bytesIn, bytesOut, msgsIn, msgsOut [2]atomic.Uint64              // index: 0 message, 1 push_pull
	dropped                            [numDropReasons]atomic.Uint64 // index: DropReasons
	directOut, directRecordsOut        atomic.Uint64
	roundsOut                          atomic.Uint64
	unknownVersion                     [256]atomic.Uint64
	signed, verified                   atomic.Uint64
}

// Kinds are the keys of Stats' byte and message maps (and the values of the
// "kind" metric label): "message" (broadcasts and direct sends) and
// "push_pull".
var Kinds = []string{"message", "push_pull"}

func (c *counters) drop(reason string, n int) {
	for i, r := range DropReasons {
		if r == reason {
			c.dropped[i].Add(uint64(n))
			return
		}
	}
	c.dropped[7].Add(uint64(n)) // invalid_item
}

// Gossip owns a memberlist and its delegate: the frame codec, the broadcast
// queue keyed by (kind, dependency, node), direct sends, push-pull and
// membership. The agent runs one in role agent; the coordinator's fleet
// observer runs one in role observer with a handler that only records.
//
//	cfg := gossip.DefaultConfig()
//	cfg.Name, cfg.BindAddr = "observer-1", "127.0.0.1:0"
//	cfg.Meta = gossip.NodeMeta{Role: gossip.RoleObserver}
//	cfg.Handler = myHandler
//	g, err := gossip.New(cfg)
//	n, err := g.Join([]string{"10.0.0.5:7946"})
//	…
//	g.Close(time.Second) // Leave, then Shutdown
//
// All methods are safe for concurrent use.
type Gossip struct {
	cfg   Config
	lg    *slog.Logger
	ml    *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue // rows
	// records are queued apart and sent first: memberlist orders a queue
	// by transmits, then larger messages first, and rows are re-queued
	// fresh every tick, so a record behind a hundred busy rows waited
	// rounds (a trip's repair after a lost direct send took 2.3 s at
	// N = 200 with 5% loss, scale (d)).
	recQueue *memberlist.TransmitLimitedQueue
	stats    counters

	metaMu sync.Mutex
	meta   []byte

	addr string // the advertised host:port

	membersMu   sync.Mutex
	members     map[string]Member // live members, copied in event callbacks
	agents      int               // members with role agent (tally)
	versions    map[int]int       // members by wire version (tally)
	memberAddrs map[string]int    // their gossip addresses (host:port) -> how many members use it
	peers       []string          // names of the live members but this node, for randomPeers
	peerIdx     map[string]int    // name -> index in peers

	stopRounds chan struct{}  // closed by Close: ends roundLoop
	roundsDone chan struct{}  // closed when roundLoop returned (nil: none runs)
	greet      chan Member    // members back from the dead, for this node's rows (greetLater)
	held       chan *heldRows // their rows that came before they were back (holdBack)

	dropLog rateLog // one log line per drop reason per minute

	sendVersion   atomic.Uint32         // SendVersion
	versionLogged map[string]struct{}   // members noteVersion logged (guarded by membersMu)
	retired       map[string]retiredKey // keys of departed members (guarded by membersMu)
	settling      map[string]time.Time  // members that joined or left lately, when (guarded by membersMu; settle)
	settlingAddrs map[string]time.Time  // the addresses members left from lately, when (guarded by membersMu)

	envMu  sync.Mutex
	recEnv map[recKey]heldRecord // envelopes of the records held, for push-pull and relays

	rows     rowQueue      // this node's rows, sent in signed batches (with a Signer)
	numNodes func() int    // memberlist's member count, safe before Create returns
	turn     atomic.Uint32 // whose turn it is to go first in a packet: this node's rows or relays
	packets  atomic.Uint64 // numbers the packets fill composes (rowQueue.take)

	forgedMu sync.Mutex
	forgedBy map[string]uint64

	closeOnce sync.Once
	closed    atomic.Bool
}

// New validates cfg (Config.Validate), creates the memberlist (binding its
// ports) and starts gossiping. It does not join anyone: call Join. A port
// it cannot bind (TCP or UDP) is an error that wraps the bind's
// *net.OpError (errors.Is(err, syscall.EADDRINUSE) when taken).
func New(cfg Config) (*Gossip, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	meta, err := cfg.fullMeta(cfg.Meta).Encode()
	if err != nil {
		return nil, err
	}
	host, port := splitAddr(cfg.BindAddr)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &Gossip{cfg: cfg, lg: cfg.Logger.With("component", "gossip"), meta: meta, members: map[string]Member{}, versions: map[int]int{}, memberAddrs: map[string]int{},
		peerIdx: map[string]int{}, stopRounds: make(chan struct{}), greet: make(chan Member, greetQueue), held: make(chan *heldRows, greetQueue),
		versionLogged: map[string]struct{}{}, retired: map[string]retiredKey{}, settling: map[string]time.Time{}, settlingAddrs: map[string]time.Time{}, recEnv: map[recKey]heldRecord{}, forgedBy: map[string]uint64{}}
	g.sendVersion.Store(uint32(protocol.MinVersion)) // alone: see SendVersion

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = host
	mc.BindPort = port
	mc.AdvertisePort = port
	if cfg.AdvertiseAddr != "" {
		mc.AdvertiseAddr, mc.AdvertisePort = splitAddr(cfg.AdvertiseAddr)
	}
	mc.GossipInterval = cfg.GossipInterval
	mc.PushPullInterval = cfg.PushPullInterval
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = min(cfg.ProbeTimeout, cfg.ProbeInterval/2)
	mc.RetransmitMult = cfg.RetransmitMult
	mc.GossipNodes = cfg.GossipNodes
	mc.TCPTimeout = cfg.TCPTimeout
	mc.DeadNodeReclaimTime = cfg.DeadNodeReclaimTime // a restarted agent (new port) may take its name back
	// Ten probe rounds: a member declared dead hears the gossip for as
	// long as ten probes of it would have taken, enough to refute a false
	// suspicion; longer only feeds packets to members that are gone.
	mc.GossipToTheDeadTime = 10 * cfg.ProbeInterval
	mc.SuspicionMaxTimeoutMult = suspicionMaxTimeoutMult
	mc.AwarenessMaxMultiplier = awarenessMaxMultiplier
	if cfg.Keyring != nil {
		mc.Keyring = cfg.Keyring
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport
	}
	mc.Delegate = (*delegate)(g)
	mc.Events = (*events)(g)
	mc.Logger = newMemberlistLogger(cfg.Logger, g.closed.Load)
	mc.EnableCompression = false // see guardTransport
	if cfg.Transport == nil {
		if err := checkBind(host, port); err != nil {
			return nil, fmt.Errorf("gossip: %w", err)
		}
	}
	if cfg.Keyring == nil && cfg.Transport == nil {
		gt, err := newGuardTransport(g, host, port, mc.Logger)
		if err != nil {
			return nil, fmt.Errorf("gossip: %w", err)
		}
		mc.Transport = gt
		if port == 0 {
			mc.BindPort = gt.GetAutoBindPort()
			if cfg.AdvertiseAddr == "" {
				mc.AdvertisePort = mc.BindPort
			}
		}
	}

	var created atomic.Pointer[memberlist.Memberlist]
	numNodes := func() int {
		if ml := created.Load(); ml != nil {
			return ml.NumMembers()
		}
		return 1
	}
	g.numNodes = numNodes
	g.queue = &memberlist.TransmitLimitedQueue{RetransmitMult: cfg.RetransmitMult, NumNodes: numNodes}
	g.recQueue = &memberlist.TransmitLimitedQueue{RetransmitMult: cfg.RetransmitMult, NumNodes: numNodes}
	ml, err := memberlist.Create(mc)
	if err != nil {
		if mc.Transport != nil {
			mc.Transport.Shutdown()
		}
		return nil, fmt.Errorf("gossip: %w", err)
	}
	created.Store(ml)
	g.ml = ml
	// Read once, right after Create: LocalNode returns memberlist's live
	// state, which it may rewrite later.
	n := ml.LocalNode()
	g.addr = net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	if cfg.RowFanout > 0 {
		g.roundsDone = make(chan struct{})
		go func() {
			defer close(g.roundsDone)
			g.roundLoop(g.stopRounds)
		}()
	}
	return g, nil
}

// checkBind binds the TCP and UDP ports of a gossip address and lets them
// go again. memberlist reports a failed bind in words only; this returns
// the *net.OpError (errors.Is(err, syscall.EADDRINUSE)), so that a daemon
// can name the flag of the address.
func checkBind(host string, port int) error {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ln.Close()
	if port == 0 {
		return nil // any free port: memberlist picks one for both
	}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	pc.Close()
	return nil
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
		return n, fmt.Errorf("gossip: join %v: %w (%s)", addrs, err, hint)
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
	// Tallied as members come and go (tally): agents ask every tick.
	g.membersMu.Lock()
	defer g.membersMu.Unlock()
	return g.agents
}

// tally counts m in (by +1) or out of (by -1) the member tallies that
// NumAgents and recomputeVersion read, so that neither walks the members:
// both run on every membership event, and a change of the whole fleet (a
// start, a heal) is one event per member at every member. Caller holds
// membersMu.
func (g *Gossip) tally(m Member, by int) {
	if m.Meta.IsAgent() {
		g.agents += by
	}
	w := m.Meta.WireVersion()
	if g.versions[w] += by; g.versions[w] <= 0 {
		delete(g.versions, w)
	}
}

func memberOf(n *memberlist.Node) Member {
	m := Member{Name: n.Name, Addr: n.Address(), State: stateName(n.State)}
	m.Meta, m.MetaErr = DecodeNodeMeta(n.Meta)
	m.PublicKey = DecodeKey(m.Meta.Key)
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
	b, err := g.cfg.fullMeta(m).Encode()
	if err != nil {
		return err
	}
	g.metaMu.Lock()
	g.meta = b
	g.metaMu.Unlock()
	return g.ml.UpdateNode(timeout)
}

// Stats returns cumulative counters.
func (g *Gossip) Stats() Stats {
	s := Stats{
		BytesIn: map[string]uint64{}, BytesOut: map[string]uint64{},
		MsgsIn: map[string]uint64{}, MsgsOut: map[string]uint64{},
		Dropped: map[string]uint64{},
	}
	for i, k := range Kinds {
		s.BytesIn[k] = g.stats.bytesIn[i].Load()
		s.BytesOut[k] = g.stats.bytesOut[i].Load()
		s.MsgsIn[k] = g.stats.msgsIn[i].Load()
		s.MsgsOut[k] = g.stats.msgsOut[i].Load()
	}
	for i, r := range DropReasons {
		s.Dropped[r] = g.stats.dropped[i].Load()
	}
	s.DirectOut = g.stats.directOut.Load()
	s.DirectRecordsOut = g.stats.directRecordsOut.Load()
	s.RoundsOut = g.stats.roundsOut.Load()
	s.UnknownVersions = map[string]uint64{}
	for v := range g.stats.unknownVersion {
		if n := g.stats.unknownVersion[v].Load(); n > 0 {
			s.UnknownVersions[strconv.Itoa(v)] = n
		}
	}
	g.forgedMu.Lock()
	s.BadSignatures = maps.Clone(g.forgedBy)
	g.forgedMu.Unlock()
	s.Signed, s.Verified = g.stats.signed.Load(), g.stats.verified.Load()
	return s
}

// Close leaves the cluster (waiting up to leaveTimeout for the leave
// message to spread; 0 skips leaving, like a crash) and shuts memberlist
// down. It is idempotent.
func (g *Gossip) Close(leaveTimeout time.Duration) error {
	var err error
	g.closeOnce.Do(func() {
		g.closed.Store(true)
		close(g.stopRounds)
		if g.roundsDone != nil {
			<-g.roundsDone
		}
		if leaveTimeout > 0 {
			if lerr := g.ml.Leave(leaveTimeout); lerr != nil {
				err = fmt.Errorf("gossip: leave: %w", lerr)
			}
		}
		if serr := g.ml.Shutdown(); serr != nil && err == nil {
			err = fmt.Errorf("gossip: shutdown: %w", serr)
		}
	})
	return err
}
