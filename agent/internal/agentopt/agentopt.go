package agentopt

import (
	"log/slog"
	"net"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/protocol/serverlimits"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// Options are agent.New's settings besides its Config. Package agent's
// With… functions document each knob; a nil or zero field is its default.
type Options struct {
	Clock         sharedstate.Clock
	Logger        *slog.Logger
	Registerer    prometheus.Registerer
	DefaultPolicy *sharedstate.Policy
	EtcdClient    *store.Client
	HTTPTimeouts  *serverlimits.HTTPTimeouts
	// ProxyListener is the socket the egress proxy serves instead of
	// binding Config.Proxy.Addr (agent.WithProxyListener).
	ProxyListener net.Listener
	// Sim are the hooks of a simulated agent (zero: none).
	Sim Sim
}

// Sim are the hooks with which the lab runs hundreds of real agents in one
// process on a simulated network, without sockets and without etcd. Every
// field is optional; the zero Sim changes nothing.
type Sim struct {
	// Transport carries memberlist's packets and streams instead of UDP and
	// TCP sockets bound at Config.GossipAddr (which must still parse; the
	// transport decides the advertised address). It is used as is, without
	// the plaintext guard of memberlist's own transport.
	Transport memberlist.NodeAwareTransport
	// Peers lists the fleet's agents (their gossip addresses) for joining
	// and membership reconciliation, as the etcd member registry does (both
	// are used when both are there). It is called from the agent's join
	// loop and must be safe for concurrent use.
	Peers func() []string
	// InProcessAPI lets Config.Socket and Config.GRPCAddr both be empty: the
	// local API is then served in process only, through Inside.API.
	InProcessAPI bool
	// VerifyMemo is shared by the agents of one simulated fleet: each
	// signed batch they all receive is checked once in the process
	// (gossip.Config.VerifyMemo).
	VerifyMemo *gossip.VerifyMemo
	// Attach, when set, is called once by agent.New, on New's goroutine
	// before it returns the agent, with what a simulation reads the agent
	// through in process.
	Attach func(Inside)
}

// Inside is what agent.New hands a simulation (Sim.Attach). Both are safe
// for concurrent use once the agent has started.
type Inside struct {
	// API is the local API's handlers (what the unix socket and the
	// loopback TCP serve), to be called in process. Session needs a gRPC
	// stream; the unary methods (Check, Report, AcquireRetry, AcquireProbe)
	// do not.
	API fuseboxv1.AgentServer
	// PushPullState returns the state the agent sends in a push-pull right
	// now: its records and its own rows.
	PushPullState func() *fuseboxv1.PushPullState
	// Crash stops the agent as a kill -9 would, for a member that vanished:
	// Close without leaving the gossip, so the others find it dead. Like
	// Close it is idempotent and returns when the agent has stopped.
	Crash func()
	// GossipKeys returns the gossip encryption keys in use, the primary
	// (the one the agent sends with) first; nil without a keyring.
	GossipKeys func() [][]byte
	// PeerKey says what the agent knows of node's signing key from the etcd
	// member registry (gossip.KeyKnown: it takes node's items only signed
	// with it); gossip.KeyUnknown without etcd.
	PeerKey func(node string) gossip.KeyStatus
}

// WithSim returns an agent.Option (a func(*Options)) that sets the hooks.
func WithSim(s Sim) func(*Options) { return func(o *Options) { o.Sim = s } }
