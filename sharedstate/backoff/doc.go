// Package backoff computes the wait between two attempts of a call: an
// exponential ceiling min(max, base·2^n) and one of four jitters. It is the
// one backoff of the tree: clientlib's attempt loop calls Policy.Wait
// directly, passing the uniform random number, so tests are deterministic;
// loops that try again until they succeed (reconnects, joins, watches)
// keep a Backoff, which counts the tries and draws the jitter from an
// injected random source.
//
// Usage:
//
//	p := backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: backoff.Full}
//	var prev time.Duration
//	for n := 0; n < retries; n++ {
//		prev = p.Wait(n, prev, backoff.Uniform(rng.Uint64())) // U[0, min(max, base·2^n))
//		sleep(prev)
//	}
//
// and in a loop that retries until it succeeds:
//
//	b := backoff.New(p, rng.Uint64)
//	for connect() != nil {
//		sleep(b.Next())
//	}
//	b.Reset() // after a success: the next failure waits the first wait again
package backoff
