package backoff

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestCeiling(t *testing.T) {
	for _, tc := range []struct {
		base, max time.Duration
		n         int
		want      time.Duration
	}{
		{100 * time.Millisecond, 5 * time.Second, 0, 100 * time.Millisecond},
		{100 * time.Millisecond, 5 * time.Second, 1, 200 * time.Millisecond},
		{100 * time.Millisecond, 5 * time.Second, 5, 3200 * time.Millisecond},
		{100 * time.Millisecond, 5 * time.Second, 6, 5 * time.Second},
		{100 * time.Millisecond, 5 * time.Second, 1000, 5 * time.Second},
		{time.Hour, 0, 200, time.Duration(1<<62) / time.Hour * time.Hour},
		{0, time.Second, 3, 0},
	} {
		got := Ceiling(tc.base, tc.max, tc.n)
		if tc.max == 0 && tc.base == time.Hour {
			if got <= 0 {
				t.Errorf("Ceiling(%v, %v, %d) = %v overflowed", tc.base, tc.max, tc.n, got)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("Ceiling(%v, %v, %d) = %v, want %v", tc.base, tc.max, tc.n, got, tc.want)
		}
	}
}

// TestFullJitterUniform draws 10,000 full-jitter waits and checks that they
// are uniform on [0, ceiling): every sample in range, mean and quartiles
// within 2% of the ceiling of their expected values (the standard error of
// the mean is ceiling/√12/√10000 ≈ 0.3% of it; of a quartile ≈ 0.4%).
func TestFullJitterUniform(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: Full}
	for _, n := range []int{0, 3, 10} {
		ceiling := Ceiling(p.Base, p.Max, n)
		r := rand.New(rand.NewPCG(1, uint64(n)))
		const samples = 10000
		waits := make([]time.Duration, samples)
		var sum float64
		for i := range waits {
			w := p.Wait(n, 0, Uniform(r.Uint64()))
			if w < 0 || w >= ceiling {
				t.Fatalf("n=%d: wait %v outside [0, %v)", n, w, ceiling)
			}
			waits[i] = w
			sum += float64(w)
		}
		slices.Sort(waits)
		tol := 0.02 * float64(ceiling)
		check := func(what string, got, want float64) {
			if got < want-tol || got > want+tol {
				t.Errorf("n=%d: %s = %v, want %v ± %v", n, what, time.Duration(got), time.Duration(want), time.Duration(tol))
			}
		}
		c := float64(ceiling)
		check("mean", sum/samples, c/2)
		check("first quartile", float64(waits[samples/4]), c/4)
		check("median", float64(waits[samples/2]), c/2)
		check("third quartile", float64(waits[3*samples/4]), 3*c/4)
	}
}

func TestJitterBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		base := time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "base"))
		max := base + time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "extra"))
		n := rapid.IntRange(0, 80).Draw(t, "n")
		prev := time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "prev"))
		u := rapid.Float64Range(0, 0.999999).Draw(t, "u")
		c := Ceiling(base, max, n)
		if c > max || c < 0 {
			t.Fatalf("ceiling %v outside [0, %v]", c, max)
		}
		for _, j := range []Jitter{Full, Equal, Decorrelated, None} {
			w := Policy{Base: base, Max: max, Jitter: j}.Wait(n, prev, u)
			if w < 0 || w > max {
				t.Fatalf("%v: wait %v outside [0, %v]", j, w, max)
			}
			switch j {
			case Full:
				if c > 0 && w >= c {
					t.Fatalf("full: wait %v not below ceiling %v", w, c)
				}
			case Equal:
				if c > 0 && (w < c/2 || w >= c) {
					t.Fatalf("equal: wait %v outside [%v, %v)", w, c/2, c)
				}
			case None:
				if w != c {
					t.Fatalf("none: wait %v, want the ceiling %v", w, c)
				}
			case Decorrelated:
				if base > 0 && w < min(base, max) {
					t.Fatalf("decorrelated: wait %v below base %v", w, base)
				}
			}
		}
	})
}

func TestUniformRange(t *testing.T) {
	if u := Uniform(0); u != 0 {
		t.Errorf("Uniform(0) = %v", u)
	}
	if u := Uniform(^uint64(0)); u >= 1 {
		t.Errorf("Uniform(max) = %v, want < 1", u)
	}
}

func TestJitterNamed(t *testing.T) {
	for _, j := range []Jitter{Full, Equal, Decorrelated, None} {
		if got := JitterNamed(j.String()); got != j {
			t.Errorf("JitterNamed(%q) = %v", j.String(), got)
		}
	}
	if got := JitterNamed("bogus"); got != Full {
		t.Errorf("JitterNamed(bogus) = %v, want full", got)
	}
}
