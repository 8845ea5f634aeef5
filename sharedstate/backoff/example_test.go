package backoff_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
)

// A loop that tries again until it succeeds keeps a Backoff: each failure
// waits the next wait, a success resets it.
func ExampleBackoff() {
	b := backoff.New(backoff.Policy{Base: 100 * time.Millisecond, Max: time.Second, Jitter: backoff.None}, nil)
	connect := func(try int) error {
		if try < 6 {
			return errors.New("refused")
		}
		return nil
	}
	for try := 0; connect(try) != nil; try++ {
		fmt.Println(b.Next()) // time.Sleep(b.Next()) in a real loop
	}
	b.Reset()
	fmt.Println("after a success:", b.Next())
	// Output:
	// 100ms
	// 200ms
	// 400ms
	// 800ms
	// 1s
	// 1s
	// after a success: 100ms
}
