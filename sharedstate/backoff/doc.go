// Package backoff computes the wait between two attempts of a call: an
// exponential ceiling min(max, base·2^n) and one of four jitters. It is pure:
// the caller passes the uniform random number, so tests are deterministic.
//
// Usage:
//
//	p := backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: backoff.Full}
//	var prev time.Duration
//	for n := 0; n < retries; n++ {
//		prev = p.Wait(n, prev, backoff.Uniform(rng.Uint64())) // U[0, min(max, base·2^n))
//		sleep(prev)
//	}
package backoff
