package agent

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// benchPolicy has a long window so counts never age out during a run.
func benchPolicy() sharedstate.Policy {
	p := testPolicy()
	p.Breaker.Window = sharedstate.Duration(10 * time.Minute)
	p.Breaker.MinimumRequests = 1000000
	return p
}

// Count-delta ingestion through Session: a client sends CountDeltas (as
// clientlib does every 50 ms) over the unix socket; outcomes/s is the rate
// at which the agent ingests the outcomes they carry. The outcomes_total
// counter is read to wait until the agent processed everything sent.
func BenchmarkSessionIngest(b *testing.B) {
	for _, tc := range []struct{ deps, perDep int }{{1, 1}, {16, 64}, {100, 100}} {
		b.Run(fmt.Sprintf("deps=%d/outcomes_per_dep=%d", tc.deps, tc.perDep), func(b *testing.B) {
			a := startAgent(b, testConfig(b, "bench"), WithDefaultPolicy(benchPolicy()))
			stream, err := dial(b, a.Agent).Session(ctxT(b, 10*time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			if err := stream.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{Service: "bench"}}}); err != nil {
				b.Fatal(err)
			}
			if _, err := stream.Recv(); err != nil {
				b.Fatal(err)
			}
			go func() { // drain snapshot pushes
				for { // bounded by the stream, which ends when the benchmark closes the agent
					if _, err := stream.Recv(); err != nil {
						return
					}
				}
			}()
			msg := &fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Deltas{Deltas: &fuseboxv1.CountDeltas{}}}
			per := uint64(tc.perDep)
			for i := range tc.deps {
				msg.GetDeltas().Deltas = append(msg.GetDeltas().Deltas, &fuseboxv1.DependencyCounts{
					Dependency: fmt.Sprintf("dep-%03d", i),
					Counts:     &fuseboxv1.Counts{FirstAttempts: per, Successes: per - per/10, Failures: per / 10}})
			}
			counter := a.m.outcomes.WithLabelValues("session")
			base := value(b, counter)
			want := base + float64(b.N*tc.deps*tc.perDep)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if err := stream.Send(msg); err != nil {
					b.Fatal(err)
				}
			}
			for value(b, counter) < want {
				runtime.Gosched()
			}
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N*tc.deps*tc.perDep)/el.Seconds(), "outcomes/s")
			b.ReportMetric(float64(b.N*tc.deps*tc.perDep)/el.Seconds()/float64(runtime.GOMAXPROCS(0)), "outcomes/s/core")
			stream.CloseSend()
		})
	}
}

// Check over the unix socket: latency percentiles of sequential calls, and
// throughput of parallel ones.
func BenchmarkCheckUnix(b *testing.B) {
	a := startAgent(b, testConfig(b, "bench-check"), WithDefaultPolicy(benchPolicy()))
	c := dial(b, a.Agent)
	req := &fuseboxv1.CheckRequest{Dependency: "db", Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST}
	ctx := ctxT(b, 10*time.Minute)
	if _, err := c.Check(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.Run("sequential", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			if _, err := c.Check(ctx, req); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Check(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "checks/s")
	})
}
