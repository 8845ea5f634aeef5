package backoff

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

const ms = time.Millisecond

// TestBackoffNone checks the waits of a Backoff without jitter, for the
// settings the tree's retry loops use, and that Reset starts over.
func TestBackoffNone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base, max time.Duration
		want      []time.Duration
	}{
		{"agent join defaults", 200 * ms, 10 * time.Second,
			[]time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 10 * time.Second, 10 * time.Second}},
		{"fuseboxctl watch", 100 * ms, 2 * time.Second,
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2 * time.Second, 2 * time.Second}},
		{"coordinator join", time.Second, 30 * time.Second,
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second}},
		{"store read", 25 * ms, 500 * ms, []time.Duration{25 * ms, 50 * ms, 100 * ms, 200 * ms, 400 * ms, 500 * ms}},
		{"base equals max", 300 * ms, 300 * ms, []time.Duration{300 * ms, 300 * ms, 300 * ms}},
		{"base above max is capped", time.Second, 500 * ms, []time.Duration{500 * ms, 500 * ms}},
		{"no cap", time.Hour, 0, []time.Duration{time.Hour, 2 * time.Hour, 4 * time.Hour}},
		{"zero base never waits", 0, time.Second, []time.Duration{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Policy{Base: tc.base, Max: tc.max, Jitter: None}, func() uint64 {
				t.Fatal("a Backoff without jitter drew a random number")
				return 0
			})
			for round := range 2 { // the second after Reset: the same waits
				var got []time.Duration
				for range tc.want {
					got = append(got, b.Next())
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("round %d: waits %v, want %v", round, got, tc.want)
				}
				b.Reset()
			}
		})
	}
}

// TestBackoffLaws drives a Backoff of any policy through any sequence of
// Next and Reset and checks each wait against the laws of its jitter, k
// being the number of waits since the last Reset (or New): never negative
// nor above max; none waits Ceiling(base, max, k), full draws below it,
// equal from its half; decorrelated stays within [base, 3·previous wait],
// starting from base, and max. It also checks that a Backoff draws only
// from the source it was given.
func TestBackoffLaws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		base := time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "base"))
		max := base + time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "extra"))
		j := Jitter(rapid.IntRange(int(Full), int(None)).Draw(t, "jitter"))
		resets := rapid.SliceOfN(rapid.Float64Range(0, 1), 1, 200).Draw(t, "ops")
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 7))
		draws := 0
		b := New(Policy{Base: base, Max: max, Jitter: j}, func() uint64 { draws++; return rng.Uint64() })
		k, prev := 0, time.Duration(0)
		for i, op := range resets {
			if op < 0.1 {
				b.Reset()
				k, prev = 0, 0
				continue
			}
			w := b.Next()
			c := Ceiling(base, max, k)
			if w < 0 || w > max {
				t.Fatalf("op %d, %v, retry %d: wait %v outside [0, %v]", i, j, k, w, max)
			}
			switch j {
			case None:
				if w != c {
					t.Fatalf("op %d, retry %d: wait %v, want the ceiling %v", i, k, w, c)
				}
			case Full:
				if c > 0 && w >= c {
					t.Fatalf("op %d, retry %d: full wait %v not below the ceiling %v", i, k, w, c)
				}
			case Equal:
				if c > 0 && (w < c/2 || w >= c) {
					t.Fatalf("op %d, retry %d: equal wait %v outside [%v, %v)", i, k, w, c/2, c)
				}
			case Decorrelated:
				hi := base
				if prev > 0 {
					hi = 3 * prev
				}
				if w < min(base, max) || w > min(max, hi) {
					t.Fatalf("op %d, retry %d: decorrelated wait %v outside [%v, min(%v, %v)] (previous %v)", i, k, w, base, max, hi, prev)
				}
			}
			k, prev = k+1, w
		}
		if j == None && draws > 0 {
			t.Fatalf("none: %d random draws, want 0", draws)
		}
	})
}

// TestBackoffDefaultRandom checks that a Backoff with no source jitters
// with math/rand/v2's.
func TestBackoffDefaultRandom(t *testing.T) {
	b := New(Policy{Base: time.Second, Max: time.Second, Jitter: Full}, nil)
	seen := map[time.Duration]bool{}
	for range 100 {
		w := b.Next()
		if w < 0 || w >= time.Second {
			t.Fatalf("wait %v outside [0, 1s)", w)
		}
		seen[w] = true
	}
	if len(seen) < 50 {
		t.Errorf("100 full-jitter waits took %d distinct values: not random", len(seen))
	}
}
