package sharedstate

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// The trip rule.
//
// Classic (breaker.confidence 0): a window trips when it holds at least
// minimumRequests requests, failures from at least min(minFailingNodes,
// nodes with requests) nodes, and a failure (or slow-call) rate at or above
// its threshold.
//
// With a confidence c > 0 the rate is replaced by the lower bound of its
// Wilson score interval, so that a window holding just over minimumRequests
// requests does not trip on a chance run of failures. A node evaluates its
// window at every tick, and the window's content renews once per bucket, so
// the confidence is split (Bonferroni) over the window's WindowBuckets
// buckets: z = Φ⁻¹(1 − (1−c)/(2 × 10)), 2.81 at 95%. With breaker.fastPath
// the rule is also applied to the freshest suffixes of the window: its last
// 1, 2, 4, … 64 sub-buckets of window/FastSubBuckets. A fleet fills a short
// suffix with minimumRequests requests in a fraction of a second, and a
// suffix that starts after a dependency died holds only failures, while the
// whole window still holds the successes from before. Each of the
// FastHorizons suffixes is held to the bound split over all of them too:
// z = Φ⁻¹(1 − (1−c)/(2 × 7 × 10)), 3.38 at 95%.
//
// At 95%, minimumRequests 20 and a threshold of 0.5, the whole window trips
// on 17 failures out of 20 requests (or 70 of 100), a suffix on 18 of 20.
// The chance of 17 of 20 at a true failure rate of 30% is 5·10⁻⁷, of 18 of
// 20 4·10⁻⁸.

const (
	// FastHorizons is the number of window suffixes the fast path
	// evaluates: the freshest 1, 2, 4, … 2^(FastHorizons-1) sub-buckets.
	FastHorizons = 7
	// FastSubBuckets is the number of sub-buckets per window the fast path
	// measures suffixes in (100 ms for a 10 s window).
	FastSubBuckets = 100

	fineSlots = 1 << (FastHorizons - 1) // sub-buckets the own ring keeps
)

// RecentCounts are the counts of one suffix of a window: what the fast path
// needs. They saturate at math.MaxUint32.
type RecentCounts struct {
	Successes uint32 `json:"successes"`
	Failures  uint32 `json:"failures"`
	SlowCalls uint32 `json:"slowCalls"`
}

// Recent are a node's counts over the freshest suffixes of its window, as of
// the tick that built its row: Recent[k] covers the last 2^k sub-buckets of
// window/FastSubBuckets each, so each entry includes the one before it.
type Recent [FastHorizons]RecentCounts

// Plus returns the saturating sum of c and o.
func (c RecentCounts) Plus(o RecentCounts) RecentCounts {
	return RecentCounts{Successes: sat32(c.Successes, o.Successes), Failures: sat32(c.Failures, o.Failures),
		SlowCalls: sat32(c.SlowCalls, o.SlowCalls)}
}

func sat32(a, b uint32) uint32 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint32
}

func sat32of(v uint64) uint32 { return uint32(min(v, math.MaxUint32)) }

// valid reports whether each suffix includes the one before it.
func (r *Recent) valid() bool {
	for k := 1; k < FastHorizons; k++ {
		a, b := r[k-1], r[k]
		if b.Successes < a.Successes || b.Failures < a.Failures || b.SlowCalls < a.SlowCalls {
			return false
		}
	}
	return true
}

// recentSum is a sum of suffix counts over rows.
type recentSum struct{ successes, failures, slow uint64 }

func (s *recentSum) add(c RecentCounts) {
	s.successes += uint64(c.Successes)
	s.failures += uint64(c.Failures)
	s.slow += uint64(c.SlowCalls)
}

func (s recentSum) counts() Counts {
	return Counts{Successes: s.successes, Failures: s.failures, SlowCalls: s.slow}
}

// fineRing is a node's own window in sub-buckets of window/FastSubBuckets,
// fed at each Tick with what the coarse window gained since the previous
// Tick (so Record and AddCounts do no extra work). It keeps the last
// fineSlots sub-buckets. Guarded by depState.mu.
type fineRing struct {
	width  int64 // ns per sub-bucket
	ep     [fineSlots]int64
	c      [fineSlots]RecentCounts
	last   int64     // sub-bucket epoch of the latest count, 0: none
	seen   int64     // coarse epoch read last, -1: none yet
	read   [3]uint64 // what that bucket held then
	recent Recent    // suffixes as of the last advance
}

func newFineRing(window time.Duration) fineRing {
	return fineRing{width: max(1, int64(window)/FastSubBuckets), seen: -1}
}

// advance adds what w gained since the previous call to the sub-bucket of
// now and recomputes the suffixes.
func (f *fineRing) advance(w *Window, now int64) {
	var d [3]uint64
	f.seen, f.read, d = w.gainedSince(f.seen, f.read, now)
	fe := now / f.width
	if d != [3]uint64{} {
		s := fe % fineSlots
		if f.ep[s] != fe {
			f.c[s], f.ep[s] = RecentCounts{}, fe
		}
		f.c[s] = f.c[s].Plus(RecentCounts{Successes: sat32of(d[0]), Failures: sat32of(d[1]), SlowCalls: sat32of(d[2])})
		f.last = fe
	}
	if f.last == 0 || fe-f.last >= fineSlots {
		f.recent = Recent{}
		return
	}
	var acc RecentCounts
	for i, k := int64(0), 0; k < FastHorizons; i++ {
		if e := fe - i; e >= 0 && f.ep[e%fineSlots] == e {
			acc = acc.Plus(f.c[e%fineSlots])
		}
		if i == 1<<k-1 {
			f.recent[k] = acc
			k++
		}
	}
}

// gainedSince returns what the window gained (successes, failures, slow
// calls) since the reading (seen, read) of coarse bucket seen, and the new
// reading of the current bucket.
func (w *Window) gainedSince(seen int64, read [3]uint64, now int64) (int64, [3]uint64, [3]uint64) {
	cur := now / w.width
	if seen > cur {
		return seen, read, [3]uint64{} // the clock went back: wait for it
	}
	if seen >= 0 && w.newest.Load() < seen {
		return cur, [3]uint64{}, [3]uint64{} // no bucket holds seen or later
	}
	if seen <= cur-WindowBuckets {
		seen, read = cur-WindowBuckets+1, [3]uint64{}
	}
	var sum, last [3]uint64
	for ep := seen; ep <= cur; ep++ {
		last = w.read(ep)
		for i := range sum {
			sum[i] += last[i]
		}
	}
	var d [3]uint64
	for i := range d {
		if sum[i] > read[i] {
			d[i] = sum[i] - read[i]
		}
	}
	return cur, last, d
}

// read sums the successes, failures and slow calls of coarse bucket ep
// (zero when the bucket holds another slice of time).
func (w *Window) read(ep int64) [3]uint64 {
	var s [3]uint64
	for k := range w.s {
		b := &w.s[k].b[ep%WindowBuckets]
		if b.epoch.Load() == ep {
			s[0] += b.c[cSuccesses].Load()
			s[1] += b.c[cFailures].Load()
			s[2] += b.c[cSlow].Load()
		}
	}
	return s
}

// tripBounds are the z values of a policy's confidence: for the whole
// window and for each fast-path suffix. Zero for the classic rule.
type tripBounds struct{ whole, fast float64 }

func boundsFor(b *BreakerPolicy) tripBounds {
	c := b.Confidence
	if !(c > 0 && c < 1) {
		return tripBounds{}
	}
	return tripBounds{whole: normalQuantile(1 - (1-c)/(2*WindowBuckets)), fast: normalQuantile(1 - (1-c)/(2*FastHorizons*WindowBuckets))}
}

// normalQuantile is Φ⁻¹(p), the standard normal quantile.
func normalQuantile(p float64) float64 { return math.Sqrt2 * math.Erfinv(2*p-1) }

// WilsonLower is the lower bound of the Wilson score interval of the rate
// k/n at the given z (1.96 for 95%); 0 when n is 0.
func WilsonLower(k, n uint64, z float64) float64 {
	if n == 0 {
		return 0
	}
	nn := float64(n)
	p := float64(min(k, n)) / nn
	z2 := z * z
	lb := (p + z2/(2*nn) - z*math.Sqrt(p*(1-p)/nn+z2/(4*nn*nn))) / (1 + z2/nn)
	return max(0, lb)
}

// nodeFailing reports whether one node's counts meet a rate threshold on
// their own (no minimum): such a node counts towards minFailingNodes.
func nodeFailing(b *BreakerPolicy, c Counts) bool {
	req := float64(c.Requests())
	return (c.Failures > 0 && float64(c.Failures) >= b.FailureRateThreshold*req) ||
		(c.SlowCalls > 0 && float64(c.SlowCalls) >= b.SlowCallRateThreshold*req)
}

// tripFound is what the trip rule judged when it trips: the reason, the
// pooled counts, their nodes with requests and failing nodes, which rate
// tripped (slow: the slow-call rate), the value compared with its threshold
// (the lower bound, or the rate itself under the classic rule) and the
// fast-path suffix k (-1: the whole window).
type tripFound struct {
	why            string
	c              Counts
	nodes, failing int
	slow           bool
	compared       float64
	k              int
}

// tripRule applies the breaker's trip rule to the whole window's pooled
// counts from nodes nodes (with requests), failing of which meet a threshold
// on their own. It reports what it found when it trips.
func tripRule(b *BreakerPolicy, z tripBounds, c Counts, nodes, failing int) (tripFound, bool) {
	req := c.Requests()
	if !enoughEvidence(b, req, nodes, failing) {
		return tripFound{}, false
	}
	if z.whole == 0 { // the classic rule
		found := tripFound{c: c, nodes: nodes, failing: failing, k: -1}
		if fr := c.FailureRate(); c.Failures > 0 && fr >= b.FailureRateThreshold {
			found.why, found.compared = fmt.Sprintf("failure rate %.2f >= %.2f over %d requests from %d failing node(s)",
				fr, b.FailureRateThreshold, req, failing), fr
			return found, true
		}
		if sr := c.SlowCallRate(); c.SlowCalls > 0 && sr >= b.SlowCallRateThreshold {
			found.why, found.compared, found.slow = fmt.Sprintf("slow-call rate %.2f >= %.2f over %d requests from %d failing node(s)",
				sr, b.SlowCallRateThreshold, req, failing), sr, true
			return found, true
		}
		return tripFound{}, false
	}
	return boundTrips(b, z.whole, c, nodes, failing, -1, 0)
}

func enoughEvidence(b *BreakerPolicy, req uint64, nodes, failing int) bool {
	if req == 0 || req < uint64(b.MinimumRequests) {
		return false
	}
	return failing >= max(1, min(b.MinFailingNodes, nodes))
}

// boundTrips compares the lower bounds of c's rates with the thresholds.
// The reason names the horizon: suffix k of sub-buckets of fw, or the whole
// window for k < 0.
func boundTrips(b *BreakerPolicy, z float64, c Counts, nodes, failing int, k int, fw int64) (tripFound, bool) {
	req := c.Requests()
	what, n, threshold, slow := "failures", c.Failures, b.FailureRateThreshold, false
	lb := WilsonLower(n, req, z)
	if n == 0 || lb < threshold {
		what, n, threshold, slow = "slow calls", c.SlowCalls, b.SlowCallRateThreshold, true
		if lb = WilsonLower(n, req, z); n == 0 || lb < threshold {
			return tripFound{}, false
		}
	}
	horizon := "window " + b.Window.String()
	if k >= 0 {
		horizon = "fast path, last " + time.Duration((int64(1)<<k)*fw).String()
	}
	return tripFound{
		why: fmt.Sprintf("%s: %d %s of %d requests from %d failing node(s); rate %.2f, lower bound %.2f at %g%% confidence >= %.2f",
			horizon, n, what, req, failing, ratio(n, req), lb, 100*b.Confidence, threshold),
		c: c, nodes: nodes, failing: failing, slow: slow, compared: lb, k: k,
	}, true
}

// fastSums are the pooled suffixes the fast path evaluates.
type fastSums struct {
	c       [FastHorizons]recentSum
	nodes   [FastHorizons]int // with requests in the suffix
	failing [FastHorizons]int // whose own suffix meets a threshold
}

// add adds a row received age ago to the sums. For the suffix of 2^k
// sub-buckets it contributes its own longest suffix that fits in what is
// left of that span after its age, so that old rows do not bring the time
// before the span in: a row 150 ms old gives its 200 ms suffix to the
// 400 ms sum and nothing to the 100 ms and 200 ms ones.
func (s *fastSums) add(r *Recent, age int64, fw int64, failing uint8) {
	for k := range FastHorizons {
		j, ok := suffixFor(k, age, fw)
		if !ok {
			continue
		}
		c := r[j]
		if c.Successes == 0 && c.Failures == 0 {
			continue
		}
		s.c[k].add(c)
		s.nodes[k]++
		s.failing[k] += int(failing >> j & 1)
	}
}

// suffixFor is the suffix j a row received age ago gives to the pooled
// suffix of 2^k sub-buckets of fw (see fastSums.add); false: none.
func suffixFor(k int, age, fw int64) (int, bool) {
	left := (int64(1)<<k)*fw - age
	if left < fw {
		return 0, false
	}
	return min(k, bits.Len64(uint64(left/fw))-1), true
}

// fastTrip evaluates the suffixes, freshest first; the reason names the
// suffix that tripped. nodes are the nodes with requests in the whole
// window: a suffix in which only one of them has traffic still needs
// failures from min(minFailingNodes, nodes) nodes, so that one sick node
// cannot trip the fleet on its own.
func fastTrip(b *BreakerPolicy, z tripBounds, s *fastSums, nodes int, fw int64) (tripFound, bool) {
	for k := range FastHorizons {
		c := s.c[k].counts()
		if !enoughEvidence(b, c.Requests(), max(nodes, s.nodes[k]), s.failing[k]) {
			continue
		}
		if found, ok := boundTrips(b, z.fast, c, s.nodes[k], s.failing[k], k, fw); ok {
			return found, true
		}
	}
	return tripFound{}, false
}

// fastWorthIt reports whether any suffix could trip given the whole
// window's pooled counts (a suffix holds at most the window's failures and
// needs a rate above the threshold over at least minimumRequests): most
// ticks of a healthy dependency skip the fast path.
func fastWorthIt(b *BreakerPolicy, c Counts) bool {
	minReq := float64(b.MinimumRequests)
	return float64(c.Failures) >= b.FailureRateThreshold*minReq || float64(c.SlowCalls) >= b.SlowCallRateThreshold*minReq
}
