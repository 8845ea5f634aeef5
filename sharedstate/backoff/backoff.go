package backoff

import "time"

// Jitter selects how a wait is drawn under the exponential ceiling.
type Jitter uint8

const (
	// Full draws U[0, ceiling). It is the default: it spreads retries of
	// many clients the most.
	Full Jitter = iota
	// Equal draws ceiling/2 + U[0, ceiling/2).
	Equal
	// Decorrelated draws min(max, U[base, 3·previous)), previous starting at
	// base (the "decorrelated jitter" of the AWS architecture blog).
	Decorrelated
	// None waits exactly the ceiling.
	None
)

// String names the jitter as policies spell it.
func (j Jitter) String() string {
	switch j {
	case Full:
		return "full"
	case Equal:
		return "equal"
	case Decorrelated:
		return "decorrelated"
	case None:
		return "none"
	}
	return "unknown"
}

// Policy is the backoff part of a retry policy.
type Policy struct {
	Base   time.Duration
	Max    time.Duration
	Jitter Jitter
}

// Ceiling returns min(max, base·2^n) for n ≥ 0 without overflowing. A max of
// zero or less means no cap.
func Ceiling(base, max time.Duration, n int) time.Duration {
	if base <= 0 {
		return 0
	}
	if n < 0 {
		n = 0
	}
	d := base
	for i := 0; i < n; i++ {
		if max > 0 && d >= max {
			break
		}
		if d > (1<<62)/2 { // the next doubling would overflow
			break
		}
		d *= 2
	}
	if max > 0 && d > max {
		d = max
	}
	return d
}

// Wait returns the wait before retry n (n = 0 before the first retry, i.e.
// before the second attempt). prev is the previous wait (used by
// Decorrelated; pass 0 before the first retry) and u a uniform random number
// in [0, 1).
func (p Policy) Wait(n int, prev time.Duration, u float64) time.Duration {
	if u < 0 || u >= 1 {
		u = 0
	}
	switch p.Jitter {
	case Equal:
		c := Ceiling(p.Base, p.Max, n)
		half := c / 2
		return half + scale(c-half, u)
	case Decorrelated:
		if p.Base <= 0 {
			return 0
		}
		lo := p.Base
		hi := lo
		if prev > 0 && prev < (1<<62)/3 {
			hi = 3 * prev
		}
		if hi < lo {
			hi = lo
		}
		d := lo + scale(hi-lo, u)
		if p.Max > 0 && d > p.Max {
			d = p.Max
		}
		return d
	case None:
		return Ceiling(p.Base, p.Max, n)
	default: // Full
		return scale(Ceiling(p.Base, p.Max, n), u)
	}
}

// scale returns floor(d·u) for u in [0, 1): a value in [0, d) when d > 0.
func scale(d time.Duration, u float64) time.Duration {
	if d <= 0 {
		return 0
	}
	v := time.Duration(float64(d) * u)
	if v >= d { // float rounding at the top of the range
		v = d - 1
	}
	if v < 0 {
		v = 0
	}
	return v
}

// Uniform turns 64 random bits into a float64 uniform in [0, 1).
func Uniform(r uint64) float64 {
	return float64(r>>11) / (1 << 53)
}

// JitterNamed returns the jitter a policy spells name ("full", "equal",
// "decorrelated", "none"; sharedstate.Jitter's values), Full for any other
// name: a policy that passed validation names one of the four.
func JitterNamed(name string) Jitter {
	for _, j := range [...]Jitter{Equal, Decorrelated, None} {
		if j.String() == name {
			return j
		}
	}
	return Full
}
