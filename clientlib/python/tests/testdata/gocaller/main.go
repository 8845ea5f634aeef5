// Command gocaller is the Go clientlib caller of the Python client's tests:
// it connects to an agent with clientlib, waits (up to -timeout) until the
// dependency's breaker, as that agent's snapshot shows it, is in the -want
// state (closed, open, half-open, forced-open or forced-closed; empty: any),
// then makes -calls calls of an attempt function that succeeds, and prints
// what it saw as one JSON object. It exits 1 when the state was not reached.
//
// It lives under testdata so that `go vet ./...` and the binaries leave it
// alone; the tests build it with `go build ./clientlib/python/tests/testdata/gocaller`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
)

type report struct {
	Connected bool   `json:"connected"`
	FromAgent bool   `json:"from_agent"`
	State     string `json:"state"`
	Override  string `json:"override"`
	Reached   bool   `json:"reached"`
	OK        int    `json:"ok"`
	Rejected  int    `json:"rejected"`
	Errors    int    `json:"errors"`
	Calls     int    `json:"calls"`
}

func stateOf(s clientlib.Status) string {
	if s.Override != clientlib.OverrideNone {
		return s.Override.String()
	}
	return s.State.String()
}

func main() {
	agent := flag.String("agent", "", "agent address, unix:///path")
	dep := flag.String("dependency", "", "dependency name")
	want := flag.String("want", "", "breaker state to wait for")
	calls := flag.Int("calls", 0, "calls to make once the state is reached")
	timeout := flag.Duration("timeout", 20*time.Second, "how long to wait for the state")
	flag.Parse()

	c, err := clientlib.New(clientlib.Config{AgentAddress: *agent, Service: "gocaller"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gocaller:", err)
		os.Exit(2)
	}
	defer c.Close()
	d := c.Dependency(*dep)
	var r report
	deadline := time.Now().Add(*timeout)
	for {
		s := d.Status()
		r.Connected, r.FromAgent, r.State, r.Override = c.AgentConnected(), s.FromAgent, stateOf(s), s.Override.String()
		if s.FromAgent && (*want == "" || r.State == *want) {
			r.Reached = true
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling a status: there is no event to wait on across processes
	}
	for range *calls {
		r.Calls++
		err := d.Do(context.Background(), clientlib.Idempotent, func(context.Context, clientlib.Attempt) error { return nil })
		switch {
		case err == nil:
			r.OK++
		case errors.Is(err, clientlib.ErrOpen):
			r.Rejected++
		default:
			r.Errors++
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	if !r.Reached {
		os.Exit(1)
	}
}
