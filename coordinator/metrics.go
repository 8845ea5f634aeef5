package coordinator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/coordinator/internal/fleet"
	"github.com/fusebox-dev/fusebox/coordinator/internal/history"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// MetricNames lists every metric the coordinator exports, so coordinator/README.md's
// list can be checked against the code (a test compares them with what
// /metrics serves).
var MetricNames = []string{
	"fusebox_coordinator_admin_requests_total",
	"fusebox_coordinator_admin_request_duration_seconds",
	"fusebox_coordinator_auth_failures_total",
	"fusebox_coordinator_http_requests_total",
	"fusebox_coordinator_events_total",
	"fusebox_coordinator_sse_events_dropped_total",
	"fusebox_coordinator_sse_clients",
	"fusebox_coordinator_event_streams_refused_total",
	"fusebox_coordinator_etcd_invalid_values_total",
	"fusebox_coordinator_etcd_watch_restarts_total",
	"fusebox_coordinator_etcd_rewinds_total",
	"fusebox_coordinator_policies",
	"fusebox_coordinator_overrides",
	"fusebox_coordinator_gossip_refused_total",
	"fusebox_coordinator_gossip_dropped_total",
	"fusebox_coordinator_gossip_messages_received_total",
	"fusebox_coordinator_gossip_received_bytes_total",
	"fusebox_coordinator_dependencies",
	"fusebox_coordinator_rows",
	"fusebox_coordinator_members",
	"fusebox_coordinator_breakers",
	"fusebox_coordinator_history_dropped_total",
	"fusebox_coordinator_history_dependencies",
	"fusebox_coordinator_history_bytes",
	"fusebox_coordinator_simulations_total",
	"fusebox_coordinator_simulation_duration_seconds",
}

// metrics are the coordinator's own series, registered on its registry.
type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	authFailures *prometheus.CounterVec
	httpRequests *prometheus.CounterVec
	events       *prometheus.CounterVec
	sseDropped   prometheus.Counter
	// streamsRefused counts event streams refused past a limit, by limit
	// (total, identity).
	streamsRefused *prometheus.CounterVec
	invalidValues  *prometheus.CounterVec
	watchRestarts  prometheus.Counter
	rewinds        *prometheus.CounterVec
	gossipRefused  *prometheus.CounterVec
	// What-if: the history's drops and the simulations.
	historyDropped *prometheus.CounterVec
	simulations    *prometheus.CounterVec
	simDuration    prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, c *Coordinator) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fusebox_coordinator_admin_requests_total",
			Help: "Admin API requests by method and gRPC status code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fusebox_coordinator_admin_request_duration_seconds",
			Help:    "Admin API request latency by method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fusebox_coordinator_auth_failures_total",
			Help: "Requests refused by authentication or authorization, by API (grpc, http) and reason (unauthenticated, permission_denied, token_in_url: a token in the URL's query, refused).",
		}, []string{"api", "reason"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fusebox_coordinator_http_requests_total",
			Help: "HTTP requests by handler and status code.",
		}, []string{"handler", "code"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fusebox_coordinator_events_total",
			Help: "Events published to /api/v1/events and Admin Watch subscribers, by type (transition, override, policy).",
		}, []string{"type"}),
		sseDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fusebox_coordinator_sse_events_dropped_total",
			Help: "Events not delivered to a subscriber too slow to read them: a server-sent-events client loses the event, an Admin Watch stream is ended (ResourceExhausted) and counts once.",
		}),
		streamsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fusebox_coordinator_event_streams_refused_total",
			Help: "Event streams (/api/v1/events, Admin Watch) refused past a limit, by limit (total: --max-event-streams; identity: --max-event-streams-per-identity).",
		}, []string{"limit"}),
		invalidValues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fusebox_coordinator_etcd_invalid_values_total",
			Help: "Invalid policies or overrides found in etcd and ignored (last good value kept), by kind.",
		}, []string{"kind"}),
		watchRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fusebox_coordinator_etcd_watch_restarts_total",
			Help: "Times the etcd watch of policies and overrides re-listed (compaction, lost connection, rewind).",
		}),
		rewinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fusebox_coordinator_etcd_rewinds_total",
			Help: "Times etcd was found not to hold the history the coordinator's watch followed (a snapshot restore, a wiped etcd, another cluster), which then listed policies and overrides again from scratch, by reason (new_cluster, revision_went_back, history_changed, compacted).",
		}, []string{"reason"}),
		gossipRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fusebox_coordinator_gossip_refused_total",
			Help: "Gossip rows and records the fleet view refused, by reason (invalid, too_many_deps, too_many_rows, not_an_agent, too_many_zones).",
		}, []string{"reason"}),
		historyDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fusebox_coordinator_history_dropped_total",
			Help: "Rows, records and histories the history did not keep, by reason (too_many_dependencies: a dependency left without one, --history-max-dependencies; evicted: a history that gave its place to a busier or pinned dependency; too_many_nodes; too_many_records: the oldest record made room; no_totals: a row without cumulative counts, from a node of 0.1.x).",
		}, []string{"reason"}),
		simulations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fusebox_coordinator_simulations_total",
			Help: "Policy simulations (SimulatePolicy, POST /api/v1/simulate) by result (ok, no_history, busy: refused while the most run at once, error).",
		}, []string{"result"}),
		simDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fusebox_coordinator_simulation_duration_seconds",
			Help:    "Time a policy simulation takes (two replays and their comparison).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
	}
	for _, r := range history.DropReasons {
		m.historyDropped.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "no_history", "busy", "error"} {
		m.simulations.WithLabelValues(r)
	}
	for _, l := range []string{streamLimitTotal, streamLimitIdentity} {
		m.streamsRefused.WithLabelValues(l)
	}
	for _, r := range []string{"unauthenticated", "permission_denied", "token_in_url"} {
		for _, api := range []string{"grpc", "http"} {
			m.authFailures.WithLabelValues(api, r)
		}
	}
	for _, r := range []string{fleet.RefusedInvalid, fleet.RefusedTooManyDeps, fleet.RefusedTooManyRows, fleet.RefusedNotAnAgent, fleet.RefusedTooManyZone} {
		m.gossipRefused.WithLabelValues(r)
	}
	for _, k := range []string{"policy", "override"} {
		m.invalidValues.WithLabelValues(k)
	}
	for _, r := range store.RewindReasons() {
		m.rewinds.WithLabelValues(string(r))
	}
	for _, col := range []prometheus.Collector{m.requests, m.duration, m.authFailures, m.httpRequests, m.events,
		m.sseDropped, m.streamsRefused, m.invalidValues, m.watchRestarts, m.rewinds, m.gossipRefused, &stateCollector{c: c},
		m.historyDropped, m.simulations, m.simDuration} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// stateCollector reports gauges read from the coordinator's parts at scrape
// time, and the gossip layer's cumulative counters.
type stateCollector struct {
	c *Coordinator
}

var (
	descSSEClients   = prometheus.NewDesc("fusebox_coordinator_sse_clients", "Connected event subscribers: /api/v1/events clients and Admin Watch streams.", nil, nil)
	descPolicies     = prometheus.NewDesc("fusebox_coordinator_policies", "Policies in the coordinator's etcd cache, the default included.", nil, nil)
	descOverrides    = prometheus.NewDesc("fusebox_coordinator_overrides", "Overrides in force, by state.", []string{"state"}, nil)
	descDeps         = prometheus.NewDesc("fusebox_coordinator_dependencies", "Dependencies the fleet view tracks from gossip.", nil, nil)
	descRows         = prometheus.NewDesc("fusebox_coordinator_rows", "NodeWindow rows the fleet view holds.", nil, nil)
	descMembers      = prometheus.NewDesc("fusebox_coordinator_members", "Gossip members the observer sees, by status.", []string{"status"}, nil)
	descBreakers     = prometheus.NewDesc("fusebox_coordinator_breakers", "Breaker records (one per dependency, one per zone for scope zone) by state (closed, open, half-open) as the observer derives it.", []string{"state"}, nil)
	descGossipDrop   = prometheus.NewDesc("fusebox_coordinator_gossip_dropped_total", "Gossip frames and items the observer dropped, by reason.", []string{"reason"}, nil)
	descGossipMsgs   = prometheus.NewDesc("fusebox_coordinator_gossip_messages_received_total", "Gossip messages received by the observer, by kind (message, push_pull).", []string{"kind"}, nil)
	descGossipBytesR = prometheus.NewDesc("fusebox_coordinator_gossip_received_bytes_total", "Gossip bytes received by the observer, by kind (message, push_pull).", []string{"kind"}, nil)
	descHistoryDeps  = prometheus.NewDesc("fusebox_coordinator_history_dependencies", "Dependencies the history keeps (at most --history-max-dependencies).", nil, nil)
	descHistoryBytes = prometheus.NewDesc("fusebox_coordinator_history_bytes", "Memory the history holds: slots, node trackers, records.", nil, nil)
)

func (s *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSSEClients, descPolicies, descOverrides, descDeps, descRows,
		descMembers, descBreakers, descGossipDrop, descGossipMsgs, descGossipBytesR, descHistoryDeps, descHistoryBytes} {
		ch <- d
	}
}

func (s *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c := s.c
	ch <- prometheus.MustNewConstMetric(descSSEClients, prometheus.GaugeValue, float64(c.broker.Subscribers()))
	policies, forced := c.cache.counts(c.clock.Now())
	ch <- prometheus.MustNewConstMetric(descPolicies, prometheus.GaugeValue, float64(policies))
	// This metric's label values are String's spelling ("forced-open"),
	// as they have always been; LabelValue's would rename the series.
	for _, st := range []string{sharedstate.ForcedOpen.String(), sharedstate.ForcedClosed.String()} {
		ch <- prometheus.MustNewConstMetric(descOverrides, prometheus.GaugeValue, float64(forced[st]), st)
	}
	st := c.view.Stats()
	ch <- prometheus.MustNewConstMetric(descDeps, prometheus.GaugeValue, float64(st.Dependencies))
	ch <- prometheus.MustNewConstMetric(descRows, prometheus.GaugeValue, float64(st.Rows))
	for status, n := range st.Members {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(n), status)
	}
	for state, n := range st.States {
		ch <- prometheus.MustNewConstMetric(descBreakers, prometheus.GaugeValue, float64(n), state)
	}
	hs := c.history.Stats()
	ch <- prometheus.MustNewConstMetric(descHistoryDeps, prometheus.GaugeValue, float64(hs.Dependencies))
	ch <- prometheus.MustNewConstMetric(descHistoryBytes, prometheus.GaugeValue, float64(hs.Bytes))
	var gs gossip.Stats
	if g := c.gossipNode(); g != nil {
		gs = g.Stats()
	}
	for _, r := range gossip.DropReasons {
		ch <- prometheus.MustNewConstMetric(descGossipDrop, prometheus.CounterValue, float64(gs.Dropped[r]), r)
	}
	for _, k := range gossip.Kinds {
		ch <- prometheus.MustNewConstMetric(descGossipMsgs, prometheus.CounterValue, float64(gs.MsgsIn[k]), k)
		ch <- prometheus.MustNewConstMetric(descGossipBytesR, prometheus.CounterValue, float64(gs.BytesIn[k]), k)
	}
}
