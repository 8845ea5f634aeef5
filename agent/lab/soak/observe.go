package soak

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// observe follows agent a's pushed snapshots of the soak's dependencies
// over its unix socket until ctx ends: one Session at a time, opened again
// whenever it ends (the agent restarts), each tagged with the incarnation
// running when its Welcome came.
func observe(ctx context.Context, m *monitor, a *fleet.Process, socket string) error {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}))
	if err != nil {
		return fmt.Errorf("soak: observer of %s: %w", a.Name(), err)
	}
	defer conn.Close()
	api := fuseboxv1.NewAgentClient(conn)
	for ctx.Err() == nil {
		err := follow(ctx, m, a, api)
		if ctx.Err() != nil {
			return nil
		}
		_ = err // the agent went away: open a new session once it is back
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	return nil
}

func follow(ctx context.Context, m *monitor, a *fleet.Process, api fuseboxv1.AgentClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := api.Session(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	hello := &fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{
		Service: "soak-observer", Instance: a.Name(), Dependencies: []string{DepHealthy, DepDead, DepOps}}}}
	if err := stream.Send(hello); err != nil {
		return err
	}
	incarnation := -1
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		now := time.Now()
		if resp.GetWelcome() != nil {
			pid, inc, _ := a.Running()
			if pid == 0 {
				return errors.New("welcome from an agent that is not running")
			}
			incarnation = inc
		}
		if incarnation < 0 {
			continue
		}
		for _, s := range resp.GetUpdate().GetSnapshots() {
			m.snapshot(now, a.Name(), incarnation, s.GetDependency(), breakerOf(s))
		}
	}
}

// breakerOf reads a pushed snapshot.
func breakerOf(s *fuseboxv1.DecisionSnapshot) Breaker {
	p, _ := sharedstate.ParsePolicy(s.GetPolicyJson()) // every push carries it
	b := Breaker{State: "closed", LocalOpen: s.GetNodeLocalOpen(), Reason: s.GetOverrideReason(),
		MinimumRequests: uint32(p.Breaker.MinimumRequests), Generation: s.GetGeneration()}
	switch s.GetState() {
	case fuseboxv1.BreakerState_BREAKER_STATE_OPEN:
		b.State = "open"
	case fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN:
		b.State = "half_open"
	}
	switch s.GetOverride() {
	case fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_OPEN:
		b.Override = "forced_open"
	case fuseboxv1.OverrideState_OVERRIDE_STATE_FORCED_CLOSED:
		b.Override = "forced_closed"
	}
	return b
}

// readDesired reads what etcd holds for the write dependency: its
// effective policy's minimumRequests and its override, if in force at now.
func readDesired(ctx context.Context, st *store.Store, now time.Time) (Desired, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, _, err := st.EffectivePolicy(ctx, DepOps)
	if err != nil {
		return Desired{}, err
	}
	d := Desired{MinimumRequests: uint32(max(p.Breaker.MinimumRequests, 0))}
	o, err := st.GetOverride(ctx, DepOps)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return Desired{}, err
	case o.ActiveAt(now):
		switch o.State {
		case sharedstate.ForcedOpen:
			d.Override = "forced_open"
		case sharedstate.ForcedClosed:
			d.Override = "forced_closed"
		}
		d.Reason = o.Reason
	}
	return d, nil
}
