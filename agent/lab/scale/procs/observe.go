package procs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// observers are one Session per agent, following one dependency: the
// snapshots an agent pushes to its clients, which clientlib decides from.
type observers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	first []time.Time // when each agent's snapshot first showed the breaker open
	errs  []error     // why each observer stopped early
	left  int
	done  chan struct{} // closed when every agent opened
}

// observe opens the sessions and waits for every agent's Welcome (after
// it, the agent pushes every change of dep's snapshot).
func observe(ctx context.Context, f *fleet.Fleet, dep string) (*observers, error) {
	ctx, cancel := context.WithCancel(ctx)
	n := f.Size()
	o := &observers{cancel: cancel, first: make([]time.Time, n), errs: make([]error, n), left: n, done: make(chan struct{})}
	welcomed := make(chan error, n)
	for i := range n {
		api := f.Client(i)
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			err := o.follow(ctx, i, api, dep, welcomed)
			if err != nil && ctx.Err() == nil {
				o.mu.Lock()
				o.errs[i] = fmt.Errorf("%s: session: %w", fleet.Name(i), err)
				o.mu.Unlock()
			}
		}()
	}
	for range n {
		if err := <-welcomed; err != nil {
			o.stop()
			return nil, fmt.Errorf("scale-procs: observer session: %w", err)
		}
	}
	return o, nil
}

// follow runs agent i's session until its snapshot of dep shows the
// breaker open or ctx ends. It sends one value to welcomed.
func (o *observers) follow(ctx context.Context, i int, api fuseboxv1.AgentClient, dep string, welcomed chan<- error) (err error) {
	sent := false
	defer func() {
		if !sent {
			welcomed <- fmt.Errorf("%s: %w", fleet.Name(i), err)
		}
	}()
	stream, err := api.Session(ctx)
	if err != nil {
		return err
	}
	hello := &fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{
		Service: "scale-procs", Instance: "observer", Dependencies: []string{dep}}}}
	if err := stream.Send(hello); err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		now := time.Now()
		if resp.GetWelcome() != nil && !sent {
			sent = true
			welcomed <- nil
		}
		for _, s := range resp.GetUpdate().GetSnapshots() {
			if s.GetDependency() != dep {
				continue
			}
			if st := s.GetState(); st == fuseboxv1.BreakerState_BREAKER_STATE_OPEN || st == fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN {
				o.markOpen(i, now)
				return nil
			}
		}
	}
}

func (o *observers) markOpen(i int, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.first[i].IsZero() {
		return
	}
	o.first[i] = at
	o.left--
	if o.left == 0 {
		close(o.done)
	}
}

// opened returns how many agents opened so far.
func (o *observers) opened() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.first) - o.left
}

// wait waits until every agent opened or ctx ends, and returns when each
// opened (zero: not yet).
func (o *observers) wait(ctx context.Context) ([]time.Time, error) {
	var err error
	select {
	case <-o.done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	first := append([]time.Time(nil), o.first...)
	if err != nil {
		for i, e := range o.errs {
			if e != nil && first[i].IsZero() {
				err = fmt.Errorf("%w; %v", err, e)
				break
			}
		}
		err = fmt.Errorf("%d agents never held the breaker open: %w", o.left, err)
	}
	return first, err
}

// stop ends the sessions and waits for them.
func (o *observers) stop() {
	o.cancel()
	o.wg.Wait()
}
