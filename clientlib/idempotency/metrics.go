package idempotency

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// outcomes are the values of the outcome label of
// fusebox_idempotency_requests_total.
var outcomes = []string{"executed", "panicked", "released", "replayed", "in_progress", "mismatch",
	"invalid_key", "not_stored", "store_unavailable", "unkeyed", "too_large"}

type metrics struct {
	requests    *prometheus.CounterVec
	waiting     prometheus.Gauge
	storeErrors prometheus.Counter
	lost        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fusebox_idempotency_requests_total",
			Help: "Keyed requests by outcome: executed (answer stored, whatever its status), panicked (stored as 500/Internal), released (the handler called NothingRan: key freed), replayed, in_progress (409/Aborted after waiting), mismatch (422/InvalidArgument), invalid_key, not_stored (completed, body too large to replay), store_unavailable (fail closed), unkeyed (store down, fail open), too_large (request body)."},
			[]string{"outcome"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fusebox_idempotency_waiting_requests",
			Help: "Duplicates waiting for the first request with their key to finish."}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "fusebox_idempotency_store_errors_total",
			Help: "Store operations that failed (unreachable store, full memory store)."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "fusebox_idempotency_reservations_lost_total",
			Help: "Requests that finished after their reservation expired: their response was not stored."}),
	}
	for _, o := range outcomes {
		m.requests.WithLabelValues(o)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.waiting, m.storeErrors, m.lost} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("idempotency: registering metrics: %w", err)
			}
		}
	}
	return m, nil
}
