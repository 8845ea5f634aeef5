package sharedstate

import (
	"errors"
	"fmt"
	"time"
)

// PolicySchema is the only policy schema version this package reads and writes.
const PolicySchema = 1

// ErrInvalidPolicy is matched (errors.Is) by every error that refuses a
// policy: malformed JSON, unknown fields, and *ValidationError.
var ErrInvalidPolicy = errors.New("fusebox: invalid policy")

// Duration is a time.Duration that (un)marshals as a Go duration string
// ("500ms", "2m0s"). Numbers are refused.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText encodes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a Go duration such as \"500ms\" or \"2m\"", b)
	}
	*d = Duration(v)
	return nil
}

// Scope says whose traffic a dependency's breaker and retry budget pool.
type Scope string

const (
	ScopeFleet Scope = "fleet" // one breaker and budget for the whole fleet
	ScopeZone  Scope = "zone"  // one per zone (BreakerRecord.Zone names it)
	ScopeNode  Scope = "node"  // each node on its own, like a classic local breaker
)

// Mode says whether a dependency's breaker and budget reject calls.
type Mode string

const (
	ModeEnforce Mode = "enforce" // reject as decided
	ModeShadow  Mode = "shadow"  // compute and report everything, never reject
)

// Jitter names the backoff jitter clientlib applies between attempts.
type Jitter string

const (
	JitterFull         Jitter = "full"
	JitterEqual        Jitter = "equal"
	JitterDecorrelated Jitter = "decorrelated"
	JitterNone         Jitter = "none"
)

// Policy is one dependency's complete, effective policy (or the fleet default,
// with Dependency "_default"). Its JSON form is the one stored in etcd, and
// the struct is the one description of that document: its JSON tags name
// the fields, and a field tagged policy:"optional" (or in a section so
// tagged) may be left out of a complete policy (ParsePolicy), which then
// gets DefaultPolicy's value, so that documents written before the field
// existed stay valid. A field added later must be optional.
type Policy struct {
	Schema     int           `json:"schema" policy:"optional"`
	Dependency string        `json:"dependency"`
	Breaker    BreakerPolicy `json:"breaker"`
	Retry      RetryPolicy   `json:"retry"`
	// Throttle is fleet-wide adaptive throttling (off by default).
	Throttle ThrottlePolicy `json:"throttle" policy:"optional"`
	// Concurrency is the fleet-wide concurrency limit (off by default).
	Concurrency ConcurrencyPolicy `json:"concurrency" policy:"optional"`
}

// BreakerPolicy configures the breaker and its sliding window.
type BreakerPolicy struct {
	FailureRateThreshold  float64  `json:"failureRateThreshold"`
	SlowCallRateThreshold float64  `json:"slowCallRateThreshold"`
	SlowCallDuration      Duration `json:"slowCallDuration"`
	MinimumRequests       int      `json:"minimumRequests"`
	MinFailingNodes       int      `json:"minFailingNodes"`
	Window                Duration `json:"window"`
	OpenDuration          Duration `json:"openDuration"`
	MaxOpenDuration       Duration `json:"maxOpenDuration"`
	HalfOpenProbes        int      `json:"halfOpenProbes"`
	ProbeSuccessThreshold int      `json:"probeSuccessThreshold"`
	ProbeTimeout          Duration `json:"probeTimeout"`
	Scope                 Scope    `json:"scope"`
	Mode                  Mode     `json:"mode"`
	// Confidence is the level of the confidence bound the trip rule applies
	// to a rate before comparing it with its threshold: a window (or a
	// suffix of it) trips only when the lower bound of the Wilson score
	// interval of its rate is at or above the threshold. 0 is the classic
	// rule (the rate itself, and no fast path). See TripBound.
	Confidence float64 `json:"confidence" policy:"optional"`
	// FastPath also evaluates the freshest suffixes of the window (its last
	// 1, 2, 4, … 64 sub-buckets of window/100) and trips on the first one
	// that holds minimumRequests requests, failures from minFailingNodes
	// nodes and a bound at the threshold. Needs Confidence > 0.
	FastPath bool `json:"fastPath" policy:"optional"`
	// FleetMaxOpenDuration caps the doubling of the open duration of a
	// replicated breaker (scope fleet or zone; maxOpenDuration still caps
	// it too, and the first open after a trip lasts openDuration whatever
	// the cap): the fleet sends about one probe per half-open while the
	// dependency stays dead, so a doubling beyond a few seconds protects
	// nothing and only delays the return after the dependency recovers.
	// Scope node and the node-local breaker double up to maxOpenDuration,
	// as a per-instance breaker does. The default, 2s, equal to the default
	// openDuration, means no doubling.
	FleetMaxOpenDuration Duration `json:"fleetMaxOpenDuration" policy:"optional"`
	// RampDuration is the slow start after a breaker closes: for this long
	// the breaker admits first attempts with a probability that rises
	// linearly from RampStart to 1 (the rest are refused, ReasonRamp).
	// 0 turns the ramp off.
	RampDuration Duration `json:"rampDuration" policy:"optional"`
	// RampStart is the share of first attempts admitted when the ramp
	// begins, in (0,1].
	RampStart float64 `json:"rampStart" policy:"optional"`
}

// RetryPolicy configures retries: how many, how fast, and the budget.
type RetryPolicy struct {
	MaxAttempts       int           `json:"maxAttempts"`
	PerAttemptTimeout Duration      `json:"perAttemptTimeout"`
	Backoff           BackoffPolicy `json:"backoff"`
	Budget            BudgetPolicy  `json:"budget"`
	Hedge             HedgePolicy   `json:"hedge" policy:"optional"`
}

// BackoffPolicy is the wait between attempts: exponential from Base, capped at Max.
type BackoffPolicy struct {
	Base   Duration `json:"base"`
	Max    Duration `json:"max"`
	Jitter Jitter   `json:"jitter"`
}

// BudgetPolicy is the fleet retry budget: over the window, retries may be
// max(MinRetriesPerSecond × window, Ratio × first attempts).
type BudgetPolicy struct {
	Ratio               float64 `json:"ratio"`
	MinRetriesPerSecond float64 `json:"minRetriesPerSecond"`
}

// HedgePolicy is hedging: for idempotent calls only, after Delay without an
// answer another attempt starts (with the same idempotency key), up to
// MaxHedges of them; the first success wins and the others are cancelled.
// Every hedge takes a token from the fleet retry budget (no token, no hedge)
// and counts as a retry. MaxHedges 0 turns hedging off.
type HedgePolicy struct {
	Delay     Duration `json:"delay"`
	MaxHedges int      `json:"maxHedges"`
}

// Enabled reports whether the policy hedges at all.
func (h HedgePolicy) Enabled() bool { return h.MaxHedges > 0 && h.Delay > 0 }

// ThrottlePolicy is Google SRE client-side adaptive throttling on the
// fleet's (or the zone's, or for scope node the node's) window totals: while
// the breaker is closed, first attempts are refused with probability
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// where requests are the attempts the callers wanted to make in the window
// (made, or refused by Fusebox) and accepts the attempts the dependency
// answered (successes; an error the classifier does not count as a failure
// is a success). Nothing is refused while requests < MinRequests. In shadow
// mode the probability is computed and reported, and nothing is refused.
type ThrottlePolicy struct {
	Enabled     bool    `json:"enabled"`
	K           float64 `json:"k"`
	MinRequests int     `json:"minRequests"`
}

// ConcurrencyPolicy is one limit on the calls in flight to the dependency
// across the whole fleet. Each node's share is MaxInFlight × its share of
// the scope's first attempts over the window (an even split while nobody
// has traffic), at least 1; clientlib enforces its process's part of its
// node's share. 0 turns the limit off.
type ConcurrencyPolicy struct {
	MaxInFlight int `json:"maxInFlight"`
}

// DefaultPolicy returns the fleet default (Dependency "_default"), the
// policy sharedstate/DESIGN.md shows under "Policy" (TestDesignPolicyIsTheDefault).
func DefaultPolicy() Policy {
	return Policy{
		Schema:     PolicySchema,
		Dependency: DefaultPolicyName,
		Breaker: BreakerPolicy{
			FailureRateThreshold:  0.5,
			SlowCallRateThreshold: 1.0,
			SlowCallDuration:      Duration(2 * time.Second),
			MinimumRequests:       20,
			MinFailingNodes:       2,
			Window:                Duration(10 * time.Second),
			OpenDuration:          Duration(2 * time.Second),
			MaxOpenDuration:       Duration(2 * time.Minute),
			HalfOpenProbes:        3,
			ProbeSuccessThreshold: 3,
			ProbeTimeout:          Duration(5 * time.Second),
			Scope:                 ScopeFleet,
			Mode:                  ModeEnforce,
			Confidence:            0.95,
			FastPath:              true,
			FleetMaxOpenDuration:  Duration(defaultFleetMaxOpen),
			RampDuration:          Duration(defaultRampDuration),
			RampStart:             defaultRampStart,
		},
		Retry: RetryPolicy{
			MaxAttempts:       3,
			PerAttemptTimeout: Duration(500 * time.Millisecond),
			Backoff: BackoffPolicy{
				Base:   Duration(100 * time.Millisecond),
				Max:    Duration(5 * time.Second),
				Jitter: JitterFull,
			},
			Budget: BudgetPolicy{Ratio: 0.1, MinRetriesPerSecond: 10},
			Hedge:  HedgePolicy{Delay: 0, MaxHedges: 0},
		},
		Throttle:    ThrottlePolicy{Enabled: false, K: 2.0, MinRequests: 20},
		Concurrency: ConcurrencyPolicy{MaxInFlight: 0},
	}
}

// The defaults of the recovery settings, chosen with TestSimRecovery (the
// recovery table in sharedstate/README.md).
const (
	defaultFleetMaxOpen = 2 * time.Second
	defaultRampDuration = 500 * time.Millisecond
	defaultRampStart    = 0.1
)

// FleetOpenDurationFor is how long a replicated breaker (scope fleet or
// zone) that has opened openCount times in a row stays open before it turns
// half-open: OpenDurationFor(openCount) capped at fleetMaxOpenDuration, but
// never below openDuration (0 or a negative cap: no cap).
func (b BreakerPolicy) FleetOpenDurationFor(openCount uint32) time.Duration {
	d := b.OpenDurationFor(openCount)
	if c := max(b.FleetMaxOpenDuration.Std(), b.OpenDuration.Std()); b.FleetMaxOpenDuration > 0 && d > c {
		d = c
	}
	return d
}

// RampRefusal is the share of first attempts the ramp refuses elapsed after
// a close: 1 − (rampStart + (1 − rampStart) × elapsed / rampDuration) while
// elapsed is in [0, rampDuration), else 0.
func (b BreakerPolicy) RampRefusal(elapsed time.Duration) float64 {
	r := b.RampDuration.Std()
	if r <= 0 || elapsed < 0 || elapsed >= r {
		return 0
	}
	return (1 - b.RampStart) * (1 - float64(elapsed)/float64(r))
}

// OpenDurationFor is how long a breaker that has opened openCount times in a
// row stays open before it turns half-open: openDuration × 2^(openCount-1),
// capped at maxOpenDuration. openCount 0 is treated as 1.
func (b BreakerPolicy) OpenDurationFor(openCount uint32) time.Duration {
	d := b.OpenDuration.Std()
	max := b.MaxOpenDuration.Std()
	for i := uint32(1); i < openCount && d < max; i++ {
		d *= 2
	}
	if d > max && max > 0 {
		d = max
	}
	return d
}
