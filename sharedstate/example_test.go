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

// A dependency's document is read over a copy of the fleet default: what
// it leaves out keeps the default's value.
func ExampleDecodePolicy() {
	p, err := sharedstate.DecodePolicy(sharedstate.DefaultPolicy(),
		[]byte(`{"dependency": "shipping-api", "breaker": {"minimumRequests": 50}}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Dependency, p.Breaker.MinimumRequests, p.Breaker.Window, p.Validate())
	// Output: shipping-api 50 10s <nil>
}

// Writing a dependency's policy: a JSON document that sets only what
// differs from the fleet default (policies/_default) and is read over it. CheckPolicyDocument is what `fuseboxctl policy lint` and
// every write run: every violation is named by its JSON path, and a valid
// policy is linted against the callers' deadline.
func ExampleCheckPolicyDocument() {
	doc := []byte(`{"dependency": "shipping-api",
	 "breaker": {"failureRateThreshold": 0.3, "window": "30s"},
	 "retry":   {"maxAttempts": 4, "perAttemptTimeout": "800ms"}}`)
	violations, warnings := sharedstate.CheckPolicyDocument(doc, sharedstate.DefaultPolicy(), 2*time.Second)
	fmt.Println("violations:", violations)
	for _, w := range warnings {
		fmt.Println("warning:", w)
	}

	bad := []byte(`{"dependency": "shipping-api", "breaker": {"window": "abc", "failureRateThreshold": 1.5}, "retry": {"maxAttempts": "3"}}`)
	violations, _ = sharedstate.CheckPolicyDocument(bad, sharedstate.DefaultPolicy(), 0)
	for _, v := range violations {
		fmt.Println(v)
	}
	// Output:
	// violations: []
	// warning: retry: maxAttempts × perAttemptTimeout + backoff = 4 × 800ms + 700ms = 3.9s exceeds the deadline 2s; only 2 attempt(s) fit
	// breaker.failureRateThreshold: must be in (0,1], got 1.5
	// breaker.window: invalid duration "abc": want a Go duration such as "500ms" or "2m"
	// retry.maxAttempts: must be an integer, got "3"
}

// ParsePolicyOver turns a document into the policy the agents enforce:
// the document read over the fleet default, validated.
func ExampleParsePolicyOver() {
	p, err := sharedstate.ParsePolicyOver(sharedstate.DefaultPolicy(), "shipping-api",
		[]byte(`{"throttle": {"enabled": true, "k": 1.5}, "concurrency": {"maxInFlight": 200}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Dependency, p.Throttle.Enabled, p.Throttle.K, p.Throttle.MinRequests, p.Concurrency.MaxInFlight, p.Breaker.Window)
	// Output: shipping-api true 1.5 20 200 10s
}
