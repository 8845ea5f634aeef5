package agent

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
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

// Gossip bytes per second per agent with 5 agents and 100 active
// dependencies: every agent's clients report traffic for all 100 every
// 50 ms; each iteration measures 2 s of gossip sent (broadcasts, relays,
// direct sends and push-pull). The agents run the production timings
// (tick 100 ms, gossip interval 200 ms, push-pull 15 s).
func BenchmarkGossipBytes(b *testing.B) {
	f := newFleetWith(b, 5, false, func(c *Config) {
		d := DefaultConfig()
		c.TickInterval, c.GossipInterval, c.PushPullInterval = d.TickInterval, d.GossipInterval, d.PushPullInterval
	})
	const deps = 100
	req := &fuseboxv1.ReportRequest{}
	for i := range deps {
		req.Outcomes = append(req.Outcomes, &fuseboxv1.OutcomeReport{Dependency: fmt.Sprintf("dep-%03d", i),
			Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_SUCCESS, Count: 5})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, a := range f.agents {
		c := dial(b, a.Agent)
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if _, err := c.Report(ctxT(b, 5*time.Second), req); err != nil {
						b.Error(err)
						return
					}
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	out := func() (bytes, msgs float64) {
		for _, a := range f.agents {
			s := a.gossip.Stats()
			for _, k := range gossip.Kinds {
				bytes += float64(s.BytesOut[k])
				msgs += float64(s.MsgsOut[k])
			}
		}
		return bytes, msgs
	}
	// Warm up: every agent knows every dependency. Not every row of every
	// node everywhere: 100 busy dependencies on 5 agents make more row
	// updates than the gossip rounds carry (agent/README.md, "Performance"), so the
	// share of the fleet's rows each agent holds is measured instead.
	sstest.Eventually(b, 30*time.Second, "every dependency known everywhere", func() bool {
		for _, a := range f.agents {
			for i := range deps {
				if _, ok := a.eng.Fleet(fmt.Sprintf("dep-%03d", i)); !ok {
					return false
				}
			}
		}
		return true
	})
	rowsKnown := func() float64 {
		known := 0
		for _, a := range f.agents {
			for i := range deps {
				ft, _ := a.eng.Fleet(fmt.Sprintf("dep-%03d", i))
				known += ft.FleetNodes
			}
		}
		return float64(known) / float64(len(f.agents)*len(f.agents)*deps)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var totalBytes, totalMsgs, known float64
	var el time.Duration
	for range b.N {
		b0, m0 := out()
		t0 := time.Now()
		time.Sleep(2 * time.Second)
		b1, m1 := out()
		known += rowsKnown()
		el += time.Since(t0)
		totalBytes += b1 - b0
		totalMsgs += m1 - m0
	}
	b.StopTimer()
	b.ReportMetric(totalBytes/el.Seconds()/float64(len(f.agents)), "bytes/s/agent")
	b.ReportMetric(totalMsgs/el.Seconds()/float64(len(f.agents)), "msgs/s/agent")
	b.ReportMetric(100*known/float64(b.N), "%rows-known")
}
