package sharedstate_test

import (
	"fmt"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Two nodes pool their counts: neither has seen minimumRequests (20)
// failures on its own, but together they have, so the first to evaluate
// proposes opening the breaker and the other follows the record.
func Example() {
	clock := sharedstate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a, _ := sharedstate.NewEngine(sharedstate.EngineConfig{Node: "node-a", Clock: clock})
	b, _ := sharedstate.NewEngine(sharedstate.EngineConfig{Node: "node-b", Clock: clock})

	for range 10 {
		_ = a.Record("shipping-api", sharedstate.FirstAttempt, sharedstate.Failure)
		_ = b.Record("shipping-api", sharedstate.FirstAttempt, sharedstate.Failure)
	}
	for _, row := range b.RowsToSend() { // gossip b -> a
		a.ApplyRow(row)
	}
	for _, rec := range a.Tick() { // a proposes; the record reaches b
		fmt.Printf("%s proposes generation %d: %s\n", rec.Origin, rec.Generation, rec.State)
		b.ApplyRecord(rec)
	}
	fmt.Println("b decides:", b.Snapshot("shipping-api").DecideFirst())

	clock.Advance(5 * time.Second) // openDuration
	b.Tick()
	fmt.Println("b after 5s:", b.Snapshot("shipping-api").State)
	// Output:
	// node-a proposes generation 1: open
	// b decides: reject(open)
	// b after 5s: half-open
}

func ExamplePolicy_Validate() {
	p := sharedstate.DefaultPolicy()
	p.Breaker.FailureRateThreshold = 1.5
	p.Retry.MaxAttempts = 0
	fmt.Println(p.Validate())
	// Output:
	// breaker.failureRateThreshold: must be in (0,1], got 1.5
	// retry.maxAttempts: must be between 1 and 100, got 0
}

func ExampleMergePolicy() {
	patch, err := sharedstate.ParsePolicyPatch([]byte(`{"dependency": "shipping-api", "breaker": {"minimumRequests": 50}}`))
	if err != nil {
		panic(err)
	}
	p := sharedstate.MergePolicy(sharedstate.DefaultPolicy(), patch)
	fmt.Println(p.Dependency, p.Breaker.MinimumRequests, p.Breaker.Window, p.Validate())
	// Output: shipping-api 50 10s <nil>
}
