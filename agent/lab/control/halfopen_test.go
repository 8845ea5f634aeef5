package control

import (
	"bufio"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// TestWatchShowsHalfOpenThenOpen: two real agents open a breaker, and the
// first probe of its half-open state fails at once, so the agents reopen it
// ("half-open -> open" in their logs). watch shows what they did: open ->
// half-open, then half-open -> open, never "open -> open". The coordinator
// here ticks once an hour, as its default second is longer than a probe
// that fails at once: half-open is not sampled by a tick, it is known from
// the record that follows it.
func TestWatchShowsHalfOpenThenOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and two agents")
	}
	const dep = "payments"
	f := startCoordinator(t, setup{coord: []coordinator.Option{coordinator.WithTickInterval(time.Hour)}})
	c := f.Coordinator()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Store().PutPolicy(ctx, dep, []byte(`{"breaker":{"openDuration":"1s","maxOpenDuration":"2s","fleetMaxOpenDuration":"2s"}}`),
		store.WriteOptions{Actor: "setup"}); err != nil {
		t.Fatal(err)
	}
	agents := startAgents(t, f, 2)
	waitAgentsWithPolicy(t, c, agents, dep, time.Second)
	confirm(t, agents, dep)

	cmd, stdout, _ := startWatch(t, []string{"FUSEBOX_COORDINATOR=" + c.GRPCAddr()}, "--dependency", dep, "-o", "json")
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 64)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(lines)
		r := bufio.NewReader(stdout)
		for { // bounded by the watch's output, which ends when the cleanup kills it
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			select {
			case lines <- line:
			case <-done:
				return
			}
		}
	}()

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var seen []string
	for halfOpen := false; ; {
		select {
		case <-tick.C:
			for _, a := range agents {
				callThrough(a, dep, true) // failing throughout: it opens, and every probe fails
			}
			continue
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("watch ended; it printed %v", seen)
			}
			e := parseEvents(t, line)[0]
			if e.Type != "transition" {
				continue
			}
			seen = append(seen, e.Previous+" -> "+e.State)
			switch {
			case e.Previous == "open" && e.State == "open":
				t.Fatalf("watch printed open -> open (generation %d) where the agents went half-open -> open: %v", e.Generation, seen)
			case e.Previous == "open" && e.State == "half-open":
				halfOpen = true
			case e.Previous == "half-open" && e.State == "open":
				if !halfOpen {
					t.Fatalf("half-open -> open before open -> half-open: %v", seen)
				}
				if !strings.Contains(e.Reason, "probe") {
					t.Errorf("the reopen's reason %q does not name the probe", e.Reason)
				}
				return
			}
		case <-ctx.Done():
			t.Fatalf("no half-open -> open within a minute; watch printed %v", seen)
		}
	}
}
