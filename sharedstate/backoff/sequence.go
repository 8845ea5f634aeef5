package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff is the wait of a loop that tries again until it succeeds (a
// reconnect, a join, a watch): each Next returns the wait before the next
// try, Policy.Wait for n = 0, 1, 2, … (its previous wait carried for
// Decorrelated), and Reset starts over after a success. It is not safe for
// concurrent use: the loop that waits owns it.
type Backoff struct {
	p      Policy
	random func() uint64
	n      int           // the next retry's number
	prev   time.Duration // the last wait, for Decorrelated
}

// New returns a Backoff over p. random returns 64 uniformly random bits for
// the jitter (optional: nil is math/rand/v2's Uint64); it is not called
// when p.Jitter is None.
func New(p Policy, random func() uint64) *Backoff {
	if random == nil {
		random = rand.Uint64
	}
	return &Backoff{p: p, random: random}
}

// Next returns the wait before the next try and counts it.
func (b *Backoff) Next() time.Duration {
	u := 0.0
	if b.p.Jitter != None {
		u = Uniform(b.random())
	}
	w := b.p.Wait(b.n, b.prev, u)
	b.prev = w
	if b.n < 64 { // the ceiling stops growing long before: no overflow
		b.n++
	}
	return w
}

// Reset starts over: the next wait is the first one again.
func (b *Backoff) Reset() { b.n, b.prev = 0, 0 }
