package clientlib

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is the time source of a Client: attempt deadlines, backoff sleeps,
// slow-call measurement, Fusebox-Timeout-Ms and the local breaker all read
// it, so tests move time instead of sleeping. (The session with the agent —
// flush interval, reconnect backoff, the AgentWait bound — runs on real time:
// it is plumbing, not a decision.)
//
// Implementations must be safe for concurrent use. SystemClock is the real
// one; ManualClock is for tests.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
	// WithTimeout is context.WithTimeout on this clock: the returned
	// context is done d from now as this clock tells it (its Err is then
	// context.DeadlineExceeded), or when parent is done.
	WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

// Timer is a one-shot timer of a Clock.
type Timer interface {
	// C delivers the time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did so.
	Stop() bool
}

// SystemClock is the real clock: time.Now, time.NewTimer, context.WithTimeout.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

// WithTimeout is context.WithTimeout.
func (SystemClock) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, d)
}

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time { return t.t.C }
func (t sysTimer) Stop() bool          { return t.t.Stop() }

// ManualClock is a Clock that moves only when Advance or Set says so. Timers
// and deadline contexts fire, in deadline order, when the clock reaches them.
// It is meant for tests (of this package and of others that drive clientlib)
// and is safe for concurrent use. It also satisfies sharedstate.Clock.
//
// Deadlines it puts in contexts are absolute times that other libraries may
// read against the real clock (gRPC turns ctx.Deadline() into grpc-timeout):
// start it at time.Now() when calls leave the process.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	pending []*manualTimer
	seq     uint64
	changed chan struct{} // closed and replaced whenever pending changes
}

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d, firing every timer and deadline it
// passes, and returns the new time.
func (c *ManualClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	t := c.now.Add(d)
	c.mu.Unlock()
	c.Set(t)
	return t
}

// Set moves the clock to t (never backwards), firing what it passes.
func (c *ManualClock) Set(t time.Time) {
	for {
		c.mu.Lock()
		if len(c.pending) == 0 || c.pending[0].when.After(t) {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return
		}
		mt := c.pending[0]
		c.pending = c.pending[1:]
		if mt.when.After(c.now) {
			c.now = mt.when
		}
		now := c.now
		c.notifyLocked()
		c.mu.Unlock()
		mt.fire(now) // outside the lock: it may cancel contexts
	}
}

// Pending returns how many timers and deadline contexts wait on the clock.
func (c *ManualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Next returns the earliest pending deadline, if any.
func (c *ManualClock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return time.Time{}, false
	}
	return c.pending[0].when, true
}

// BlockUntil waits until at least n timers or deadline contexts are pending,
// or ctx is done.
func (c *ManualClock) BlockUntil(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		ok := len(c.pending) >= n
		ch := c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// NewTimer returns a timer that fires when the clock reaches now+d.
func (c *ManualClock) NewTimer(d time.Duration) Timer {
	mt := &manualTimer{clock: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	mt.when = c.now.Add(d)
	if d <= 0 {
		now := c.now
		c.mu.Unlock()
		mt.ch <- now
		return mt
	}
	c.addLocked(mt)
	c.mu.Unlock()
	return mt
}

// WithTimeout is WithDeadline(parent, Now()+d).
func (c *ManualClock) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return c.WithDeadline(parent, c.Now().Add(d))
}

// WithDeadline returns a context done when the clock reaches d (Err
// context.DeadlineExceeded) or when parent is done (parent's Err).
func (c *ManualClock) WithDeadline(parent context.Context, d time.Time) (context.Context, context.CancelFunc) {
	if cur, ok := parent.Deadline(); ok && !cur.After(d) {
		return context.WithCancel(parent)
	}
	mc := &manualCtx{parent: parent, deadline: d, done: make(chan struct{})}
	mt := &manualTimer{clock: c, when: d, f: func() { mc.cancel(context.DeadlineExceeded) }}
	mc.timer = mt
	// AfterFunc runs its function in a goroutine of its own, never here, so
	// holding mc.mu orders the assignment before any cancel reads it.
	mc.mu.Lock()
	mc.stopParent = context.AfterFunc(parent, func() { mc.cancel(parent.Err()) })
	mc.mu.Unlock()
	c.mu.Lock()
	expired := !d.After(c.now)
	if !expired {
		c.addLocked(mt)
	}
	c.mu.Unlock()
	if expired {
		mc.cancel(context.DeadlineExceeded)
	}
	return mc, func() { mc.cancel(context.Canceled) }
}

func (c *ManualClock) addLocked(mt *manualTimer) {
	c.seq++
	mt.seq = c.seq
	i := sort.Search(len(c.pending), func(i int) bool {
		p := c.pending[i]
		return p.when.After(mt.when) || (p.when.Equal(mt.when) && p.seq > mt.seq)
	})
	c.pending = append(c.pending, nil)
	copy(c.pending[i+1:], c.pending[i:])
	c.pending[i] = mt
	c.notifyLocked()
}

func (c *ManualClock) removeLocked(mt *manualTimer) bool {
	for i, p := range c.pending {
		if p == mt {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			c.notifyLocked()
			return true
		}
	}
	return false
}

func (c *ManualClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type manualTimer struct {
	clock *ManualClock
	when  time.Time
	seq   uint64
	ch    chan time.Time // for timers
	f     func()         // for deadline contexts
}

func (t *manualTimer) fire(now time.Time) {
	if t.f != nil {
		t.f()
		return
	}
	select {
	case t.ch <- now:
	default:
	}
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

func (t *manualTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.clock.removeLocked(t)
}

// manualCtx is a deadline context driven by a ManualClock.
type manualCtx struct {
	parent     context.Context
	deadline   time.Time
	timer      *manualTimer
	stopParent func() bool

	mu   sync.Mutex
	done chan struct{}
	err  error
}

func (c *manualCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *manualCtx) Done() <-chan struct{}       { return c.done }
func (c *manualCtx) Value(key any) any           { return c.parent.Value(key) }

func (c *manualCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *manualCtx) cancel(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	stop := c.stopParent
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	c.timer.Stop()
}

func (c *manualCtx) String() string { return "clientlib.ManualClock.WithDeadline" }
