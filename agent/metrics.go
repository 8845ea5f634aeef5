package agent

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// metrics holds the agent's own collectors (no package-level metrics: two
// agents in one process never share a series). Event counters are regular
// vectors; everything read from the engine, the gossip layer or the hub is
// produced at scrape time by the agent's Collector.
type metrics struct {
	a *Agent

	transitions     *prometheus.CounterVec // dependency, to, origin
	decisions       *prometheus.CounterVec // method, verdict, reason
	outcomes        *prometheus.CounterVec // source
	refusedDeps     *prometheus.CounterVec // reason
	sessionsOpened  prometheus.Counter
	sessionsRefused prometheus.Counter
	snapshotsPushed prometheus.Counter
	etcdWatchErrors prometheus.Counter
	etcdInvalid     prometheus.Counter
	etcdSynced      prometheus.Gauge
	etcdRewinds     *prometheus.CounterVec // reason
	policyRejected  prometheus.Counter
	cacheErrors     prometheus.Counter
	stateOmitted    *prometheus.CounterVec // kind
	withheld        [2]prometheus.Counter  // withheldRow, withheldRecord
	withheldVec     *prometheus.CounterVec

	scrape *collector
	docs   []MetricDoc
}

const ns = "fusebox_agent"

// MetricDoc describes one metric the agent exposes.
type MetricDoc struct {
	Name, Type, Help string
	Labels           []string
}

// MetricDocs lists every metric of the agent, in the order of the code,
// the egress proxy's (fusebox_agent_proxy_*, exposed when --proxy-addr is
// set) last: agent/README.md's metric list is checked against it (and a test
// checks /metrics against it).
func MetricDocs() []MetricDoc {
	docs := newMetrics(&Agent{}).docs
	for _, d := range proxy.MetricDocs() {
		docs = append(docs, MetricDoc(d))
	}
	return docs
}

func (m *metrics) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	m.docs = append(m.docs, MetricDoc{Name: ns + "_" + name, Type: "counter", Help: help, Labels: labels})
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
}

func (m *metrics) counter(name, help string) prometheus.Counter {
	m.docs = append(m.docs, MetricDoc{Name: ns + "_" + name, Type: "counter", Help: help})
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help})
}

func (m *metrics) gauge(name, help string) prometheus.Gauge {
	m.docs = append(m.docs, MetricDoc{Name: ns + "_" + name, Type: "gauge", Help: help})
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help})
}

func newMetrics(a *Agent) *metrics {
	m := &metrics{a: a}
	m.transitions = m.counterVec("breaker_transitions_total",
		"Breaker records this agent adopted, by dependency, new state and origin (self: proposed here; peer: learned by gossip).",
		"dependency", "to", "origin")
	m.decisions = m.counterVec("decisions_total",
		"Decisions answered over the local API, by method, verdict and reason.",
		"method", "verdict", "reason")
	m.outcomes = m.counterVec("outcomes_total",
		"Outcomes (requests and rejections) ingested from clients, by source (session, report, proxy: the egress proxy's own).",
		"source")
	m.refusedDeps = m.counterVec("dependencies_refused_total",
		"Dependency names or count deltas refused on the local API, by reason (invalid_name, too_many, invalid_argument, invalid_delta: a count above sharedstate.MaxDelta or more slow calls than requests).",
		"reason")
	m.sessionsOpened = m.counter("sessions_opened_total",
		"Client sessions opened.")
	m.sessionsRefused = m.counter("sessions_refused_total",
		"Client sessions refused because --max-sessions were open.")
	m.snapshotsPushed = m.counter("snapshots_pushed_total",
		"Decision snapshots pushed to client sessions.")
	m.etcdWatchErrors = m.counter("etcd_watch_errors_total",
		"Failed etcd lists or watches (each is retried with backoff).")
	m.etcdInvalid = m.counter("etcd_invalid_values_total",
		"Invalid policy or override values found in etcd and ignored (the last good value is kept).")
	m.etcdSynced = m.gauge("etcd_synced",
		"1 once policies were listed from etcd, 0 after a reported list or watch error until etcd accepts a watch again, and after a rewind until the list from scratch (the etcd client retries a lost connection silently, so 1 does not prove etcd is up).")
	m.etcdRewinds = m.counterVec("etcd_rewinds_total",
		"Times etcd was found not to hold the history the agent followed, which then listed policies and overrides again from scratch, by reason (new_cluster: another cluster ID; revision_went_back: a revision below the agent's; history_changed: other keys at the agent's revision; compacted: the revision it needed compacted beyond any it knew of). A snapshot restore or a wiped etcd shows here.",
		"reason")
	for _, r := range store.RewindReasons() {
		m.etcdRewinds.WithLabelValues(string(r)) // exposed at 0 before the first rewind
	}
	m.policyRejected = m.counter("policies_rejected_total",
		"Policies or overrides the engine refused once merged (the last good one is kept).")
	m.cacheErrors = m.counter("cache_write_errors_total",
		"Failed writes of the policy cache in the data dir.")
	m.stateOmitted = m.counterVec("gossip_state_omitted_total",
		"Records and own rows left out of a push-pull state because the state would exceed the frame limit (records go first, then own rows), by kind (record, row).",
		"kind")
	for _, k := range []string{"record", "row"} {
		m.stateOmitted.WithLabelValues(k) // exposed at 0 before the first omission
	}
	withheld := m.counterVec("gossip_withheld_total",
		"This agent's own rows and proposed records it did not gossip because no real traffic confirmed their dependency (agent/README.md, \"Which dependency\"), by kind (row, record).",
		"kind")
	for k, name := range []string{"row", "record"} {
		m.withheld[k] = withheld.WithLabelValues(name)
	}
	m.withheldVec = withheld
	m.scrape = newCollector(a, m)
	return m
}

// Kinds of withheld gossip (the kind label of gossip_withheld_total).
const (
	withheldRow = iota
	withheldRecord
)

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.transitions, m.decisions, m.outcomes, m.refusedDeps, m.sessionsOpened, m.sessionsRefused,
		m.snapshotsPushed, m.etcdWatchErrors, m.etcdInvalid, m.etcdSynced, m.etcdRewinds, m.policyRejected, m.cacheErrors, m.stateOmitted, m.withheldVec, m.scrape}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range m.collectors() {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("agent: metrics: %w", err)
		}
	}
	return nil
}

func (m *metrics) transition(r sharedstate.BreakerRecord, origin string) {
	m.transitions.WithLabelValues(r.Dependency, r.State.LabelValue(), origin).Inc()
}

// forget drops an untracked dependency's series, so their number stays
// bounded by maxDependencies.
func (m *metrics) forget(dep string) {
	m.transitions.DeletePartialMatch(prometheus.Labels{"dependency": dep})
}

func (m *metrics) decision(method string, d sharedstate.Decision) {
	m.decisions.WithLabelValues(method, d.Verdict.LabelValue(), d.Reason.LabelValue()).Inc()
}

func (m *metrics) refused(err error) {
	reason := "invalid_argument"
	switch {
	case errors.Is(err, sharedstate.ErrTooManyDependencies):
		reason = "too_many"
	case errors.Is(err, sharedstate.ErrInvalidDependencyName):
		reason = "invalid_name"
	case errors.Is(err, sharedstate.ErrInvalidDelta):
		reason = "invalid_delta"
	case errors.Is(err, ErrRateExceeded):
		reason = "rate_exceeded"
	case errors.Is(err, ErrSessionBytes):
		reason = "session_bytes"
	}
	m.refusedDeps.WithLabelValues(reason).Inc()
}

// collector produces, at scrape time, the series read from the engine, the
// gossip layer, the hub and the policy state.
type collector struct {
	a *Agent

	info, ready, deps, depsMax, depsEvicted, depsRefusedEngine       *prometheus.Desc
	members, sessions, gossipBytes, gossipMsgs, gossipDropped, queue *prometheus.Desc
	policies, overrides, revision, source                            *prometheus.Desc
	localCalls, fleetCalls, fleetNodes                               *prometheus.Desc
	state, localOpen, forced, generation                             *prometheus.Desc
	budget, budgetUsed, permit                                       *prometheus.Desc
	throttle, concurrencyLimit, inFlight                             *prometheus.Desc
	wireVersion, memberWire, unknownVersion, badSignatures, sigs     *prometheus.Desc
	sessionBytes, confirmed                                          *prometheus.Desc
}

func newCollector(a *Agent, m *metrics) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		typ := "gauge"
		if strings.HasSuffix(name, "_total") {
			typ = "counter"
		}
		m.docs = append(m.docs, MetricDoc{Name: ns + "_" + name, Type: typ, Help: help, Labels: labels})
		return prometheus.NewDesc(ns+"_"+name, help, labels, nil)
	}
	return &collector{
		a:                 a,
		info:              d("info", "Always 1; labels name the agent's node, zone and version.", "node", "zone", "version"),
		ready:             d("ready", "1 when the agent is ready (gossip joined, policies loaded).", nil...),
		deps:              d("dependencies", "Dependencies the engine tracks.", nil...),
		depsMax:           d("dependencies_max", "The maxDependencies cap.", nil...),
		depsEvicted:       d("dependencies_evicted_total", "Idle dependencies the engine forgot.", nil...),
		depsRefusedEngine: d("engine_dependencies_refused_total", "New dependency names the engine refused at maxDependencies (local API and gossip).", nil...),
		members:           d("members", "Gossip members this agent sees, by role and state.", "role", "state"),
		sessions:          d("sessions", "Open client sessions.", nil...),
		gossipBytes:       d("gossip_bytes_total", "Gossip payload bytes, by direction (in, out) and kind (message, push_pull).", "direction", "kind"),
		gossipMsgs:        d("gossip_messages_total", "Gossip frames, by direction (in, out) and kind (message, push_pull).", "direction", "kind"),
		gossipDropped:     d("gossip_dropped_total", "Received gossip frames or items dropped, by reason.", "reason"),
		queue:             d("gossip_broadcast_queue", "Broadcasts waiting in the transmit queue.", nil...),
		wireVersion: d("gossip_wire_version", "The gossip frame version this agent sends: its own, or the lowest an alive member speaks "+
			"when that is lower (a rolling upgrade).", nil...),
		memberWire:     d("gossip_member_wire_versions", "Alive gossip members by the highest frame version they speak (1: 0.1.x).", "wire"),
		unknownVersion: d("gossip_unknown_version_frames_total", "Gossip frames refused because this build does not speak their version, by version.", "version"),
		badSignatures: d("gossip_bad_signatures_total", "Signed gossip rows and records whose signature is not their claimed origin's, "+
			"by claimed origin (at most 64 names, the rest as other).", "origin"),
		sigs:      d("gossip_signatures_total", "Ed25519 signatures this agent made (sign) and checked (verify) for gossip rows and records.", "op"),
		policies:  d("policies", "Policies in force from etcd or the cache (_default included).", nil...),
		overrides: d("overrides", "Overrides in force from etcd or the cache.", nil...),
		revision:  d("policy_revision", "The etcd revision of the policies and overrides in force.", nil...),
		source:    d("policy_source", "1 for where the policies in force came from: default, cache or etcd.", "source"),
		localCalls: d("local_calls_total", "What this agent's clients and proxy counted for the dependency since the agent began counting it "+
			"(first_attempts, retries, successes, failures, slow_calls, rejected), as its rows carry it.", "dependency", "kind"),
		fleetCalls: d("fleet_calls_total", "What the fleet counted for the dependency, as this agent sees it: its own calls plus what every "+
			"other node's rows added while it watched, across their restarts and departures (nodes of 0.1.x are not in it).", "dependency", "kind"),
		fleetNodes: d("window_fleet_nodes", "Nodes with counts for the dependency over the window.", "dependency"),
		state:      d("breaker_state", "1 for the breaker state governing this agent (closed, open, half_open).", "dependency", "state"),
		localOpen:  d("breaker_local_open", "1 while this node's own breaker for the dependency is open or half-open.", "dependency"),
		forced:     d("breaker_override", "1 while an operator override is in force (forced_open, forced_closed).", "dependency", "override"),
		generation: d("breaker_generation", "Generation of the breaker record in force.", "dependency"),
		budget:     d("retry_budget", "Retries the fleet (or zone) may make over the window.", "dependency"),
		budgetUsed: d("retry_budget_used_ratio", "Retries made over the window divided by the retry budget.", "dependency"),
		permit:     d("probe_permit", "1 while this agent holds a half-open probe permit.", "dependency"),
		throttle: d("throttle_probability", "Adaptive throttling: the probability the policy's formula gives over the fleet's (zone's) window "+
			"at the last tick, applied to first attempts while the breaker is closed (in shadow mode only reported); 0 when throttling is off.", "dependency"),
		concurrencyLimit: d("concurrency_limit", "This node's share of the policy's concurrency.maxInFlight (0: no limit).", "dependency"),
		inFlight:         d("in_flight", "Calls in flight to the dependency: this node's clients' (scope node) and the fleet's (scope fleet, as the rows report them).", "dependency", "scope"),
		sessionBytes:     d("session_bytes", "Bytes of dependency state the client sessions hold, as --max-session-bytes and --max-sessions-bytes count them.", nil...),
		confirmed: d("dependencies_confirmed", "Dependencies real traffic confirmed (the egress proxy reached their upstream, or a client on the unix socket named them), whose rows this agent gossips; --proxy-routes names are confirmed besides.",
			nil...),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.ready, c.deps, c.depsMax, c.depsEvicted, c.depsRefusedEngine,
		c.members, c.sessions, c.gossipBytes, c.gossipMsgs, c.gossipDropped, c.queue, c.policies, c.overrides,
		c.revision, c.source, c.localCalls, c.fleetCalls, c.fleetNodes, c.state, c.localOpen, c.forced, c.generation,
		c.budget, c.budgetUsed, c.permit, c.throttle, c.concurrencyLimit, c.inFlight,
		c.wireVersion, c.memberWire, c.unknownVersion, c.badSignatures, c.sigs, c.sessionBytes, c.confirmed} {
		ch <- d
	}
}

var countKinds = [...]string{"first_attempts", "retries", "successes", "failures", "slow_calls", "rejected"}

func countValues(c sharedstate.Counts) [6]float64 {
	return [6]float64{float64(c.FirstAttempts), float64(c.Retries), float64(c.Successes),
		float64(c.Failures), float64(c.SlowCalls), float64(c.Rejected)}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge(c.info, 1, a.cfg.Name, a.cfg.Zone, Version)
	gauge(c.ready, b2f(a.Ready()))
	st := a.eng.Stats()
	gauge(c.deps, float64(st.Dependencies))
	gauge(c.depsMax, float64(a.cfg.MaxDependencies))
	counter(c.depsEvicted, float64(st.Evicted))
	counter(c.depsRefusedEngine, float64(st.RefusedDependencies))
	gauge(c.sessions, float64(a.hub.count()))
	gauge(c.sessionBytes, float64(a.sessionBytes.Load()))
	gauge(c.confirmed, float64(a.confirmed.count()))

	if a.gossip != nil {
		type key struct{ role, state string }
		members := map[key]int{}
		wires := map[int]int{}
		for _, m := range a.gossip.Members() {
			role := string(m.Meta.Role)
			if role != string(gossip.RoleAgent) && role != string(gossip.RoleObserver) {
				role = "unknown"
			}
			members[key{role, m.State}]++
			wires[min(m.Meta.WireVersion(), 255)]++
		}
		for k, n := range members {
			gauge(c.members, float64(n), k.role, k.state)
		}
		for w, n := range wires {
			gauge(c.memberWire, float64(n), strconv.Itoa(w))
		}
		gauge(c.wireVersion, float64(a.gossip.SendVersion()))
		gs := a.gossip.Stats()
		for _, kind := range gossip.Kinds {
			counter(c.gossipBytes, float64(gs.BytesIn[kind]), "in", kind)
			counter(c.gossipBytes, float64(gs.BytesOut[kind]), "out", kind)
			counter(c.gossipMsgs, float64(gs.MsgsIn[kind]), "in", kind)
			counter(c.gossipMsgs, float64(gs.MsgsOut[kind]), "out", kind)
		}
		for _, r := range gossip.DropReasons {
			counter(c.gossipDropped, float64(gs.Dropped[r]), r)
		}
		for v, n := range gs.UnknownVersions {
			counter(c.unknownVersion, float64(n), v)
		}
		for o, n := range gs.BadSignatures {
			counter(c.badSignatures, float64(n), o)
		}
		counter(c.sigs, float64(gs.Signed), "sign")
		counter(c.sigs, float64(gs.Verified), "verify")
		gauge(c.queue, float64(a.gossip.QueuedBroadcasts()))
	}

	np, no, rev, src := a.policies.counts()
	gauge(c.policies, float64(np))
	gauge(c.overrides, float64(no))
	gauge(c.revision, float64(rev))
	for i, name := range policySourceNames {
		gauge(c.source, b2f(policySource(i) == src), name)
	}

	for _, dep := range a.eng.Dependencies() {
		snap := a.eng.Snapshot(dep)
		ft, ok := a.eng.Fleet(dep)
		if snap == nil || !ok {
			continue
		}
		if cum, ok := a.eng.Cumulative(dep); ok {
			lv, fv := countValues(cum.Node), countValues(cum.Fleet)
			for i, k := range countKinds {
				counter(c.localCalls, lv[i], dep, k)
				counter(c.fleetCalls, fv[i], dep, k)
			}
		}
		gauge(c.fleetNodes, float64(ft.FleetNodes), dep)
		for _, s := range []sharedstate.BreakerState{sharedstate.Closed, sharedstate.Open, sharedstate.HalfOpen} {
			gauge(c.state, b2f(snap.State == s), dep, s.LabelValue())
		}
		gauge(c.localOpen, b2f(snap.LocalOpen()), dep)
		if snap.Override != sharedstate.OverrideNone {
			gauge(c.forced, 1, dep, snap.Override.LabelValue())
		}
		gauge(c.generation, float64(snap.Generation), dep)
		gauge(c.budget, ft.RetryBudget, dep)
		used := 0.0
		if ft.RetryBudget > 0 {
			used = float64(ft.Evaluated.Retries) / ft.RetryBudget
		}
		gauge(c.budgetUsed, used, dep)
		gauge(c.permit, b2f(snap.ProbePermit), dep)
		if sh, ok := a.eng.Shape(dep); ok {
			gauge(c.throttle, sh.ThrottleProbability, dep)
			gauge(c.concurrencyLimit, float64(sh.Share), dep)
			gauge(c.inFlight, float64(sh.NodeInFlight), dep, "node")
			gauge(c.inFlight, float64(sh.InFlight), dep, "fleet")
		}
	}
}
