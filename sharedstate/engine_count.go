package sharedstate

import "fmt"

// Record counts one finished attempt (or one honoured rejection) of this
// node's callers. Counting rule: a FirstAttempt counts one first attempt plus
// its outcome; a Retry or a Probe counts only its outcome, because
// AcquireRetry and AcquireProbe counted the attempt when they admitted it;
// the Rejected outcome counts one rejection whatever the kind. See Outcome for
// slow calls. It allocates nothing once the dependency is known.
//
// Record does not feed the half-open logic: report a probe's result with
// ProbeResult as well.
func (e *Engine) Record(dep string, kind AttemptKind, o Outcome) error {
	if kind > Probe || o > Rejected {
		return fmt.Errorf("%w: attempt kind %d, outcome %d", ErrInvalidArgument, kind, o)
	}
	for {
		d, err := e.state(dep)
		if err != nil {
			return err
		}
		b := d.win.Load().slot(e.recordNanos())
		switch o {
		case Rejected:
			b.c[cRejected].Add(1)
		default:
			if kind == FirstAttempt {
				b.c[cFirst].Add(1)
			}
			switch o {
			case Success:
				b.c[cSuccesses].Add(1)
			case Failure:
				b.c[cFailures].Add(1)
			case Slow:
				b.c[cSuccesses].Add(1)
				b.c[cSlow].Add(1)
			case SlowFailure:
				b.c[cFailures].Add(1)
				b.c[cSlow].Add(1)
			}
		}
		// A dependency evicted while we counted lost the count with it:
		// count again in its successor (created by state).
		if !d.evicted.Load() {
			return nil
		}
	}
}

// AddCounts adds a client's aggregated count deltas to this node's window.
// The counting rule of Record applies: Retries must not include retries
// admitted by AcquireRetry, which counted them already. A delta that fails
// Counts.CheckDelta (a count above MaxDelta, more slow calls than requests)
// is refused whole with an error matching ErrInvalidDelta; counters
// saturate at MaxCount.
func (e *Engine) AddCounts(dep string, c Counts) error {
	if err := c.CheckDelta(); err != nil {
		return err
	}
	for {
		d, err := e.state(dep)
		if err != nil {
			return err
		}
		b := d.win.Load().slot(e.recordNanos())
		b.add(c)
		if !d.evicted.Load() {
			return nil
		}
	}
}
