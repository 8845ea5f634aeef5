package soak

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind names a fault.
type Kind string

// The faults a soak injects.
const (
	// AgentKill: SIGKILL one agent (never a sentinel), restart it on its
	// data directory after Fault.For.
	AgentKill Kind = "agent-kill"
	// EtcdKill: SIGKILL one etcd member, restart it on its data directory
	// after Fault.For. At most one member is down at a time: the cluster
	// keeps its quorum (quorum loss is not part of the soak).
	EtcdKill Kind = "etcd-kill"
	// CoordinatorRestart: stop the coordinator (SIGKILL or SIGTERM), start
	// it again after Fault.For.
	CoordinatorRestart Kind = "coordinator-restart"
	// Partition: nftables drop rules between two groups of namespaces for
	// Fault.For, then removed (the heal).
	Partition Kind = "partition"
	// Loss: nftables rules dropping Fault.Percent % of the packets that
	// reach some namespaces, for Fault.For.
	Loss Kind = "loss"
)

// Kinds lists every fault kind, in the order of the summary.
var Kinds = []Kind{AgentKill, EtcdKill, CoordinatorRestart, Partition, Loss}

// Role is what runs in a namespace.
type Role string

// The roles of a soak's namespaces.
const (
	RoleAgent       Role = "agent"
	RoleEtcd        Role = "etcd"
	RoleCoordinator Role = "coordinator"
)

// Node is one namespace of the lab: agent i, etcd member i or the
// coordinator (Index 0).
type Node struct {
	Role  Role
	Index int
}

func (n Node) String() string {
	if n.Role == RoleCoordinator {
		return string(n.Role)
	}
	return fmt.Sprintf("%s-%d", n.Role, n.Index)
}

// Side says where the etcd members and the coordinator are during a
// partition.
type Side string

// The sides of a partition's infrastructure.
const (
	// InfraA: etcd and the coordinator are with side A; side B loses them.
	InfraA Side = "a"
	// InfraB: with side B.
	InfraB Side = "b"
	// InfraBoth: both sides reach them; only agent-to-agent traffic is cut.
	InfraBoth Side = "both"
)

// Fault is one fault of a schedule.
type Fault struct {
	Kind Kind
	// At is when it starts, from the start of the run; For how long it
	// lasts (down time, or how long the rules stay).
	At, For time.Duration
	// Agent is the agent killed (AgentKill).
	Agent int
	// Member is the etcd member killed (EtcdKill).
	Member int
	// Kill: the coordinator is stopped with SIGKILL, else SIGTERM
	// (CoordinatorRestart).
	Kill bool
	// SideA and SideB are the agents of each side (Partition); Infra where
	// etcd and the coordinator are.
	SideA, SideB []int
	Infra        Side
	// Percent is the share of packets dropped, Nodes the namespaces that
	// drop them on arrival (Loss).
	Percent int
	Nodes   []Node
}

// End is when the fault ends.
func (f Fault) End() time.Duration { return f.At + f.For }

// Describe says what the fault does, in a few words.
func (f Fault) Describe() string {
	switch f.Kind {
	case AgentKill:
		return fmt.Sprintf("SIGKILL agent-%d, restart after %v", f.Agent, f.For.Round(time.Millisecond))
	case EtcdKill:
		return fmt.Sprintf("SIGKILL etcd-%d, restart after %v", f.Member, f.For.Round(time.Millisecond))
	case CoordinatorRestart:
		sig := "SIGTERM"
		if f.Kill {
			sig = "SIGKILL"
		}
		return fmt.Sprintf("%s the coordinator, start it after %v", sig, f.For.Round(time.Millisecond))
	case Partition:
		return fmt.Sprintf("partition agents %v | %v (etcd and coordinator: %s) for %v",
			f.SideA, f.SideB, f.Infra, f.For.Round(time.Millisecond))
	case Loss:
		names := make([]string, len(f.Nodes))
		for i, n := range f.Nodes {
			names[i] = n.String()
		}
		return fmt.Sprintf("drop %d%% of packets arriving at %s for %v", f.Percent, strings.Join(names, ","), f.For.Round(time.Millisecond))
	}
	return string(f.Kind)
}

// WriteOp is what an operator write does, with the real fuseboxctl,
// against the coordinator, to the dependency the soak reserves for writes.
type WriteOp string

// The writes of a soak.
const (
	// WritePolicy: fuseboxctl policy set DEP (breaker.minimumRequests).
	WritePolicy WriteOp = "policy"
	// WriteForceOpen: fuseboxctl force-open DEP --reason R [--ttl T].
	WriteForceOpen WriteOp = "force-open"
	// WriteForceClosed: fuseboxctl force-closed DEP --reason R [--ttl T].
	WriteForceClosed WriteOp = "force-closed"
	// WriteClear: fuseboxctl clear DEP.
	WriteClear WriteOp = "clear"
)

// Write is one operator write of a schedule.
type Write struct {
	At time.Duration
	Op WriteOp
	// MinimumRequests is the policy's breaker.minimumRequests
	// (WritePolicy): it differs from the previous policy write's.
	MinimumRequests uint32
	// Reason is the override's reason (force-open, force-closed): unique
	// per write, so an agent's snapshot says which write it follows.
	Reason string
	// TTL is the override's TTL (0: until cleared).
	TTL time.Duration
}

// Describe says what the write does.
func (w Write) Describe() string {
	switch w.Op {
	case WritePolicy:
		return fmt.Sprintf("policy set: breaker.minimumRequests %d", w.MinimumRequests)
	case WriteForceOpen, WriteForceClosed:
		ttl := "no TTL"
		if w.TTL > 0 {
			ttl = "TTL " + w.TTL.String()
		}
		return fmt.Sprintf("%s %q (%s)", w.Op, w.Reason, ttl)
	}
	return string(w.Op)
}

// Plan is what a schedule is drawn from.
type Plan struct {
	// Seed draws the schedule: the same plan and seed give the same
	// schedule (required; any value).
	Seed int64
	// Agents is the number of agents (required, at least 4); the first
	// Sentinels of them are never killed (optional, default 0), so that
	// whole-run resource series exist.
	Agents, Sentinels int
	// EtcdMembers is the size of the etcd cluster (required, at least 3).
	EtcdMembers int
	// Start and End bound the faults and writes: each starts at or after
	// Start and ends before End (required, End > Start).
	Start, End time.Duration
	// Gaps is the mean quiet time between two faults of the same kind
	// (optional per kind, default DefaultGaps).
	Gaps map[Kind]time.Duration
	// WriteEvery is the mean time between two writes (optional, default
	// DefaultWriteEvery).
	WriteEvery time.Duration
}

// DefaultGaps are the mean quiet times between faults of one kind; faults
// of different kinds overlap freely.
var DefaultGaps = map[Kind]time.Duration{
	AgentKill:          40 * time.Second,
	EtcdKill:           120 * time.Second,
	CoordinatorRestart: 240 * time.Second,
	Partition:          90 * time.Second,
	Loss:               70 * time.Second,
}

// DefaultWriteEvery is the mean time between two operator writes.
const DefaultWriteEvery = 12 * time.Second

// durations bounds each kind's length: drawn uniformly in [min, max].
var durations = map[Kind][2]time.Duration{
	AgentKill:          {time.Second, 20 * time.Second},
	EtcdKill:           {2 * time.Second, 30 * time.Second},
	CoordinatorRestart: {time.Second, 10 * time.Second},
	Partition:          {5 * time.Second, 45 * time.Second},
	Loss:               {5 * time.Second, 30 * time.Second},
}

// minGap is the shortest quiet time between two faults of one kind.
const minGap = 5 * time.Second

// lossPercents are the loss rates a burst draws from.
var lossPercents = []int{2, 5, 10, 20}

// Validate names every problem of the plan.
func (p Plan) Validate() error {
	var errs []error
	if p.Agents < 4 {
		errs = append(errs, fmt.Errorf("soak: schedule: at least 4 agents, got %d", p.Agents))
	}
	if p.Sentinels < 0 || p.Sentinels > p.Agents-2 {
		errs = append(errs, fmt.Errorf("soak: schedule: sentinels must be in [0, agents-2] (two agents to kill), got %d of %d", p.Sentinels, p.Agents))
	}
	if p.EtcdMembers < 3 {
		errs = append(errs, fmt.Errorf("soak: schedule: at least 3 etcd members, got %d", p.EtcdMembers))
	}
	if p.Start < 0 || p.End <= p.Start {
		errs = append(errs, fmt.Errorf("soak: schedule: need 0 <= start < end, got start %v end %v", p.Start, p.End))
	}
	for k, g := range p.Gaps {
		if !slices.Contains(Kinds, k) {
			errs = append(errs, fmt.Errorf("soak: schedule: unknown fault kind %q", k))
		} else if g <= 0 {
			errs = append(errs, fmt.Errorf("soak: schedule: gap of %s must be > 0, got %v", k, g))
		}
	}
	if p.WriteEvery < 0 {
		errs = append(errs, fmt.Errorf("soak: schedule: write interval must be >= 0, got %v", p.WriteEvery))
	}
	return errors.Join(errs...)
}

// Schedule is every fault and write of a run, drawn from a Plan.
type Schedule struct {
	Plan   Plan
	Faults []Fault // by start time
	Writes []Write // by time
}

// NewSchedule draws the schedule of p. Each kind draws from its own
// random stream (seeded by the seed and the kind), so changing one kind's
// gap leaves the others' faults where they were.
func NewSchedule(p Plan) (Schedule, error) {
	if err := p.Validate(); err != nil {
		return Schedule{}, err
	}
	if p.WriteEvery == 0 {
		p.WriteEvery = DefaultWriteEvery
	}
	s := Schedule{Plan: p}
	for ki, k := range Kinds {
		gap := DefaultGaps[k]
		if g, ok := p.Gaps[k]; ok {
			gap = g
		}
		r := rand.New(rand.NewPCG(uint64(p.Seed), uint64(ki+1)))
		at := p.Start + drawGap(r, gap)
		for {
			d := durations[k]
			f := Fault{Kind: k, At: at, For: uniform(r, d[0], d[1])}
			if f.End() >= p.End {
				break
			}
			p.fill(r, &f)
			s.Faults = append(s.Faults, f)
			at = f.End() + drawGap(r, gap)
		}
	}
	slices.SortStableFunc(s.Faults, func(a, b Fault) int { return int(a.At - b.At) })
	s.Writes = p.writes()
	return s, nil
}

// fill draws what the fault targets.
func (p Plan) fill(r *rand.Rand, f *Fault) {
	switch f.Kind {
	case AgentKill:
		f.Agent = p.Sentinels + r.IntN(p.Agents-p.Sentinels)
	case EtcdKill:
		f.Member = r.IntN(p.EtcdMembers)
	case CoordinatorRestart:
		f.Kill = r.IntN(2) == 0
	case Partition:
		perm := r.Perm(p.Agents)
		cut := 1 + r.IntN(p.Agents-1)
		f.SideA = slices.Sorted(slices.Values(perm[:cut]))
		f.SideB = slices.Sorted(slices.Values(perm[cut:]))
		f.Infra = []Side{InfraA, InfraB, InfraBoth}[r.IntN(3)]
	case Loss:
		f.Percent = lossPercents[r.IntN(len(lossPercents))]
		var all []Node
		for i := range p.Agents {
			all = append(all, Node{RoleAgent, i})
		}
		for i := range p.EtcdMembers {
			all = append(all, Node{RoleEtcd, i})
		}
		all = append(all, Node{Role: RoleCoordinator})
		n := 1 + r.IntN(len(all))
		if r.IntN(4) == 0 {
			n = len(all) // sometimes everywhere
		}
		picked := r.Perm(len(all))[:n]
		slices.Sort(picked)
		for _, i := range picked {
			f.Nodes = append(f.Nodes, all[i])
		}
	}
}

// writes draws the operator writes: a policy change, a force-open or
// force-closed (half of them with a TTL of 20 s to 3 min) or a clear.
func (p Plan) writes() []Write {
	r := rand.New(rand.NewPCG(uint64(p.Seed), uint64(len(Kinds)+1)))
	var out []Write
	at := p.Start + uniform(r, 0, p.WriteEvery)
	for i := 0; at < p.End; i++ {
		w := Write{At: at}
		switch x := r.IntN(100); {
		case x < 40:
			w.Op = WritePolicy
			// 37 and 80 are coprime: consecutive writes differ.
			w.MinimumRequests = 10 + uint32(i*37%80)
		case x < 65:
			w.Op = WriteForceOpen
		case x < 75:
			w.Op = WriteForceClosed
		default:
			w.Op = WriteClear
		}
		if w.Op == WriteForceOpen || w.Op == WriteForceClosed {
			w.Reason = fmt.Sprintf("soak write %d", i)
			if r.IntN(2) == 0 {
				w.TTL = uniform(r, 20*time.Second, 3*time.Minute).Round(time.Second)
			}
		}
		out = append(out, w)
		at += p.WriteEvery/2 + uniform(r, 0, p.WriteEvery)
	}
	return out
}

// drawGap is minGap plus an exponential time of mean gap-minGap (at least
// a second), capped at 10 means.
func drawGap(r *rand.Rand, gap time.Duration) time.Duration {
	mean := max(gap-minGap, time.Second)
	return minGap + time.Duration(math.Min(r.ExpFloat64(), 10)*float64(mean))
}

// uniform draws a duration in [lo, hi], to the millisecond.
func uniform(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return (lo + time.Duration(r.Int64N(int64(hi-lo)+1))).Round(time.Millisecond)
}

// Count returns how many faults of kind k the schedule holds.
func (s Schedule) Count(k Kind) int {
	n := 0
	for _, f := range s.Faults {
		if f.Kind == k {
			n++
		}
	}
	return n
}

// Table lists the faults and writes in time order, one per line.
func (s Schedule) Table() string {
	type line struct {
		at   time.Duration
		text string
	}
	var lines []line
	for _, f := range s.Faults {
		lines = append(lines, line{f.At, fmt.Sprintf("%-20s %s", f.Kind, f.Describe())})
	}
	for _, w := range s.Writes {
		lines = append(lines, line{w.At, fmt.Sprintf("%-20s %s", "write", w.Describe())})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return int(a.at - b.at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%9s  %s\n", fmtOffset(l.at), l.text)
	}
	return b.String()
}

// fmtOffset formats an offset from the start of the run as m:ss.mmm.
func fmtOffset(d time.Duration) string {
	d = d.Round(time.Millisecond)
	m := d / time.Minute
	s := float64(d%time.Minute) / float64(time.Second)
	return fmt.Sprintf("%d:%06.3f", m, s)
}
