package clientlib

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are read from the client's own counters at scrape time: the call
// path never touches a Prometheus object, and two clients in one process
// share nothing.
type metrics struct {
	c *Client

	sessions        atomic.Uint64
	sessionFailures atomic.Uint64
	agentRefusals   atomic.Uint64
	untracked       atomic.Uint64    // calls made untracked (past MaxDependencies)
	fallbacks       [3]atomic.Uint64 // acquire_retry, acquire_probe, check

	attempts, outcomes, slow, rejected, state    *prometheus.Desc
	dependencies, untrackedCalls                 *prometheus.Desc
	connected, sessionsDesc, sessionFailuresDesc *prometheus.Desc
	fallbacksDesc, agentRefusalsDesc, dropped    *prometheus.Desc
	shadowThrottled, inFlight, concurrencyLimit  *prometheus.Desc
}

var fallbackCalls = [3]string{"acquire_retry", "acquire_probe", "check"}

func newMetrics(c *Client) *metrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("fusebox_client_"+name, help, labels, nil)
	}
	return &metrics{
		c:            c,
		attempts:     d("attempts_total", "Attempts made, by dependency and kind (first attempts include probes).", "dependency", "kind"),
		outcomes:     d("outcomes_total", "Finished attempts by dependency and outcome as counted by the breaker (success or failure).", "dependency", "outcome"),
		slow:         d("slow_calls_total", "Attempts at least as slow as the policy's slowCallDuration, timeouts included.", "dependency"),
		rejected:     d("rejected_total", "Attempts refused by the breaker or the retry budget.", "dependency"),
		state:        d("breaker_state", "1 for the breaker state this client currently decides with (forced overrides included), 0 for the others.", "dependency", "state"),
		dependencies: d("dependencies", "Dependencies this client tracks."),
		untrackedCalls: d("untracked_calls_total",
			"Calls made untracked because their dependency was new past MaxDependencies: one attempt each, no breaker, nothing reported."),
		connected:           d("agent_connected", "1 while a session with the local agent is up, 0 while the local fallback decides."),
		sessionsDesc:        d("agent_sessions_total", "Sessions established with the local agent."),
		sessionFailuresDesc: d("agent_session_failures_total", "Attempts to open a session with the agent that failed, and sessions that ended (each followed by a reconnect)."),
		fallbacksDesc: d("agent_fallbacks_total",
			"Synchronous questions to the agent that failed or took longer than AgentWait and were decided locally.", "call"),
		agentRefusalsDesc: d("agent_refused_dependencies_total", "Dependency names the agent refused (invalid or past its cap)."),
		dropped:           d("events_dropped_total", "State-change and agent events dropped because the callback queue was full."),
		shadowThrottled: d("shadow_throttled_total",
			"First attempts adaptive throttling would have refused, and let through because the policy is in shadow mode.", "dependency"),
		inFlight:         d("in_flight", "Calls holding a slot of this process's concurrency share (0 while the policy sets no limit).", "dependency"),
		concurrencyLimit: d("concurrency_limit", "This process's share of the dependency's fleet-wide concurrency limit (0: no limit).", "dependency"),
	}
}

func (m *metrics) fallback(call string) {
	for i, n := range fallbackCalls {
		if n == call {
			m.fallbacks[i].Add(1)
		}
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	if err := r.Register(m); err != nil {
		if _, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			return errors.New("clientlib: metrics already registered (one Client per Registerer)")
		}
		return err
	}
	return nil
}

func (m *metrics) unregister(r prometheus.Registerer) { r.Unregister(m) }

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.attempts, m.outcomes, m.slow, m.rejected, m.state,
		m.dependencies, m.untrackedCalls, m.connected, m.sessionsDesc, m.sessionFailuresDesc,
		m.fallbacksDesc, m.agentRefusalsDesc, m.dropped, m.shadowThrottled, m.inFlight, m.concurrencyLimit} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	n := 0
	m.c.each(func(st *depState) {
		n++
		t := st.sum()
		counter(m.attempts, t.first+t.probesAgent+t.probesLocal, st.name, "first")
		counter(m.attempts, t.retriesAgent+t.retriesLocal, st.name, "retry")
		counter(m.outcomes, t.success, st.name, "success")
		counter(m.outcomes, t.failure, st.name, "failure")
		counter(m.slow, t.slow, st.name)
		counter(m.rejected, t.rejected+t.rejectedAgent+t.rejectedLocal, st.name)
		counter(m.shadowThrottled, st.rare.shadowThrottled.Load(), st.name)
		dec := st.dec.Load()
		gauge(m.inFlight, float64(st.slots.inFlight()), st.name)
		gauge(m.concurrencyLimit, float64(dec.limit), st.name)
		s := dec.status(st.name)
		cur := Closed.LabelValue()
		switch {
		case s.Override != OverrideNone:
			cur = s.Override.LabelValue()
		case s.State == Open || (s.State == Closed && s.LocalState == Open):
			cur = Open.LabelValue()
		case s.State == HalfOpen || (s.State == Closed && s.LocalState == HalfOpen):
			cur = HalfOpen.LabelValue()
		}
		for _, name := range [...]string{Closed.LabelValue(), Open.LabelValue(), HalfOpen.LabelValue(),
			ForcedOpen.LabelValue(), ForcedClosed.LabelValue()} {
			v := 0.0
			if name == cur {
				v = 1
			}
			gauge(m.state, v, st.name, name)
		}
	})
	gauge(m.dependencies, float64(n))
	counter(m.untrackedCalls, m.untracked.Load())
	conn := 0.0
	if m.c.fleet.up() {
		conn = 1
	}
	gauge(m.connected, conn)
	counter(m.sessionsDesc, m.sessions.Load())
	counter(m.sessionFailuresDesc, m.sessionFailures.Load())
	for i, call := range fallbackCalls {
		counter(m.fallbacksDesc, m.fallbacks[i].Load(), call)
	}
	counter(m.agentRefusalsDesc, m.agentRefusals.Load())
	counter(m.dropped, m.c.eventsDropped.Load())
}
