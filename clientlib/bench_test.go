package clientlib

import (
	"context"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// The benchmarks pair each Fusebox path with its fair gobreaker twin, in
// the same run: compare the rows of one group (benchstat).
//
//	go test -run '^$' -bench . -benchmem -count 6 ./clientlib/

func benchClient(b *testing.B) *Dependency {
	c := newClient(b, Config{NoAgent: true, Service: "bench", Instance: "bench-1"})
	dep := c.Dependency("bench-dep")
	if err := dep.Err(); err != nil {
		b.Fatal(err)
	}
	return dep
}

func benchBreaker() *gobreaker.CircuitBreaker[struct{}] {
	return gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{Name: "bench-dep"})
}

func noop() (struct{}, error) { return struct{}{}, nil }

// allowDone is the closed path the breaker benchmarks time: b.Loop rounds
// of dep.Allow(First) and done(Success).
func allowDone(b *testing.B, dep *Dependency) {
	for b.Loop() {
		done, err := dep.Allow(First)
		if err != nil {
			b.Fatal(err)
		}
		done(Success)
	}
}

// allowDoneParallel is allowDone under b.RunParallel.
func allowDoneParallel(b *testing.B, dep *Dependency) {
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			done, err := dep.Allow(First)
			if err != nil {
				b.Error(err)
				return
			}
			done(Success)
		}
	})
}

// execute is allowDone's gobreaker twin: b.Loop rounds of cb.Execute(noop).
func execute(b *testing.B, cb *gobreaker.CircuitBreaker[struct{}]) {
	for b.Loop() {
		if _, err := cb.Execute(noop); err != nil {
			b.Fatal(err)
		}
	}
}

// executeParallel is execute under b.RunParallel.
func executeParallel(b *testing.B, cb *gobreaker.CircuitBreaker[struct{}]) {
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := cb.Execute(noop); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkBreaker: the breaker part alone, closed path — dep.Allow + done
// versus gobreaker's Execute with a no-op function.
func BenchmarkBreaker(b *testing.B) {
	b.Run("fusebox-allow-done", func(b *testing.B) {
		dep := benchClient(b)
		b.ReportAllocs()
		allowDone(b, dep)
	})
	b.Run("gobreaker-execute", func(b *testing.B) {
		cb := benchBreaker()
		b.ReportAllocs()
		execute(b, cb)
	})
}

// BenchmarkBreakerParallel is BenchmarkBreaker under b.RunParallel.
func BenchmarkBreakerParallel(b *testing.B) {
	b.Run("fusebox-allow-done", func(b *testing.B) {
		dep := benchClient(b)
		b.ReportAllocs()
		allowDoneParallel(b, dep)
	})
	b.Run("gobreaker-execute", func(b *testing.B) {
		cb := benchBreaker()
		b.ReportAllocs()
		executeParallel(b, cb)
	})
}

func noopAttempt(context.Context, Attempt) error { return nil }

// BenchmarkCall: the whole call — dep.Do with a no-op function and the
// policy's per-attempt timeout (500ms) versus gobreaker's Execute wrapped in
// context.WithTimeout.
func BenchmarkCall(b *testing.B) {
	ctx := context.Background()
	b.Run("fusebox-do", func(b *testing.B) {
		dep := benchClient(b)
		b.ReportAllocs()
		for b.Loop() {
			if err := dep.Do(ctx, Idempotent, noopAttempt); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gobreaker-execute-withtimeout", func(b *testing.B) {
		cb := benchBreaker()
		b.ReportAllocs()
		for b.Loop() {
			actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := cb.Execute(func() (struct{}, error) { return struct{}{}, actx.Err() })
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("context-withtimeout-alone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			cancel()
		}
	})
}

// BenchmarkCallParallel is BenchmarkCall under b.RunParallel.
func BenchmarkCallParallel(b *testing.B) {
	ctx := context.Background()
	b.Run("fusebox-do", func(b *testing.B) {
		dep := benchClient(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := dep.Do(ctx, Idempotent, noopAttempt); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("gobreaker-execute-withtimeout", func(b *testing.B) {
		cb := benchBreaker()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				_, err := cb.Execute(func() (struct{}, error) { return struct{}{}, actx.Err() })
				cancel()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
