package history

import (
	"math"
	"math/bits"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// fineSpan is how many sub-buckets a row's Recent describes.
const fineSpan = 1 << (sharedstate.FastHorizons - 1)

// tracker is what the history remembers of one node's rows for one
// dependency, to turn the next row into what happened since.
type tracker struct {
	seq    uint64
	gen    uint64
	fw, cw int64 // ns per sub-bucket (window/100) and per bucket (window/10) of the rows
	ep     int64 // sub-bucket the last row was dated in
	recent sharedstate.Recent
	tot    [4]uint64 // first attempts, retries, rejected, requests of the last row
	cep    int64     // the bucket (window/10) the last row was counted in
	// cring is what the history thinks each of the node's last ten buckets
	// holds (first attempts, retries, rejected, requests): what leaves its
	// window when the node's window moves on.
	cring  [sharedstate.WindowBuckets]cbucket
	carryF [3]float64 // fractions of successes, failures, slow calls not yet attributed
	carryC [3]float64 // of first attempts, retries, rejected
	// debtF and debtC are what rows estimated below zero (≤ 0): an
	// estimate's errors go both ways, and dropping the negative ones would
	// count too much. At most a few sub-buckets of traffic.
	debtF   [3]float64
	debtC   [3]float64
	peak    [3]float64 // a slowly decaying maximum of the window totals: bounds debtC
	last    time.Time
	bit     uint8
	zoneBit uint8
	ownsBit bool
	seen    bool
}

type cbucket struct {
	ep int64
	c  [4]float64
}

// credit is what one row attributes to one sub-bucket.
type credit struct {
	ep  int64
	out [3]float64 // successes, failures, slow calls
	cnt [3]float64 // first attempts, retries, rejected
}

// groupEstimate is the row's count of the sub-bucket o sub-buckets before
// its newest, each power-of-two group of Recent spread evenly.
func groupEstimate(r *sharedstate.Recent, o int) [3]float64 {
	j, size := 0, 1
	if o > 0 {
		j = bits.Len(uint(o))
		size = 1 << (j - 1)
	}
	c := r[j]
	var p sharedstate.RecentCounts
	if j > 0 {
		p = r[j-1]
	}
	d := func(a, b uint32) float64 {
		if a < b {
			return 0
		}
		return float64(a - b)
	}
	return [3]float64{d(c.Successes, p.Successes) / float64(size), d(c.Failures, p.Failures) / float64(size),
		d(c.SlowCalls, p.SlowCalls) / float64(size)}
}

// Indexes of tracker.tot and cbucket.c.
const (
	cFirst = iota
	cRetries
	cRejected
	cRequests
)

// attribute adds to the history what row r, received at now, says the
// node counted since the tracker's previous row. It reports whether it
// credited anything.
//
// The successes, failures and slow calls come from Recent (see outcomes).
// The first attempts, retries and rejections come from the window totals:
// what they grew by, plus what left the window since the previous row. A
// row is dated by its receipt, which is up to a gossip round after the node
// built it, so when a receipt falls just past the start of one of the
// node's buckets the history does not know whether the node's window had
// moved on yet. It decides by the requests: the window's successes +
// failures must have grown by what Recent says they grew by, and no count
// can have shrunk; when that does not tell (nothing left the window), the
// receipt decides, taken as the row's time only half a bucket after the
// bucket starts.
func (tr *tracker) attribute(h *History, d *depHistory, r *sharedstate.NodeWindow, now time.Time, window time.Duration, warm bool) bool {
	fw := max(int64(window)/sharedstate.FastSubBuckets, 1)
	cw := max(int64(window)/sharedstate.WindowBuckets, 1)
	perBucket := max(cw/fw, 1)
	e := floorDiv(now.UnixNano(), fw)
	first := !tr.seen || tr.fw != fw || tr.cw != cw
	if !first && e < tr.ep {
		e = tr.ep
	}
	reset := !first && r.Generation > tr.gen && d.maxClosedGen > tr.gen && d.maxClosedGen <= r.Generation
	newT := [4]float64{float64(r.FirstAttempts), float64(r.Retries), float64(r.Rejected), float64(r.Requests())}
	ce := floorDiv(e, perBucket)

	var credits []credit
	var gain [3]float64 // first attempts, retries, rejected
	switch {
	case first:
		if warm {
			credits = tr.outcomes(r, e, fineSpan, nil)
			for i := range gain {
				gain[i] = newT[i]
			}
		}
		tr.cring = [sharedstate.WindowBuckets]cbucket{}
		tr.carryF, tr.carryC = [3]float64{}, [3]float64{}
		tr.debtF, tr.debtC = [3]float64{}, [3]float64{}
		if !warm {
			// What the row's window holds, evenly over its buckets: what
			// will leave it.
			for k := range int64(sharedstate.WindowBuckets) {
				b := &tr.cring[floorMod(ce-k, sharedstate.WindowBuckets)]
				b.ep = ce - k
				for i := range b.c {
					b.c[i] = newT[i] / sharedstate.WindowBuckets
				}
			}
		}
	case reset:
		prev := sharedstate.Recent{}
		credits = tr.outcomes(r, e, e-tr.ep, &prev)
		tr.cring = [sharedstate.WindowBuckets]cbucket{}
		for i := range gain {
			gain[i] = newT[i]
		}
	default:
		delta := e - tr.ep
		if delta < fineSpan-1 {
			if d, tight := minShift(&r.Recent, &tr.recent); tight || d > delta {
				// The rows themselves say how far apart they are, better
				// than the receipts.
				delta = d
				e = tr.ep + d
				ce = floorDiv(e, perBucket)
			}
		}
		credits = tr.outcomes(r, e, delta, &tr.recent)
		var grew float64 // requests, by Recent
		for _, c := range credits {
			grew += c.out[0] + c.out[1]
		}
		// The bucket the row was counted in: the previous row's, or a later
		// one up to the receipt's.
		var held [4]float64
		for _, b := range tr.cring {
			if b.ep > tr.cep-sharedstate.WindowBuckets && b.ep <= tr.cep {
				for i := range held {
					held[i] += b.c[i]
				}
			}
		}
		best, bestErr := tr.cep, math.Inf(1)
		var bestInc [4]float64
		late := now.UnixNano()-ce*cw < min(int64(500*time.Millisecond), cw/2)
		for k := tr.cep; k <= max(tr.cep, ce) && k <= tr.cep+sharedstate.WindowBuckets; k++ {
			var inc [4]float64
			for i := range inc {
				left := 0.0
				for _, b := range tr.cring {
					if b.ep > tr.cep-sharedstate.WindowBuckets && b.ep <= k-sharedstate.WindowBuckets {
						left += b.c[i]
					}
				}
				inc[i] = newT[i] - held[i] + left
				if k-tr.cep >= sharedstate.WindowBuckets {
					inc[i] = newT[i]
				}
			}
			err := math.Abs(inc[cRequests] - grew)
			for _, v := range inc {
				err += 2 * max(0, -v)
			}
			prefer := k > best && !(late && k == ce && k > tr.cep)
			if err < bestErr-1e-9 || (math.Abs(err-bestErr) <= 1e-9 && prefer) {
				best, bestErr, bestInc = k, err, inc
			}
		}
		if best < ce {
			// The node's window had not moved on: the row is from before
			// the bucket its receipt falls in.
			if limit := (best+1)*perBucket - 1; e > limit {
				e = max(limit, tr.ep)
				delta = e - tr.ep
				credits = tr.outcomes(r, e, delta, &tr.recent)
			}
			ce = best
		}
		for i := range gain {
			tr.peak[i] = max(newT[i], 0.99*tr.peak[i])
			g := bestInc[i] + tr.debtC[i]
			tr.debtC[i] = 0
			if g < 0 {
				tr.debtC[i] = max(g, -tr.peak[i]/sharedstate.WindowBuckets-1)
			}
			gain[i] = max(0, g)
		}
	}

	// First attempts, retries and rejections go where the outcomes went;
	// without outcomes, evenly over the sub-buckets since the previous row.
	if gain != [3]float64{} {
		var weight float64
		for _, c := range credits {
			weight += c.out[0] + c.out[1]
		}
		if weight == 0 {
			from := tr.ep + 1
			if first || from > e {
				from = e
			}
			from = max(from, e-fineSpan+1)
			credits = credits[:0]
			for ep := from; ep <= e; ep++ {
				credits = append(credits, credit{ep: ep})
			}
			for k := range credits {
				for i := range gain {
					credits[k].cnt[i] = gain[i] / float64(len(credits))
				}
			}
		} else {
			for k := range credits {
				w := (credits[k].out[0] + credits[k].out[1]) / weight
				for i := range gain {
					credits[k].cnt[i] = gain[i] * w
				}
			}
		}
	}

	credited := false
	for _, c := range credits {
		cep := floorDiv(c.ep, perBucket)
		if cb := &tr.cring[floorMod(cep, sharedstate.WindowBuckets)]; true {
			if cb.ep != cep {
				*cb = cbucket{ep: cep}
			}
			for i := range 3 {
				cb.c[i] += c.cnt[i]
			}
			cb.c[cRequests] += c.out[0] + c.out[1]
		}
		var s Slot
		o := roundCarry(c.out, &tr.carryF)
		k := roundCarry(c.cnt, &tr.carryC)
		s.Successes, s.Failures, s.SlowCalls = o[0], o[1], o[2]
		s.FirstAttempts, s.Retries, s.Rejected = k[0], k[1], k[2]
		if s.IsZero() {
			continue
		}
		s.ActiveNodes = 1 << tr.bit
		if s.Failures > 0 || s.SlowCalls > 0 {
			s.FailingNodes = 1 << tr.bit
			s.FailingZones = 1 << tr.zoneBit
		}
		at := c.ep * fw
		for _, t := range []*tier{&d.fine, &d.coarse} {
			if slot := t.slot(at); slot != nil {
				slot.Add(s)
			} else {
				h.drop(DropLate)
			}
		}
		credited = true
	}

	tr.seen = true
	tr.seq, tr.gen, tr.fw, tr.cw, tr.ep, tr.cep = r.Seq, r.Generation, fw, cw, e, ce
	tr.recent = r.Recent
	for i := range tr.tot {
		tr.tot[i] = uint64(newT[i])
	}
	tr.last = now
	return credited
}

// suffix is the count of the newest n sub-buckets of a Recent (n from 1 to
// 64; beyond, the 64), between its power-of-two suffixes linearly.
func suffix(r *sharedstate.Recent, n int64) [3]float64 {
	get := func(k int) [3]float64 {
		c := r[k]
		return [3]float64{float64(c.Successes), float64(c.Failures), float64(c.SlowCalls)}
	}
	if n <= 0 {
		return [3]float64{}
	}
	if n >= fineSpan {
		return get(sharedstate.FastHorizons - 1)
	}
	k := bits.Len64(uint64(n)) - 1 // 2^k <= n < 2^(k+1)
	lo, hi := get(k), get(k+1)
	f := float64(n-int64(1)<<k) / float64(int64(1)<<k)
	var out [3]float64
	for i := range out {
		out[i] = lo[i] + (hi[i]-lo[i])*f
	}
	return out
}

// minShift is the least number of sub-buckets row r can be after row prev:
// r's newest 2^k sub-buckets hold prev's newest 2^m whenever 2^k ≥ d + 2^m,
// so none of them may count less. tight reports that at that shift r holds
// exactly what prev held (a 2^k = d + 2^m with equal counts): the rows say
// their distance.
func minShift(r, prev *sharedstate.Recent) (int64, bool) {
	for d := int64(0); d < fineSpan-1; d++ {
		ok, tight := true, false
		for k := range sharedstate.FastHorizons {
			for m := range sharedstate.FastHorizons {
				if int64(1)<<k < d+int64(1)<<m {
					continue
				}
				b, a := r[k], prev[m]
				if b.Successes < a.Successes || b.Failures < a.Failures || b.SlowCalls < a.SlowCalls {
					ok = false
				}
				if int64(1)<<k == d+int64(1)<<m && b == a && a.Successes+a.Failures > 0 && d > 0 {
					tight = true
				}
			}
		}
		if ok {
			return d, tight
		}
	}
	return fineSpan - 1, false
}

// outcomes returns the successes, failures and slow calls row r (dated in
// sub-bucket e, delta sub-buckets after the previous row prev; prev nil:
// none, take the row's whole Recent) adds, per sub-bucket, oldest first.
// What it adds
// is its newest 2^k sub-buckets less what prev held in the part of them
// before its newest sub-bucket (exact when that part is a power of two
// long, interpolated otherwise); it goes to the newest sub-buckets as r's
// Recent spreads them (the newest two exactly, older ones evenly over their
// power-of-two group) and what is left to prev's newest sub-bucket (counts
// that came in after prev was built).
func (tr *tracker) outcomes(r *sharedstate.NodeWindow, e, delta int64, prev *sharedstate.Recent) []credit {
	var out []credit
	if prev == nil || delta >= fineSpan-1 || delta < 0 {
		for o := fineSpan - 1; o >= 0; o-- {
			out = append(out, credit{ep: e - int64(o), out: groupEstimate(&r.Recent, o)})
		}
		return out
	}
	k := bits.Len64(uint64(delta)) // 2^k >= delta+1
	rk := r.Recent[k]
	old := suffix(prev, int64(1)<<k-delta)
	total := [3]float64{float64(rk.Successes) - old[0], float64(rk.Failures) - old[1], float64(rk.SlowCalls) - old[2]}
	var newer [3]float64
	ests := make([][3]float64, delta)
	for o := range delta {
		ests[o] = groupEstimate(&r.Recent, int(o))
		for i := range newer {
			newer[i] += ests[o][i]
		}
	}
	var oldest [3]float64
	scale := [3]float64{1, 1, 1}
	// Debts are bounded by four sub-buckets of the recent traffic, and
	// forgiven once that traffic is gone: they must not eat the rare
	// failure (a probe's) that comes later.
	r64 := r.Recent[sharedstate.FastHorizons-1]
	limit := [3]float64{float64(r64.Successes) / 16, float64(r64.Failures) / 16, float64(r64.SlowCalls) / 16}
	for i := range total {
		total[i] += tr.debtF[i]
		tr.debtF[i] = 0
		if total[i] < 0 {
			tr.debtF[i] = max(total[i], -limit[i])
		}
		switch t := total[i]; {
		case t <= 0:
			scale[i] = 0
		case newer[i] >= t:
			scale[i] = t / newer[i]
		default:
			oldest[i] = t - newer[i]
		}
	}
	out = append(out, credit{ep: e - delta, out: oldest})
	for o := delta - 1; o >= 0; o-- {
		var v [3]float64
		for i := range v {
			v[i] = ests[o][i] * scale[i]
		}
		out = append(out, credit{ep: e - o, out: v})
	}
	return out
}

// roundCarry rounds v down to whole counts, carrying the fractions.
func roundCarry(v [3]float64, carry *[3]float64) [3]uint32 {
	var out [3]uint32
	for i := range v {
		x := v[i] + carry[i]
		n := math.Floor(x + 1e-9)
		carry[i] = max(0, x-n)
		out[i] = uint32(min(max(n, 0), math.MaxUint32))
	}
	return out
}
