package sharedstate

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// WindowBuckets is the number of buckets in every sliding window.
const WindowBuckets = 10

// Counts are the totals a window keeps, and what NodeWindow rows carry.
type Counts struct {
	FirstAttempts uint64 `json:"firstAttempts"`
	Retries       uint64 `json:"retries"`
	Successes     uint64 `json:"successes"`
	Failures      uint64 `json:"failures"`
	SlowCalls     uint64 `json:"slowCalls"`
	Rejected      uint64 `json:"rejected"`
}

// Requests is what the breaker's rates are taken over: successes + failures
// (saturating at MaxCount).
func (c Counts) Requests() uint64 { return satAdd(c.Successes, c.Failures) }

// FailureRate is failures / requests (0 without requests), in [0,1].
func (c Counts) FailureRate() float64 { return ratio(c.Failures, c.Requests()) }

// SlowCallRate is slowCalls / requests (0 without requests), in [0,1]: a
// row claiming more slow calls than requests counts as all slow.
func (c Counts) SlowCallRate() float64 { return ratio(c.SlowCalls, c.Requests()) }

// IsZero reports whether every count is zero.
func (c Counts) IsZero() bool { return c == Counts{} }

// Plus returns the field-by-field sum of c and o, each saturating at
// MaxCount (numbers from other nodes never wrap a sum).
func (c Counts) Plus(o Counts) Counts {
	c.add(&o)
	return c
}

// add adds o to c in place, like Plus.
func (c *Counts) add(o *Counts) {
	c.FirstAttempts = satAdd(c.FirstAttempts, o.FirstAttempts)
	c.Retries = satAdd(c.Retries, o.Retries)
	c.Successes = satAdd(c.Successes, o.Successes)
	c.Failures = satAdd(c.Failures, o.Failures)
	c.SlowCalls = satAdd(c.SlowCalls, o.SlowCalls)
	c.Rejected = satAdd(c.Rejected, o.Rejected)
}

// ratio is a/b in [0,1] (0 when b is 0).
func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	if a >= b {
		return 1
	}
	return float64(a) / float64(b)
}

// Indexes of the counters in a bucket.
const (
	cFirst = iota
	cRetries
	cSuccesses
	cFailures
	cSlow
	cRejected
	numCounters
)

type bucket struct {
	epoch atomic.Int64 // bucket start / width; which slice of time the counters hold
	c     [numCounters]atomic.Uint64
}

// windowStripes is how many copies of its buckets a Window keeps, so that
// goroutines recording at the same time on different cores mostly write to
// different cache lines. Totals add the stripes up.
const windowStripes = 4

type stripe struct {
	b [WindowBuckets]bucket
	_ [64]byte // keeps the next stripe's first bucket off this one's last cache line
}

// Window is a time-bucketed sliding window of Counts: WindowBuckets buckets of
// length/WindowBuckets each. Its totals cover the current bucket and the
// WindowBuckets-1 before it, so between 90% and 100% of length. Adding is
// lock-free and allocation-free (atomic adds; a mutex is taken only by the
// first add of each new bucket, to clear it). Safe for concurrent use.
type Window struct {
	width int64 // nanoseconds per bucket
	mu    sync.Mutex
	s     [windowStripes]stripe
	// newest is the latest epoch any bucket was cleared for (set under
	// mu): a window whose newest has left it holds nothing, and totals
	// returns without reading a bucket (most dependencies an agent tracks
	// have no traffic of its own).
	newest atomic.Int64
	// The cumulative counts (cumulative.go): what reused buckets held
	// (guarded by mu), what the windows before prev held, and the window
	// this one replaced.
	retired [numCounters]uint64
	base    [numCounters]uint64
	prev    *Window
}

// stripeHint picks the calling goroutine's stripe from the address of its
// stack (the address is only hashed, never dereferenced): a goroutine keeps
// to one stripe and goroutines spread over the stripes.
func stripeHint() int {
	var marker byte
	return int(mix64(uint64(uintptr(unsafe.Pointer(&marker)))>>13) % windowStripes)
}

// NewWindow returns an empty window of the given length (at least
// WindowBuckets nanoseconds).
func NewWindow(length time.Duration) *Window {
	return &Window{width: max(1, int64(length)/WindowBuckets)}
}

// add adds c to the bucket's counters, each saturating at MaxCount.
func (b *bucket) add(c Counts) {
	addSat(&b.c[cFirst], c.FirstAttempts)
	addSat(&b.c[cRetries], c.Retries)
	addSat(&b.c[cSuccesses], c.Successes)
	addSat(&b.c[cFailures], c.Failures)
	addSat(&b.c[cSlow], c.SlowCalls)
	addSat(&b.c[cRejected], c.Rejected)
}

// addSat adds v to c, saturating at MaxCount: one atomic add, and a
// compare-and-swap only when the sum went past MaxCount (or wrapped).
// Record's +1 needs no check: from at most MaxCount it would take 2^62 of
// them to wrap.
func addSat(c *atomic.Uint64, v uint64) {
	if v == 0 {
		return
	}
	if n := c.Add(v); n >= v && n <= MaxCount {
		return
	}
	for {
		old := c.Load()
		if old == MaxCount || c.CompareAndSwap(old, MaxCount) {
			return
		}
	}
}

// slot returns the bucket for time now (Unix nanoseconds), clearing it first
// if it still holds an older slice of time. A bucket holding a newer slice
// (now read from a clock that lags) is used as it is.
func (w *Window) slot(now int64) *bucket {
	ep := now / w.width
	b := &w.s[stripeHint()].b[ep%WindowBuckets]
	if b.epoch.Load() < ep {
		w.mu.Lock()
		if b.epoch.Load() < ep {
			for i := range b.c {
				w.retired[i] = satAdd(w.retired[i], b.c[i].Swap(0)) // an add racing the reuse lands on one side
			}
			b.epoch.Store(ep) // published after clearing: adders that see ep add to zeroed counters
			if w.newest.Load() < ep {
				w.newest.Store(ep)
			}
		}
		w.mu.Unlock()
	}
	return b
}

func (w *Window) totals(now int64) Counts {
	ep := now / w.width
	if w.newest.Load() <= ep-WindowBuckets {
		return Counts{}
	}
	var s [numCounters]uint64
	for k := range w.s {
		for i := range w.s[k].b {
			b := &w.s[k].b[i]
			if e := b.epoch.Load(); e > ep-WindowBuckets && e <= ep {
				for j := range s {
					s[j] = satAdd(s[j], b.c[j].Load())
				}
			}
		}
	}
	return countsOf(s)
}

// NodeWindow is the row a node gossips for one dependency: its window totals.
// Each node is the only writer of its rows; receivers keep the row with the
// highest Seq (last writer wins per writer) and drop it 2×window after they
// received it, or when the node is reported dead.
type NodeWindow struct {
	// Cumulative are the node's counts since it began counting the
	// dependency, for sums that never go back (cumulative.go).
	Cumulative Cumulative `json:"cumulative"`

	Node       string `json:"node"`
	Zone       string `json:"zone,omitempty"`
	Dependency string `json:"dependency"`
	Seq        uint64 `json:"seq"`
	// Generation is the generation of the breaker record (of the node's
	// scope) the counts were collected under. A node starts a fresh window
	// when it learns that the breaker closed under a new generation, and the
	// trip rule counts only rows of the current generation or newer, so the
	// failures that opened a breaker cannot re-open it once it has closed.
	Generation uint64 `json:"generation"`
	// LocalOpen reports that the node's own breaker for the dependency is
	// open or half-open (its own traffic fails while the fleet's does not).
	LocalOpen bool `json:"localOpen,omitempty"`
	// InFlight is the node's calls in flight to the dependency when it
	// sent the row (a gauge, not a window total).
	InFlight uint64 `json:"inFlight,omitempty"`
	// ProbeSuccesses and ProbeFailures are the node's half-open probes
	// under Generation that succeeded, and that failed while other nodes'
	// probes succeeded (a failed probe otherwise reopens the breaker under
	// a new generation): the fleet pools them (see Engine.ProbeOutcome).
	ProbeSuccesses uint32 `json:"probeSuccesses,omitempty"`
	ProbeFailures  uint32 `json:"probeFailures,omitempty"`
	Counts
	// Recent are the node's counts over the freshest suffixes of its
	// window, for the fast path of the trip rule.
	Recent Recent `json:"recent"`
}

// Validate checks a row received from elsewhere.
func (r NodeWindow) Validate() error {
	if err := r.validateShape(); err != nil {
		return err
	}
	return ValidateDependencyName(r.Dependency)
}

// validateShape is Validate without the dependency's name.
func (r *NodeWindow) validateShape() error {
	if r.Node == "" || len(r.Node) > MaxNodeNameLen || len(r.Zone) > MaxNodeNameLen || !r.Recent.valid() ||
		!r.Cumulative.valid() {
		return ErrInvalidRow
	}
	return nil
}
