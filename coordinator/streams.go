package coordinator

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fusebox-dev/fusebox/coordinator/internal/events"
)

// Event streams (/api/v1/events and the Admin API's Watch) hold a
// goroutine, buffers, an event queue and a connection each for as long as
// their client keeps them open, so the broker caps them in all
// (--max-event-streams) and per identity (--max-event-streams-per-identity):
// the name of the caller's token, or "loopback" without a tokens file. A
// stream past a cap is refused at once, naming the cap; the streams open
// stay, and nothing else (the API's reads and writes) is refused.

// Values of the limit label of fusebox_coordinator_event_streams_refused_total.
const (
	streamLimitTotal    = "total"
	streamLimitIdentity = "identity"
)

// streamLimitOf maps a broker's limit scope to the metric's label value.
func streamLimitOf(scope string) string {
	if scope == events.ScopeKey {
		return streamLimitIdentity
	}
	return streamLimitTotal
}

// streamRefusal explains a stream refused past a cap: which flag, and what
// to do. It still matches events.ErrTooManySubscribers.
func streamRefusal(err error) error {
	var le *events.LimitError
	if !errors.As(err, &le) {
		return err
	}
	if le.Scope == events.ScopeKey {
		return fmt.Errorf("coordinator: event stream refused: identity %q already has %d open, the most --max-event-streams-per-identity allows "+
			"(close dashboards or watches it left open, or give each user a token of their own): %w", le.Key, le.Limit, err)
	}
	return fmt.Errorf("coordinator: event stream refused: %d are open, the most --max-event-streams allows: %w", le.Limit, err)
}

// streamRefusalCode is the HTTP status of a refused stream: 429 for one
// identity's cap (that caller should back off), 503 for the total (the
// coordinator is full; another one may not be).
func streamRefusalCode(err error) int {
	var le *events.LimitError
	if errors.As(err, &le) && le.Scope == events.ScopeKey {
		return http.StatusTooManyRequests
	}
	return http.StatusServiceUnavailable
}
