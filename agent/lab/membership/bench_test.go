package membership

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// Gossip bytes per second per agent with 5 agents and 100 active
// dependencies: every agent's clients report traffic for all 100 every
// 50 ms; each iteration measures 2 s of gossip sent (broadcasts, relays,
// direct sends and push-pull). The agents run the production timings
// (tick, gossip interval and push-pull of agent.DefaultConfig()).
func BenchmarkGossipBytes(b *testing.B) {
	f := start(b, 5, false, func(_ int, c *agent.Config) {
		d := agent.DefaultConfig()
		c.TickInterval, c.GossipInterval, c.PushPullInterval = d.TickInterval, d.GossipInterval, d.PushPullInterval
	})
	agents := f.Agents()
	const deps = 100
	req := &fuseboxv1.ReportRequest{}
	for i := range deps {
		req.Outcomes = append(req.Outcomes, &fuseboxv1.OutcomeReport{Dependency: fmt.Sprintf("dep-%03d", i),
			Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_SUCCESS, Count: 5})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range agents {
		c := f.Client(i)
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
					if _, err := c.Report(fleettest.Ctx(b, 5*time.Second), req); err != nil {
						b.Error(err)
						return
					}
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	out := func() (bytes, msgs float64) {
		for _, a := range agents {
			s := a.Gossip().Stats()
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
		for _, a := range agents {
			for i := range deps {
				if _, ok := a.Engine().Fleet(fmt.Sprintf("dep-%03d", i)); !ok {
					return false
				}
			}
		}
		return true
	})
	rowsKnown := func() float64 {
		known := 0
		for _, a := range agents {
			for i := range deps {
				ft, _ := a.Engine().Fleet(fmt.Sprintf("dep-%03d", i))
				known += ft.FleetNodes
			}
		}
		return float64(known) / float64(len(agents)*len(agents)*deps)
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
	b.ReportMetric(totalBytes/el.Seconds()/float64(len(agents)), "bytes/s/agent")
	b.ReportMetric(totalMsgs/el.Seconds()/float64(len(agents)), "msgs/s/agent")
	b.ReportMetric(100*known/float64(b.N), "%rows-known")
}
