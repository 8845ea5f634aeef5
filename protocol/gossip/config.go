package gossip

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/fusebox-dev/fusebox/protocol"
)

// Default timings of a member. Daemons expose them as flags; tests shorten
// them. agent/README.md's "Scale" section has the measurements behind the
// reasons below (the lab's agent/lab/scale, `make scale`; the scale command's
// -gossip-interval, -probe-interval, -push-pull-interval and
// -retransmit-mult flags rerun them with other values).
const (
	// DefaultGossipInterval: memberlist sends at most 3 packets of ~1.4 KB
	// per interval, and rows fill them from about 100 busy dependencies, so
	// the interval sets the steady bytes per agent. Measured at N = 50 with
	// 100 busy dependencies (scale (b), 2026-12-01): 200 ms -> 23.5 KB/s and
	// 17 packets/s per agent, 250 ms -> 19.3 KB/s, 300 ms -> 16.9 KB/s and
	// 12 packets/s; issue 11's budget is 20 KB/s, and 200 ms measured
	// 25.8 KB/s at N = 200. A trip does not wait for gossip (the proposer
	// sends the record, and a node its failure burst, straight to every
	// member): with 5% loss and 20-50 ms links the trip's p99 was 43-48 ms
	// at 200 and at 300 ms. What a longer interval costs is row spread,
	// 1.5x slower than at 200 ms, well inside the 10 s window rows are
	// pooled over.
	DefaultGossipInterval = 300 * time.Millisecond
	// DefaultPushPullInterval: push-pull repairs what broadcasts lost, and
	// is the only path for rows when gossip saturates; memberlist stretches
	// it above 32 members. A state is small (42 KB for an agent calling
	// 1,000 dependencies, scale (c)), so 15 s costs little.
	DefaultPushPullInterval = 15 * time.Second
	// DefaultProbeInterval: memberlist's LAN default; with it two halves
	// of a 30 s partition declare each other dead (scale (e)).
	DefaultProbeInterval = time.Second
	// DefaultRetransmitMult: 2 (memberlist's local default) left members
	// of 20+ without some broadcasts until the next push-pull (FIELD-NOTES);
	// with 4, 20 memberlists on a 5%-loss simulated network reach full
	// membership (the memberlist test of the lab's agent/lab/simnet).
	DefaultRetransmitMult = 4
	// DefaultGossipNodes: how many random members memberlist sends its own
	// messages (alive, suspect, dead) to every GossipInterval, each time a
	// packet of at most 1.4 KB. memberlist's default is 3. Only membership
	// changes fill these packets (records and rows go in rounds of their
	// own), so a steady fleet sends none either way; what the number sets
	// is how fast a change of many members spreads. In a partition into
	// halves every member's queue holds a suspicion and then a death for
	// each member of the other half, each sent RetransmitMult × log10(N+1)
	// times, and half of the packets go to the other half, where they are
	// lost. At N = 1,000, with the detector settings below, an eighth of
	// the deaths were still to come 30 s after the split with 3 and 0.3%
	// with 6 (scale (e), -v). 6 spreads a change twice as fast, at twice
	// the bytes per second for half as long.
	DefaultGossipNodes = 6
	// DefaultProbeTimeout: how long a probe waits for an ack before asking
	// others to probe indirectly; memberlist's LAN default, a generous
	// 99th-percentile round trip inside a data centre. A member uses at
	// most half its ProbeInterval of it, so that a probe and its indirect
	// probes fit in one interval.
	DefaultProbeTimeout = 500 * time.Millisecond
	// DefaultTCPTimeout: dial and read/write deadline of memberlist's
	// streams (joins, push-pull). memberlist's LAN default is 10 s; a
	// join that does not answer in 2 s is across a partition or dead, and
	// a rejoin round waits for one dial timeout (Rejoin dials in
	// parallel), so shorter keeps reconciliation rounds short. A push-pull
	// of 1,000 members and 1,000 rows is well under 1 MB: 2 s is ample on
	// a LAN.
	DefaultTCPTimeout = 2 * time.Second
	// DefaultDeadNodeReclaimTime: after this long a dead member's name may
	// be taken by a member at another address, as a restarted agent that
	// got a new port (or pod IP) does; memberlist's default (0) would
	// refuse the new address forever. 5 s is longer than a restart takes
	// to be noticed, so two live agents with one name still conflict.
	DefaultDeadNodeReclaimTime = 5 * time.Second
)

// The failure detector's settings: a partition's deaths are declared well
// within a 30 s split at every fleet size up to 1,000, so that when it heals
// no suspicion is still running. One that is, once the heal's state
// exchanges bring confirmations from the other side, times out at once and
// takes a member that has just come back out of the count again until it
// refutes (scale (e) at N = 1,000 with memberlist's local health, 3
// gossip nodes and a suspicion bound of 2: 17,645 suspicions timed out in the heal's
// first millisecond, and the membership was not whole 10 s later; with
// these and 6 gossip nodes it was whole 1.5 s after the heal).
const (
	// suspicionMaxTimeoutMult bounds how long memberlist lets a suspicion
	// that few members confirm run, in multiples of its shortest timeout
	// (SuspicionMult × log10(N) probe intervals, at least 4: 12 s at
	// N = 1,000 with the default probe interval). memberlist's LAN
	// default, 6, spreads a partition's deaths over a minute or more; with
	// 1 every member that hears of a suspicion declares the death after
	// the shortest timeout, however few confirm it. A member falsely
	// suspected still has that long to refute, which it does as soon as
	// the suspicion reaches it.
	suspicionMaxTimeoutMult = 1
	// awarenessMaxMultiplier turns off memberlist's local health
	// (Lifeguard's): a member whose probes fail without the nacks it
	// expected from the members it asked to probe indirectly takes the
	// fault for its own and stretches its probe timeout, and with it the
	// time between its probes, up to 8 times by default. In a partition
	// into halves every member asks members of the other half too, so
	// every member slows down and the other half's deaths come later: at
	// N = 500 a 30 s split left 1.4% of them undeclared with it (and 3
	// gossip nodes, a bound of 2), 0.2% without it. A member starved of
	// CPU now suspects others as soon as a healthy one would; their
	// refutations keep them in.
	awarenessMaxMultiplier = 1
)

// Config configures a Gossip. Start from DefaultConfig, set the required
// fields and check it with Validate (New does too).
type Config struct {
	// Name is the node name, unique in the cluster (required).
	Name string
	// BindAddr is the memberlist bind address, host:port; port 0 picks a
	// free port (required).
	BindAddr string
	// AdvertiseAddr is the address peers reach this node at, host:port
	// (optional, default from BindAddr and the bound port).
	AdvertiseAddr string
	// Meta is published through Delegate.NodeMeta (required: Role set; it
	// must encode to at most MaxMetaSize bytes).
	Meta NodeMeta
	// Keyring encrypts gossip (optional, default none: see LoadKeyringFile).
	Keyring *memberlist.Keyring
	// GossipInterval is memberlist's gossip interval (optional, default
	// DefaultGossipInterval; at least 1ms).
	GossipInterval time.Duration
	// PushPullInterval is memberlist's full state sync interval (optional,
	// default DefaultPushPullInterval; at least 1ms).
	PushPullInterval time.Duration
	// ProbeInterval is memberlist's failure detection probe interval
	// (optional, default DefaultProbeInterval; at least 1ms).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for an ack (optional, default
	// DefaultProbeTimeout; at least 1ms). memberlist is given
	// min(ProbeTimeout, ProbeInterval/2).
	ProbeTimeout time.Duration
	// TCPTimeout bounds a stream's dial and each of its reads and writes
	// (joins and push-pull; optional, default DefaultTCPTimeout; at least
	// 1ms).
	TCPTimeout time.Duration
	// DeadNodeReclaimTime is how long after its death a member's name may
	// be taken by a member at another address (optional, default
	// DefaultDeadNodeReclaimTime; at least 1ms).
	DeadNodeReclaimTime time.Duration
	// RetransmitMult scales broadcast retransmits (optional, default
	// DefaultRetransmitMult; at least 1).
	RetransmitMult int
	// GossipNodes is how many random members memberlist gossips its own
	// messages to every GossipInterval (optional, default
	// DefaultGossipNodes; 1..64).
	GossipNodes int
	// RowFanout is how many random members each broadcast round (every
	// GossipInterval) sends one packet of the queued records and rows to
	// (optional, default DefaultRowFanout; 0..64). 0 sends them in
	// memberlist's gossip packets instead, in the room memberlist's own
	// messages leave.
	RowFanout int
	// Relay re-broadcasts what Handler.ApplyBatch/ApplyState report as new
	// (epidemic dissemination). Agents relay; an observer need not
	// (optional, default false).
	Relay bool
	// Handler receives decoded gossip (required).
	Handler Handler
	// Events is told about membership changes (optional, default none).
	Events MemberEvents
	// Logger receives memberlist's log and the gossip layer's own (optional,
	// default slog.Default()).
	Logger *slog.Logger
	// Codec bounds frames (optional, default protocol.DefaultMaxFrameSize).
	Codec protocol.Codec
	// Signer is the key this node signs the rows and records it originates
	// with (optional, default none: it signs nothing, as an observer, which
	// originates nothing, need not; LoadOrCreateKey). Its public key goes
	// into the node metadata.
	Signer ed25519.PrivateKey
	// Keys returns the key a member signs with (optional, default: the key
	// in the member's metadata, which is as trustworthy as the keyring; a
	// daemon with etcd passes a KeyDirectory of the etcd member entries).
	Keys KeySource
	// Transport carries memberlist's packets and streams (optional, default
	// memberlist's UDP/TCP transport bound at BindAddr, which must parse
	// either way). The lab's simulations pass an agent/lab/simnet transport; it
	// is used as is, without the plaintext guard that wraps memberlist's
	// own transport when there is no keyring.
	Transport memberlist.NodeAwareTransport
	// VerifyMemo, when set, answers the signature checks of items it has
	// seen pass (optional, default none: every item is checked). Members
	// in one process may share one: the lab's simulated fleets do, so that
	// a batch every agent receives is checked once, not once per agent.
	VerifyMemo *VerifyMemo
}

// DefaultConfig returns a Config with every optional field at its default.
// Name, BindAddr, Meta.Role and Handler remain to be set.
func DefaultConfig() Config {
	return Config{
		GossipInterval:   DefaultGossipInterval,
		PushPullInterval: DefaultPushPullInterval,
		ProbeInterval:    DefaultProbeInterval,
		RetransmitMult:   DefaultRetransmitMult,
		GossipNodes:      DefaultGossipNodes,
		RowFanout:        DefaultRowFanout,

		ProbeTimeout:        DefaultProbeTimeout,
		TCPTimeout:          DefaultTCPTimeout,
		DeadNodeReclaimTime: DefaultDeadNodeReclaimTime,
	}
}

// Validate reports every violation in c (joined), or nil. It has no side
// effects: a bad value is refused, never replaced by a default.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("gossip: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.Name == "" {
		bad("Name", "must not be empty")
	}
	checkAddr := func(field, v string) {
		_, port, err := net.SplitHostPort(v)
		if err != nil {
			bad(field, "must be host:port, got %q", v)
			return
		}
		if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			bad(field, "port must be a number in 0..65535, got %q", port)
		}
	}
	if c.BindAddr == "" {
		bad("BindAddr", "must not be empty")
	} else {
		checkAddr("BindAddr", c.BindAddr)
	}
	if c.AdvertiseAddr != "" {
		checkAddr("AdvertiseAddr", c.AdvertiseAddr)
	}
	if c.Meta.Role == "" {
		bad("Meta.Role", "must not be empty")
	}
	if _, err := c.fullMeta(c.Meta).Encode(); err != nil {
		bad("Meta", "%v", err)
	}
	if c.Handler == nil {
		bad("Handler", "must not be nil")
	}
	atLeast := func(field string, d time.Duration) {
		if d < time.Millisecond {
			bad(field, "must be at least 1ms, got %v", d)
		}
	}
	atLeast("GossipInterval", c.GossipInterval)
	atLeast("PushPullInterval", c.PushPullInterval)
	atLeast("ProbeInterval", c.ProbeInterval)
	atLeast("ProbeTimeout", c.ProbeTimeout)
	atLeast("TCPTimeout", c.TCPTimeout)
	atLeast("DeadNodeReclaimTime", c.DeadNodeReclaimTime)
	if c.GossipNodes < 1 || c.GossipNodes > 64 {
		bad("GossipNodes", "must be in 1..64, got %d", c.GossipNodes)
	}
	if c.RowFanout < 0 || c.RowFanout > 64 {
		bad("RowFanout", "must be in 0..64, got %d", c.RowFanout)
	}
	if c.RetransmitMult < 1 {
		bad("RetransmitMult", "must be at least 1, got %d", c.RetransmitMult)
	}
	if c.Signer != nil && len(c.Signer) != ed25519.PrivateKeySize {
		bad("Signer", "must be an Ed25519 private key of %d bytes, got %d", ed25519.PrivateKeySize, len(c.Signer))
	}
	return errors.Join(errs...)
}

// fullMeta is m with what the Gossip says itself: the frame version it
// speaks and the key it signs with.
func (c Config) fullMeta(m NodeMeta) NodeMeta {
	m.Wire = int(protocol.MaxVersion)
	m.Key = ""
	if len(c.Signer) == ed25519.PrivateKeySize {
		m.Key = EncodeKey(c.Signer.Public().(ed25519.PublicKey))
	}
	return m
}

// splitAddr splits a host:port Validate accepted.
func splitAddr(addr string) (string, int) {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	return host, p
}
