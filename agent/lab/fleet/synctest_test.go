package fleet

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// A fleet on the simulated network runs inside a synctest bubble, on
// virtual time: built from t.Context() inside the bubble, it reaches full
// membership, a trip reported on two agents reaches every agent, and
// after Close nothing is left (the bubble fails on a goroutine left
// blocked). The scale scenarios in virtual time build on this.
func TestSimFleetInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 6
		p := sharedstate.DefaultPolicy()
		start := time.Now()
		f, err := New(t.Context(), Config{N: n, Dir: t.TempDir(), Sim: &simnet.Config{Seed: 1}, Policy: &p})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("full membership of %d agents after %v of virtual time", n, time.Since(start))
		deadline := time.Now().Add(time.Minute)
		for open := 0; open < n; {
			for _, i := range []int{0, n / 2} {
				if err := f.Report(t.Context(), i, []string{"dep-v"}, 0, 20); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(100 * time.Millisecond)
			open = 0
			for _, a := range f.Agents() {
				if s := a.Engine().Snapshot("dep-v"); s != nil && s.State != sharedstate.Closed {
					open++
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d agents hold dep-v open after a minute of virtual time", open, n)
			}
		}
		t.Logf("every agent holds the trip after %v of virtual time", time.Since(start))
		f.Close()
		// memberlist's last probe still waits on its timeout after
		// Shutdown: let virtual time run it out.
		time.Sleep(10 * time.Second)
		synctest.Wait()
	})
}
