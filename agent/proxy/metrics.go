package proxy

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// MetricDoc describes one metric of the proxy.
type MetricDoc struct {
	Name, Type, Help string
	Labels           []string
}

const ns = "fusebox_agent_proxy"

// Results of a request (the result label of requests_total).
const (
	resultUpstream  = iota // the upstream answered (any status), or the tunnel opened
	resultRejected         // Fusebox refused it before any attempt
	resultError            // no answer: the proxy answered 502 or 504
	resultInvalid          // bad input: a 4xx from the proxy
	resultForbidden        // the allow-list or the agent's own listeners
	resultCanceled         // the client went away
	numResults
)

var resultNames = [numResults]string{"upstream", "rejected", "error", "invalid", "forbidden", "canceled"}

// rejectReasons are the values of Fusebox-Rejected (the reason label of
// rejected_total, dashes as underscores).
var rejectReasons = []string{"open", "forced-open", "half-open-no-permit", "throttled", "ramp", "concurrency-limit",
	"budget-exhausted"}

// invalidReasons are the values of Fusebox-Error for requests the proxy
// refuses for what they are (the reason label of invalid_requests_total).
var invalidReasons = []string{"malformed-uri", "bad-upstream", "missing-upstream", "invalid-dependency",
	"dependency-not-allowed", "headers-too-large", "bad-timeout", "bad-body", "upgrade-unsupported", "not-allowed", "own-listener"}

// metrics are the proxy's collectors: children of the vectors a request
// touches are looked up once, so counting costs an atomic add.
type metrics struct {
	requests    [numForms][numResults]prometheus.Counter
	attempts    [3]prometheus.Counter // by sharedstate.AttemptKind
	rejected    *prometheus.CounterVec
	invalid     *prometheus.CounterVec
	unbuffered  prometheus.Counter
	buffersFull prometheus.Counter
	stalled     prometheus.Counter
	untracked   prometheus.Counter
	connsRef    [numRefusals]prometheus.Counter
	all         []prometheus.Collector
	docs        []MetricDoc
}

// MetricDocs lists every metric of the proxy (on the agent's /metrics when
// the proxy is on), in the order of the code.
func MetricDocs() []MetricDoc { return newMetrics(&Proxy{}).docs }

func newMetrics(p *Proxy) *metrics {
	m := &metrics{}
	add := func(c prometheus.Collector, typ, name, help string, labels ...string) {
		m.all = append(m.all, c)
		m.docs = append(m.docs, MetricDoc{Name: ns + "_" + name, Type: typ, Help: help, Labels: labels})
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
		add(v, "counter", name, help, labels...)
		return v
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help})
		add(c, "counter", name, help)
		return c
	}
	gauge := func(name, help string, f func() float64) {
		add(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, f), "gauge", name, help)
	}

	reqs := counterVec("requests_total",
		"Requests the proxy handled, by form (forward: absolute URI as HTTP_PROXY; reverse: Fusebox-Upstream or Fusebox-Dependency; connect: CONNECT tunnels) and result (upstream: the upstream answered or the tunnel opened; rejected: refused by Fusebox; error: no answer, 502/504; invalid: bad input, 4xx; forbidden: allow-list or the agent's own listeners; canceled: the client went away).",
		"form", "result")
	for f := range numForms {
		for r := range numResults {
			m.requests[f][r] = reqs.WithLabelValues(f.String(), resultNames[r])
		}
	}
	att := counterVec("attempts_total",
		"Attempts sent upstream, by kind (first_attempt, retry, probe).", "kind")
	for k := range m.attempts {
		m.attempts[k] = att.WithLabelValues(label(sharedstate.AttemptKind(k).String()))
	}
	m.rejected = counterVec("rejected_total",
		"Attempts Fusebox refused, by reason (open, forced_open, half_open_no_permit, throttled, ramp, concurrency_limit, budget_exhausted: a retry).",
		"reason")
	for _, r := range rejectReasons {
		m.rejected.WithLabelValues(label(r)) // exposed at 0 before the first
	}
	m.invalid = counterVec("invalid_requests_total",
		"Requests answered with a 4xx or 5xx naming what was wrong before any decision, by reason (malformed_uri, bad_upstream, missing_upstream, invalid_dependency, dependency_not_allowed: a Fusebox-Dependency that is not the upstream's name, headers_too_large, bad_timeout, bad_body, upgrade_unsupported; not_allowed and own_listener: refused as an open relay).",
		"reason")
	for _, r := range invalidReasons {
		m.invalid.WithLabelValues(label(r))
	}
	m.unbuffered = counter("unbuffered_bodies_total",
		"Requests that could have been retried but whose body was not kept: larger than the buffer limit (Fusebox-Not-Retried: body-too-large) or arriving while all buffered bodies held the budget (buffers-full); each was sent to a single attempt.")
	m.buffersFull = counter("body_buffers_full_total",
		"Request bodies streamed to a single attempt because the buffered bodies held the whole budget (Fusebox-Not-Retried: buffers-full).")
	m.stalled = counter("body_timeouts_total",
		"Requests whose body did not arrive within the body timeout: the client's connection was closed without an answer.")
	m.untracked = counter("untracked_requests_total",
		"Requests forwarded untracked because the proxy's table of dependencies was full (Fusebox-Untracked: too-many-dependencies): one attempt, no breaker, nothing counted.")
	refused := counterVec("connections_refused_total",
		"Client connections refused (answered 503 and closed), by reason (max_conns: the proxy's connection limit; max_conns_per_client: the limit of one client address).",
		"reason")
	for r := range m.connsRef {
		m.connsRef[r] = refused.WithLabelValues(refusalNames[r])
	}
	gauge("connections", "Client connections open.", func() float64 {
		if p.ln == nil {
			return 0
		}
		return float64(p.ln.open.Load())
	})
	gauge("tunnels", "CONNECT tunnels open.", func() float64 { return float64(p.tunnelCount.Load()) })
	gauge("in_flight", "Requests being proxied (tunnels aside).", func() float64 { return float64(p.inFlight.Load()) })
	gauge("dependencies", "Dependencies in the proxy's table.", func() float64 { return float64(p.deps.n.Load()) })
	gauge("body_buffer_bytes", "Bytes the buffered request bodies hold (against the budget).", func() float64 { return float64(p.bodyBytes.Load()) })
	return m
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range m.all {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("proxy: metrics: %w", err)
		}
	}
	return nil
}

func label(reason string) string { return strings.ReplaceAll(reason, "-", "_") }
